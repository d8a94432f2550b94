package llm

// Category is one category known to RuleModel's keyword table, with its
// Chinese and English names.
type Category struct {
	// Chinese is the Chinese name, e.g. "餐饮".
	Chinese string
	// English is the English name, e.g. "Food".
	English string
	// Kind is TypeExpense or TypeIncome, or "" for categories that fit
	// both (e.g. gifts, which can be given or received).
	Kind string
}

// categoryRule ties a Category to the keywords that select it.
//
// Keywords are lower case. ASCII keywords match whole words (an "s" or "es"
// plural is accepted); other keywords match as substrings. Strong keywords
// always beat weak ones (generic verbs such as 买/buy); among strong matches
// the longest keyword wins, then the earliest.
type categoryRule struct {
	cat    Category
	strong []string
	weak   []string
}

var categoryRules = []categoryRule{
	{
		cat: Category{Chinese: "餐饮", English: "Food", Kind: TypeExpense},
		strong: []string{
			"吃", "饭", "早餐", "早饭", "早点", "午餐", "午饭", "中饭", "晚餐", "晚饭", "夜宵", "宵夜",
			"外卖", "粉", "面条", "面馆", "拉面", "米线", "包子", "饺子", "馄饨", "奶茶", "咖啡", "饮料",
			"零食", "水果", "买菜", "蔬菜", "肉", "火锅", "烧烤", "聚餐", "餐厅", "食堂", "快餐", "肯德基",
			"麦当劳", "星巴克", "瑞幸", "喜茶", "喝", "酒水", "啤酒", "茶", "甜品", "蛋糕", "面包", "牛奶", "买水", "矿泉水",
			"breakfast", "brunch", "lunch", "dinner", "supper", "meal", "food", "snack", "restaurant",
			"cafe", "coffee", "latte", "cappuccino", "espresso", "tea", "milk tea", "bubble tea", "boba",
			"juice", "drink", "beer", "wine", "pizza", "burger", "sandwich", "sushi", "noodle", "ramen",
			"takeout", "takeaway", "grocery", "groceries", "fruit", "bakery", "bread", "starbucks",
			"mcdonald", "mcdonalds", "kfc", "water", "uber eats", "doordash", "dessert", "ice cream",
		},
	},
	{
		cat: Category{Chinese: "交通", English: "Transport", Kind: TypeExpense},
		strong: []string{
			"打车", "出租车", "的士", "滴滴", "地铁", "公交", "巴士", "高铁", "动车", "火车", "机票", "飞机",
			"航班", "加油", "油费", "停车", "过路费", "高速费", "共享单车", "单车", "车费", "车票", "路费",
			"网约车", "taxi", "cab", "uber", "lyft", "didi", "bus", "subway", "metro", "train", "tram",
			"flight", "airfare", "plane", "gas", "fuel", "petrol", "parking", "toll", "commute", "ride",
			"bike", "scooter", "transit", "fare",
		},
	},
	{
		cat: Category{Chinese: "购物", English: "Shopping", Kind: TypeExpense},
		strong: []string{
			"购物", "衣服", "裤子", "裙子", "鞋", "包包", "淘宝", "京东", "拼多多", "日用品", "化妆品", "护肤",
			"面膜", "粉底", "口红", "数码", "手机", "电脑", "耳机", "家电", "家具", "超市", "商场",
			"shopping", "clothes", "clothing", "shirt", "t-shirt", "pants", "jeans", "shoe", "dress",
			"jacket", "amazon", "taobao", "mall", "phone", "iphone", "ipad", "macbook", "laptop", "headphone", "electronics",
			"furniture", "ikea", "cosmetics", "makeup", "toiletries", "supermarket",
		},
		weak: []string{"买", "网购", "bought", "buy", "purchase", "store", "shop"},
	},
	{
		cat: Category{Chinese: "居住", English: "Housing", Kind: TypeExpense},
		strong: []string{
			"房租", "租金", "租房", "房贷", "物业", "水费", "电费", "水电", "燃气", "煤气", "天然气", "暖气",
			"宽带", "网费", "话费", "维修", "家政", "保洁", "rent", "mortgage", "electricity",
			"electric bill", "power bill", "water bill", "gas bill", "utilities", "utility", "internet",
			"wifi", "broadband", "phone bill", "property fee", "hoa", "repair", "cleaning",
		},
	},
	{
		cat: Category{Chinese: "娱乐", English: "Entertainment", Kind: TypeExpense},
		strong: []string{
			"电影", "游戏", "唱歌", "ktv", "演唱会", "演出", "门票", "景点", "旅游", "旅行", "酒店", "民宿",
			"健身", "会员", "网吧", "酒吧", "桌游", "剧本杀", "movie", "cinema", "film", "netflix",
			"spotify", "game", "gaming", "steam", "concert", "museum", "gym", "karaoke", "bar", "pub",
			"hotel", "airbnb", "travel", "trip", "vacation", "subscription", "hobby",
		},
		weak: []string{"ticket", "show"},
	},
	{
		cat: Category{Chinese: "医疗", English: "Health", Kind: TypeExpense},
		strong: []string{
			"医院", "看病", "挂号", "药", "体检", "牙医", "看牙", "门诊", "口罩", "感冒", "doctor",
			"hospital", "clinic", "medicine", "medication", "pharmacy", "drugstore", "dentist", "dental",
			"checkup", "prescription", "pill", "vitamin", "therapy",
		},
	},
	{
		cat: Category{Chinese: "教育", English: "Education", Kind: TypeExpense},
		strong: []string{
			"学费", "培训", "课程", "网课", "上课", "书", "教材", "考试", "报名费", "文具", "tuition",
			"course", "class", "lesson", "book", "textbook", "school", "training", "exam", "stationery",
		},
	},
	{
		cat: Category{Chinese: "人情", English: "Gifts", Kind: ""},
		strong: []string{
			"红包", "礼物", "送礼", "礼金", "份子钱", "随礼", "请客", "捐款", "gift", "present",
			"red packet", "red envelope", "donation", "charity",
		},
	},
	{
		cat: Category{Chinese: "工资", English: "Salary", Kind: TypeIncome},
		strong: []string{
			"工资", "薪水", "薪资", "发薪", "月薪", "工钱", "salary", "paycheck", "payday", "wage",
			"payroll",
		},
		weak: []string{"got paid", "get paid", "been paid", "was paid"},
	},
	{
		cat:    Category{Chinese: "奖金", English: "Bonus", Kind: TypeIncome},
		strong: []string{"奖金", "年终奖", "绩效", "提成", "bonus", "commission"},
	},
	{
		cat:    Category{Chinese: "兼职", English: "Side job", Kind: TypeIncome},
		strong: []string{"兼职", "副业", "稿费", "外快", "私活", "freelance", "side job", "gig", "tips"},
	},
	{
		cat: Category{Chinese: "理财", English: "Investment", Kind: ""},
		strong: []string{
			"利息", "分红", "股息", "理财", "收益", "基金", "股票", "interest", "dividend", "stock",
			"investment", "crypto",
		},
	},
	{
		cat: Category{Chinese: "退款", English: "Refund", Kind: TypeIncome},
		strong: []string{
			"退款", "退货", "退钱", "报销", "返现", "refund", "reimbursement", "reimbursed", "cashback",
			"rebate",
		},
	},
}

// otherCategory is the catch-all category. RuleModel never sends it: when
// no keyword matches it omits category_name and lets the ledger decide.
var otherCategory = Category{Chinese: "其他", English: "Other"}

// Categories returns the categories RuleModel knows, in a stable order,
// ending with the catch-all 其他/Other. A ledger can seed its category
// table from this list so that every name RuleModel sends exists.
func Categories() []Category {
	out := make([]Category, 0, len(categoryRules)+1)
	for _, r := range categoryRules {
		out = append(out, r.cat)
	}
	return append(out, otherCategory)
}

// categoryMatch is the best keyword match of one category in a text.
type categoryMatch struct {
	cat    Category
	strong bool
	length int // keyword length in runes
	pos    int // byte offset of the match
}

func (m categoryMatch) beats(o categoryMatch) bool {
	if m.strong != o.strong {
		return m.strong
	}
	if m.length != o.length {
		return m.length > o.length
	}
	return m.pos < o.pos
}

// matchCategory returns the best category for text whose kind fits typ
// (any kind when typ is ""). text must be normalised (see normalize).
func matchCategory(text, typ string) (Category, bool) {
	var best categoryMatch
	found := false
	for _, r := range categoryRules {
		if typ != "" && r.cat.Kind != "" && r.cat.Kind != typ {
			continue
		}
		for i, list := range [][]string{r.strong, r.weak} {
			for _, kw := range list {
				pos, ok := findKeyword(text, kw)
				if !ok {
					continue
				}
				m := categoryMatch{cat: r.cat, strong: i == 0, length: runeLen(kw), pos: pos}
				if !found || m.beats(best) {
					best, found = m, true
				}
			}
		}
	}
	return best.cat, found
}

package llm

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// intentKind is what RuleModel decided a user message asks for.
type intentKind int

const (
	intentHelp intentKind = iota
	intentCreate
	intentListTransactions
	intentListCategories
)

// intent is the parse of one user message.
type intent struct {
	kind   intentKind
	zh     bool // the user wrote Chinese
	create CreateTransactionArgs
	list   ListTransactionsArgs
	// seenAmount is an amount found in a message that was otherwise not
	// understood (intentHelp), or 0.
	seenAmount float64
}

// Words removed before looking for type markers because they contain
// misleading characters (支付宝 contains 支付, 花呗 contains 花).
var neutralWords = []string{"支付宝", "花呗"}

// Markers that make a transaction income even next to an expense verb
// ("买衣服退款 200" is money coming back).
var strongIncomeMarkers = []string{
	"退款", "退货", "退钱", "报销", "返现", "refund", "refunded", "reimbursement", "reimbursed",
	"reimburse", "cashback", "rebate",
}

// Income phrases built on "paid"/"pay"; they are blanked out before looking
// for expense verbs, so "got paid 2000" is income while "paid 15 for
// parking" stays an expense.
var incomePayPhrases = []string{
	"got paid", "get paid", "gets paid", "getting paid", "been paid", "was paid", "were paid",
	"paid me", "pays me", "pay me", "paid back to me",
}

var incomeMarkers = []string{
	"工资", "薪水", "薪资", "发薪", "到账", "收到", "收入", "进账", "入账", "奖金", "年终奖", "赚", "挣",
	"抢到", "抢红包", "收红包", "领红包", "卖了", "卖掉", "转给我", "还我", "回款", "利息", "分红", "稿费",
	"salary", "paycheck", "payday", "wage", "received", "receive", "receiving", "income", "earned",
	"earn", "earning", "sold", "dividend", "bonus", "commission",
}

var expenseMarkers = []string{
	"花了", "花费", "花掉", "花钱", "买", "付了", "付款", "支付", "交了", "缴", "充值", "发红包", "发了红包",
	"发了个红包", "包红包", "给红包", "请客", "消费", "支出", "还款", "转账", "转了", "spent", "spend", "spending",
	"bought", "buy", "buying", "paid", "pay", "paying", "payed", "cost", "purchased", "purchase",
	"expense", "transfer", "transferred",
}

// Query markers. Strong markers make a message a query even when it
// contains a number; weak ones only when it has no amount.
var (
	strongQueryMarkers = []string{
		"多少", "几笔", "查询", "查一下", "查查", "查看", "列出", "显示", "统计", "汇总",
		"how much", "how many", "what did i", "what have i", "what's my", "what is my",
	}
	strongQueryPrefixes = []string{"list", "show", "display", "give me", "tell me", "what are"}
	weakQueryMarkers    = []string{
		"账单", "记录", "明细", "流水", "查", "看看", "哪些", "什么", "支出", "收入", "花销", "开销", "消费",
		"花了", "总共", "一共", "账目", "transactions", "transaction", "records", "history", "spending",
		"expenses", "expense", "income", "summary", "report", "statement", "spent", "balance", "ledger",
	}
	categoryQueryMarkers = []string{"分类", "类别", "类目", "category", "categories"}
	incomeQueryWords     = []string{"收入", "赚", "进账", "到账", "工资", "income", "earn", "earned", "received", "salary"}
	expenseQueryWords    = []string{"花", "支出", "消费", "开销", "花销", "spend", "spent", "spending", "expense", "cost"}
)

// maxParsedRunes bounds how much of a message is parsed; bookkeeping
// phrases are short and this keeps the work per message bounded.
const maxParsedRunes = 500

// parseUtterance reads one user message. now gives "today"; catLang picks
// the language of category names ("zh", "en" or "" for the user's).
func parseUtterance(raw string, now time.Time, catLang string) intent {
	text := normalize(strings.TrimSpace(raw))
	if rs := []rune(text); len(rs) > maxParsedRunes {
		text = string(rs[:maxParsedRunes])
	}
	in := intent{zh: hasHan(raw)}
	amount, hasAmount := extractAmount(text)

	if isQuery(text, hasAmount) {
		if containsAny(text, categoryQueryMarkers...) {
			in.kind = intentListCategories
			return in
		}
		in.kind = intentListTransactions
		in.list.DateFrom, in.list.DateTo = queryPeriod(text, now)
		switch {
		case containsAny(text, incomeQueryWords...):
			in.list.Type = TypeIncome
		case containsAny(text, expenseQueryWords...):
			in.list.Type = TypeExpense
		}
		return in
	}
	if !hasAmount || roundCents(amount.value) <= 0 {
		return in
	}
	typ, typeKnown := transactionType(text)
	cat, catKnown := matchCategory(text, typ)
	if !catKnown && !typeKnown && !amount.marked {
		// A bare number ("35", "asdf 12"): we cannot tell what it was.
		in.seenAmount = roundCents(amount.value)
		return in
	}
	in.kind = intentCreate
	in.create = CreateTransactionArgs{
		Type:   typ,
		Amount: roundCents(amount.value),
		Note:   strings.TrimSpace(raw),
	}
	if catKnown {
		in.create.CategoryName = categoryName(cat, catLang, in.zh)
	}
	if d, ok := mentionedDate(text, now); ok {
		in.create.OccurDate = d.Format(DateLayout)
	}
	return in
}

func categoryName(c Category, lang string, zh bool) string {
	switch {
	case lang == "zh", lang == "" && zh:
		return c.Chinese
	default:
		return c.English
	}
}

func isQuery(text string, hasAmount bool) bool {
	if containsAny(text, strongQueryMarkers...) {
		return true
	}
	for _, p := range strongQueryPrefixes {
		if pos, ok := findKeyword(text, p); ok && pos == 0 {
			return true
		}
	}
	return !hasAmount && (containsAny(text, weakQueryMarkers...) || containsAny(text, categoryQueryMarkers...))
}

// transactionType decides income or expense. known is false when nothing
// in the text said so and the default (expense) was used.
func transactionType(text string) (typ string, known bool) {
	for _, w := range neutralWords {
		text = strings.ReplaceAll(text, w, strings.Repeat(" ", len(w)))
	}
	if containsAny(text, strongIncomeMarkers...) {
		return TypeIncome, true
	}
	incPos, inc := findAny(text, append(append([]string{}, incomePayPhrases...), incomeMarkers...)...)
	blanked := text
	for _, p := range incomePayPhrases {
		blanked = strings.ReplaceAll(blanked, p, strings.Repeat(" ", len(p)))
	}
	expPos, exp := findAny(blanked, expenseMarkers...)
	switch {
	case inc && exp:
		if incPos < expPos {
			return TypeIncome, true
		}
		return TypeExpense, true
	case inc:
		return TypeIncome, true
	case exp:
		return TypeExpense, true
	}
	// No verb: let the category decide ("bonus 5000" is income).
	if c, ok := matchCategory(text, ""); ok && c.Kind == TypeIncome {
		return TypeIncome, true
	}
	return TypeExpense, false
}

func day(t time.Time) time.Time {
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, t.Location())
}

var relativeDays = []struct {
	offset int
	words  []string
}{
	// Longest phrases first: "day before yesterday" contains "yesterday".
	{-3, []string{"大前天"}},
	{-2, []string{"前天", "前日", "day before yesterday"}},
	{-1, []string{"昨天", "昨日", "昨晚", "昨儿", "yesterday", "last night"}},
	{0, []string{"今天", "今日", "今晚", "今早", "今儿", "today", "tonight", "this morning", "this afternoon", "this evening"}},
}

// mentionedDate returns the day a transaction message refers to, if any.
func mentionedDate(text string, now time.Time) (time.Time, bool) {
	today := day(now)
	if m := isoDateRe.FindStringSubmatch(text); m != nil {
		if d, ok := makeDate(atoi(m[1]), atoi(m[2]), atoi(m[3]), today); ok {
			return d, true
		}
	}
	if m := cnDateRe.FindStringSubmatch(text); m != nil {
		if d, ok := makeDate(today.Year(), atoi(m[1]), atoi(m[2]), today); ok {
			if d.After(today) {
				d = d.AddDate(-1, 0, 0)
			}
			return d, true
		}
	}
	for _, rd := range relativeDays {
		if containsAny(text, rd.words...) {
			return today.AddDate(0, 0, rd.offset), true
		}
	}
	return time.Time{}, false
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func makeDate(y, m, d int, ref time.Time) (time.Time, bool) {
	t := time.Date(y, time.Month(m), d, 0, 0, 0, 0, ref.Location())
	if t.Year() != y || int(t.Month()) != m || t.Day() != d {
		return time.Time{}, false // 2月30日
	}
	return t, true
}

var lastNDaysRe = regexp.MustCompile(`(?:最近|近|过去|last|past)\s*(\d+)\s*(?:天|days?)`)

// queryPeriod returns the inclusive date range a query refers to, or empty
// strings for "all time".
func queryPeriod(text string, now time.Time) (from, to string) {
	today := day(now)
	f := func(a, b time.Time) (string, string) { return a.Format(DateLayout), b.Format(DateLayout) }
	if d, ok := mentionedDate(text, now); ok {
		return f(d, d)
	}
	if m := lastNDaysRe.FindStringSubmatch(text); m != nil {
		if n := atoi(m[1]); n > 0 && n <= 3660 {
			return f(today.AddDate(0, 0, 1-n), today)
		}
	}
	monday := today.AddDate(0, 0, -((int(today.Weekday()) + 6) % 7))
	firstOfMonth := time.Date(today.Year(), today.Month(), 1, 0, 0, 0, 0, today.Location())
	switch {
	case containsAny(text, "上周", "上个星期", "上星期", "上个礼拜", "last week"):
		return f(monday.AddDate(0, 0, -7), monday.AddDate(0, 0, -1))
	case containsAny(text, "本周", "这周", "这个星期", "这星期", "本星期", "这个礼拜", "this week"):
		return f(monday, today)
	case containsAny(text, "最近一周", "过去一周", "近一周", "past week"):
		return f(today.AddDate(0, 0, -6), today)
	case containsAny(text, "上个月", "上月", "last month"):
		return f(firstOfMonth.AddDate(0, -1, 0), firstOfMonth.AddDate(0, 0, -1))
	case containsAny(text, "本月", "这个月", "这月", "当月", "this month"):
		return f(firstOfMonth, today)
	case containsAny(text, "今年", "本年", "this year"):
		return f(time.Date(today.Year(), 1, 1, 0, 0, 0, 0, today.Location()), today)
	}
	return "", ""
}

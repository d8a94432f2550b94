package llm

import (
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Amount parsing.
//
// Supported forms (after normalize):
//
//	35  35.5  4.50  8,000  1,234.56          plain Arabic numbers
//	¥35  $4.50  rmb 35  usd 20               currency prefixes
//	35元  35 块  35块钱  20 rmb  5 dollars  10 bucks  currency suffixes
//	5块5                                     5.5 (colloquial 块 + 角)
//	3.5k  2w  3千  1.2万                      ×1000 / ×10000 suffixes
//	二十五  三十块  一百二  两千五  一万二  五块五  simple Chinese numerals
//
// Numbers that are clearly not amounts are skipped: dates ("2024-05-01",
// "5月3日"), times ("12:30"), numbers glued to letters ("5g", "iphone15")
// and counts followed by a measure word or unit ("2杯", "3 people", "5km").
// Chinese numerals are read only when they contain 十/百/千/万 or are
// followed by 元/块, so words like 一下 or 一起 are never amounts.
//
// When several candidates remain, an Arabic number with a currency marker
// wins (the first one), then the last plain Arabic number ("lunch for 2 35"
// reads 35), then the first Chinese numeral.

var (
	isoDateRe   = regexp.MustCompile(`(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})`)
	cnDateRe    = regexp.MustCompile(`(\d{1,2})月(\d{1,2})[日号]?`)
	timeRe      = regexp.MustCompile(`\d{1,2}:\d{2}`)
	slashDateRe = regexp.MustCompile(`\b\d{1,2}/\d{1,2}\b`)
)

// blankDates replaces dates and times with a space so that their digits are
// not read as amounts.
func blankDates(s string) string {
	for _, re := range []*regexp.Regexp{isoDateRe, cnDateRe, timeRe, slashDateRe} {
		s = re.ReplaceAllString(s, " ")
	}
	return s
}

// amountCandidate is one number found in a text.
type amountCandidate struct {
	value   float64
	marked  bool // had a currency prefix or suffix
	chinese bool // written in Chinese numerals
}

var currencyPrefixWords = []string{"rmb", "cny", "usd"}

// Unit suffixes that mark a number as money, longest first.
var currencySuffixes = []string{"块钱", "块", "元", "圆", "刀", "rmb", "cny", "usd", "yuan", "dollars", "dollar", "bucks", "buck"}

// Measure words and units that mark a number as a count, not an amount.
var cnClassifiers = []string{
	"个", "杯", "件", "份", "次", "人", "位", "号", "日", "月", "年", "点", "分", "秒", "斤", "公斤", "克",
	"瓶", "罐", "张", "本", "双", "条", "天", "晚", "小时", "周", "岁", "折", "楼", "层", "路", "站",
	"颗", "只", "盒", "包", "支", "台", "辆", "套", "箱", "袋", "碗", "盘", "串", "公里", "里", "度",
	"期", "集", "页", "%",
}

var enClassifiers = []string{
	"x", "pcs", "pc", "people", "person", "persons", "friends", "guests", "cups", "cup", "bottles",
	"bottle", "items", "item", "times", "hours", "hour", "hrs", "hr", "mins", "minutes", "min", "days",
	"day", "nights", "night", "weeks", "week", "months", "month", "years", "year", "km", "kms", "miles",
	"mile", "mi", "kg", "kgs", "lbs", "lb", "g", "am", "pm", "st", "nd", "rd", "th", "floors", "tickets",
	"boxes", "bags", "slices", "pieces", "of", "liters", "litres", "l", "gallons",
}

// extractAmount finds the amount in a normalised text.
func extractAmount(text string) (amountCandidate, bool) {
	cands := findAmounts([]rune(blankDates(text)))
	var lastPlain, firstCN *amountCandidate
	for i := range cands {
		c := &cands[i]
		switch {
		case c.chinese:
			if firstCN == nil {
				firstCN = c
			}
		case c.marked:
			return *c, true
		default:
			lastPlain = c
		}
	}
	if lastPlain != nil {
		return *lastPlain, true
	}
	if firstCN != nil {
		return *firstCN, true
	}
	return amountCandidate{}, false
}

// findAmounts returns every plausible amount in rs, in order.
func findAmounts(rs []rune) []amountCandidate {
	var out []amountCandidate
	for i := 0; i < len(rs); {
		switch {
		case isASCIIDigit(rs[i]):
			c, end, ok := readArabic(rs, i)
			if ok {
				out = append(out, c)
			}
			i = end
		case isCNDigit(rs[i]) || rs[i] == '十':
			c, end, ok := readChinese(rs, i)
			if ok {
				out = append(out, c)
			}
			i = end
		default:
			i++
		}
	}
	return out
}

// readArabic reads the number starting at rs[i] with its prefix and suffix.
func readArabic(rs []rune, i int) (amountCandidate, int, bool) {
	j := i
	for j < len(rs) && isASCIIDigit(rs[j]) {
		j++
	}
	// Thousands separators: ",ddd" not followed by another digit.
	for j+3 < len(rs) && rs[j] == ',' && allDigits(rs[j+1:j+4]) && (j+4 == len(rs) || !isASCIIDigit(rs[j+4])) {
		j += 4
	}
	if j+1 < len(rs) && rs[j] == '.' && isASCIIDigit(rs[j+1]) {
		j++
		for j < len(rs) && isASCIIDigit(rs[j]) {
			j++
		}
	}
	end := j
	num := strings.ReplaceAll(string(rs[i:j]), ",", "")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return amountCandidate{}, end, false
	}
	c := amountCandidate{value: v}

	// Prefix: currency symbol or word, possibly separated by spaces.
	p := i - 1
	for p >= 0 && rs[p] == ' ' {
		p--
	}
	if p >= 0 && (rs[p] == '¥' || rs[p] == '$') {
		c.marked = true
	} else if i > 0 && isASCIILetter(rs[i-1]) {
		// Glued to a word ("iphone15", "v2.5"), unless that word is a
		// currency code ("rmb35").
		if !endsWithWord(rs[:i], currencyPrefixWords) {
			return amountCandidate{}, end, false
		}
		c.marked = true
	} else if p >= 0 && endsWithWord(rs[:p+1], currencyPrefixWords) {
		c.marked = true
	}

	// Multiplier suffix directly after the number.
	if end < len(rs) {
		switch {
		case (rs[end] == 'k' || rs[end] == 'w') && !letterAt(rs, end+1):
			if rs[end] == 'k' {
				c.value *= 1000
			} else {
				c.value *= 10000
			}
			end++
		case rs[end] == '千':
			c.value *= 1000
			end++
		case rs[end] == '万':
			c.value *= 10000
			end++
		}
	}
	// Unit suffix, possibly after spaces.
	q := skipSpaces(rs, end)
	if n, ok := hasPrefixAny(rs[q:], currencySuffixes); ok && (!isASCIILetter(rs[q]) || !letterAt(rs, q+n)) {
		c.marked = true
		end = q + n
		// "5块5" / "5块5毛": a single digit after 块 counts tenths.
		if rs[q] == '块' && end < len(rs) && isASCIIDigit(rs[end]) && !digitAt(rs, end+1) && rs[end-1] != '钱' {
			c.value += float64(rs[end]-'0') / 10
			end++
			if end < len(rs) && (rs[end] == '毛' || rs[end] == '角') {
				end++
			}
		}
		return c, end, true
	}
	if end < len(rs) && isASCIILetter(rs[end]) {
		return amountCandidate{}, end, false // "5g", "3rd"
	}
	if _, ok := hasPrefixAny(rs[q:], cnClassifiers); ok {
		return amountCandidate{}, end, false
	}
	if w := wordAt(rs, q); w != "" && contains(enClassifiers, w) {
		return amountCandidate{}, end, false
	}
	return c, end, true
}

func allDigits(rs []rune) bool {
	for _, r := range rs {
		if !isASCIIDigit(r) {
			return false
		}
	}
	return true
}

func letterAt(rs []rune, i int) bool { return i < len(rs) && isASCIILetter(rs[i]) }

func digitAt(rs []rune, i int) bool { return i < len(rs) && isASCIIDigit(rs[i]) }

func skipSpaces(rs []rune, i int) int {
	for i < len(rs) && rs[i] == ' ' {
		i++
	}
	return i
}

// hasPrefixAny reports the rune length of the first of prefixes that rs
// starts with.
func hasPrefixAny(rs []rune, prefixes []string) (int, bool) {
	s := string(rs[:min(len(rs), 8)]) // every prefix is shorter
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return runeLen(p), true
		}
	}
	return 0, false
}

// endsWithWord reports whether rs ends with one of words as a whole word.
func endsWithWord(rs []rune, words []string) bool {
	s := string(rs[max(0, len(rs)-8):]) // every word is shorter
	for _, w := range words {
		if strings.HasSuffix(s, w) {
			rest := []rune(s[:len(s)-len(w)])
			if len(rest) == 0 || !isASCIILetter(rest[len(rest)-1]) {
				return true
			}
		}
	}
	return false
}

// wordAt returns the run of ASCII letters (or a lone "%") starting at rs[i].
func wordAt(rs []rune, i int) string {
	if i < len(rs) && rs[i] == '%' {
		return "%"
	}
	j := i
	for j < len(rs) && isASCIILetter(rs[j]) {
		j++
	}
	return string(rs[i:j])
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

var cnDigits = map[rune]int{'零': 0, '〇': 0, '一': 1, '二': 2, '两': 2, '三': 3, '四': 4, '五': 5, '六': 6, '七': 7, '八': 8, '九': 9}

var cnUnits = map[rune]int{'十': 10, '百': 100, '千': 1000, '万': 10000}

func isCNDigit(r rune) bool { _, ok := cnDigits[r]; return ok }

func isCNNumeral(r rune) bool {
	_, d := cnDigits[r]
	_, u := cnUnits[r]
	return d || u
}

// readChinese reads a Chinese numeral starting at rs[i].
func readChinese(rs []rune, i int) (amountCandidate, int, bool) {
	j := i
	for j < len(rs) && isCNNumeral(rs[j]) {
		j++
	}
	end := j
	v, hasUnit, ok := parseChineseNumber(rs[i:j])
	if !ok || (i > 0 && rs[i-1] == '第') {
		return amountCandidate{}, end, false
	}
	c := amountCandidate{value: float64(v), chinese: true}
	q := skipSpaces(rs, end)
	if n, ok := hasPrefixAny(rs[q:], []string{"块钱", "块", "元", "圆"}); ok {
		c.marked = true
		end = q + n
		// "五块五" = 5.5
		if rs[q] == '块' && rs[end-1] != '钱' && end < len(rs) && isCNDigit(rs[end]) && (end+1 == len(rs) || !isCNNumeral(rs[end+1])) {
			c.value += float64(cnDigits[rs[end]]) / 10
			end++
			if end < len(rs) && (rs[end] == '毛' || rs[end] == '角') {
				end++
			}
		}
		return c, end, true
	}
	if !hasUnit {
		return amountCandidate{}, end, false
	}
	if _, ok := hasPrefixAny(rs[q:], cnClassifiers); ok {
		return amountCandidate{}, end, false
	}
	return c, end, true
}

// parseChineseNumber parses simple Chinese integers such as 二十五, 一百零五,
// 一百二 (=120), 两千五 (=2500) and 三万 (=30000). hasUnit reports whether a
// 十/百/千/万 occurred.
func parseChineseNumber(rs []rune) (value int, hasUnit, ok bool) {
	if len(rs) == 0 {
		return 0, false, false
	}
	total, section, digit := 0, 0, -1
	lastUnit, zero := 0, false
	for _, r := range rs {
		if d, isDigit := cnDigits[r]; isDigit {
			if d == 0 {
				zero = true
				continue
			}
			if digit >= 0 {
				return 0, false, false // "二三"
			}
			digit = d
			continue
		}
		u := cnUnits[r]
		hasUnit = true
		if digit < 0 {
			switch {
			case u == 10:
				digit = 1 // "十五"
			case u == 10000 && total+section > 0:
				digit = 0 // "十万"
			default:
				return 0, false, false // "万一", "百货"
			}
		}
		if u == 10000 {
			total = (total + section + digit) * 10000
			section = 0
		} else {
			if lastUnit != 0 && lastUnit != 10000 && u >= lastUnit {
				return 0, false, false // "十百"
			}
			section += digit * u
		}
		digit, lastUnit, zero = -1, u, false
	}
	if digit > 0 {
		// Colloquial "一百二" = 120: a trailing digit right after 百/千/万
		// counts the next lower unit.
		if !zero && lastUnit >= 100 {
			digit *= lastUnit / 10
		}
		section += digit
	}
	return total + section, hasUnit, true
}

// roundCents rounds v to two decimal places.
func roundCents(v float64) float64 { return math.Round(v*100) / 100 }

package llm

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// maxListedItems is how many transactions a summary lists one by one.
const maxListedItems = 5

// summarizer writes RuleModel's final reply from tool results.
type summarizer struct {
	zh    bool
	today time.Time
}

// summarize turns the tool results for the latest user message into one
// reply. calls maps tool call IDs to the calls that produced them.
func (s summarizer) summarize(results []Message, calls map[string]FunctionCall) string {
	parts := make([]string, 0, len(results))
	for _, r := range results {
		fc := calls[r.ToolCallID]
		name := fc.Name
		if name == "" {
			name = r.Name
		}
		v, isJSON := decodeJSON(r.Content)
		if name == "" && isJSON {
			name = sniffTool(v)
		}
		if isJSON {
			if m, ok := v.(map[string]any); ok && m[NotApprovedField] == true {
				parts = append(parts, s.notApproved(m))
				continue
			}
			if msg, ok := errorOf(v); ok {
				parts = append(parts, s.errorReply(name, msg))
				continue
			}
		}
		var part string
		switch {
		case !isJSON:
			part = s.plain(r.Content)
		case name == ToolCreateTransaction:
			part = s.created(v, fc.Arguments)
		case name == ToolListTransactions:
			part = s.transactions(v, fc.Arguments, r.Content)
		case name == ToolListCategories:
			part = s.categories(v, r.Content)
		default:
			part = s.plain(r.Content)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "\n")
}

func decodeJSON(s string) (any, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

// sniffTool guesses which tool produced a result that is not tied to a
// known tool call.
func sniffTool(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	switch {
	case m["transaction_id"] != nil:
		return ToolCreateTransaction
	case m["transactions"] != nil:
		return ToolListTransactions
	case m["categories"] != nil:
		return ToolListCategories
	}
	return ""
}

// errorOf reports the error in a tool result such as {"error":"..."} or
// {"error":{"message":"..."}}.
func errorOf(v any) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return "", false
	}
	switch e := m["error"].(type) {
	case nil:
		return "", false
	case string:
		if e == "" {
			return "", false
		}
		return e, true
	case map[string]any:
		if msg, ok := e["message"].(string); ok && msg != "" {
			return msg, true
		}
		b, _ := json.Marshal(e)
		return string(b), true
	case bool:
		if !e {
			return "", false
		}
		if msg, ok := m["message"].(string); ok && msg != "" {
			return msg, true
		}
		return "unknown error", true
	default:
		return fmt.Sprint(e), true
	}
}

func (s summarizer) errorReply(tool, msg string) string {
	msg = strings.TrimSpace(msg)
	if s.zh {
		msg = strings.TrimRight(msg, "。.")
		switch tool {
		case ToolCreateTransaction:
			return "抱歉，记账失败：" + msg + "。"
		case ToolListTransactions:
			return "抱歉，查询账目失败：" + msg + "。"
		case ToolListCategories:
			return "抱歉，获取分类失败：" + msg + "。"
		}
		return "抱歉，出错了：" + msg + "。"
	}
	msg = strings.TrimRight(msg, ".")
	switch tool {
	case ToolCreateTransaction:
		return "Sorry, I couldn't record that: " + msg + "."
	case ToolListTransactions:
		return "Sorry, I couldn't look up your transactions: " + msg + "."
	case ToolListCategories:
		return "Sorry, I couldn't list the categories: " + msg + "."
	}
	return "Sorry, something went wrong: " + msg + "."
}

// NotApprovedField marks a create_transaction result for a booking that
// a person was asked to approve and did not: {"not_approved": true,
// "expired": false, "type", "amount", "category", "error": "…"}; nothing
// was booked. "expired": true when nobody answered in time.
const NotApprovedField = "not_approved"

// notApproved says that a booking was not approved, or that its approval
// expired, and that nothing was booked.
func (s summarizer) notApproved(m map[string]any) string {
	typ := str(m["type"])
	amount, _ := amountText(m["amount"])
	cat := str(m["category"])
	expired := m["expired"] == true
	if s.zh {
		out := "未记账：" + typeWord(typ, true) + " " + amount + " 元"
		if cat != "" {
			out += "（" + cat + "）"
		}
		if expired {
			return out + "的确认已过期，没有人及时批准。"
		}
		return out + "未获批准。"
	}
	what := typeWord(typ, false) + " " + amount
	if cat != "" {
		what += " (" + cat + ")"
	}
	if expired {
		return "Not booked: the approval of " + what + " expired before anyone answered."
	}
	return "Not booked: " + what + " was not approved."
}

func (s summarizer) plain(content string) string {
	content = truncate(strings.TrimSpace(content), 500)
	if s.zh {
		return "结果：" + content
	}
	return "Result: " + content
}

func (s summarizer) created(v any, arguments string) string {
	var args CreateTransactionArgs
	_ = json.Unmarshal([]byte(arguments), &args) // fallback values only
	m, _ := v.(map[string]any)
	typ := firstNonEmpty(str(m["type"]), args.Type)
	amount, ok := amountText(m["amount"])
	if !ok && args.Amount > 0 {
		amount = formatAmount(args.Amount)
	}
	cat := firstNonEmpty(str(m["category"]), str(m["category_name"]), args.CategoryName)
	date := firstNonEmpty(str(m["occur_date"]), str(m["date"]), args.OccurDate)
	if date == s.today.Format(DateLayout) {
		date = ""
	}
	if s.zh {
		out := "已记账：" + typeWord(typ, true) + " " + amount + " 元"
		if cat != "" {
			out += "（" + cat + "）"
		}
		if date != "" {
			out += "，日期 " + date
		}
		return out
	}
	out := "Recorded " + typeWord(typ, false) + " " + amount
	if cat != "" {
		out += " (" + cat + ")"
	}
	if date != "" {
		out += " on " + date
	}
	return out + "."
}

func typeWord(typ string, zh bool) string {
	switch {
	case zh && typ == TypeIncome:
		return "收入"
	case zh && typ == TypeExpense:
		return "支出"
	case typ == "":
		if zh {
			return "交易"
		}
		return "transaction"
	}
	return typ
}

// listOf finds the list in a result that is either a JSON array or an
// object holding one under a conventional key.
func listOf(v any, keys ...string) ([]any, bool) {
	switch x := v.(type) {
	case []any:
		return x, true
	case map[string]any:
		for _, k := range keys {
			if l, ok := x[k].([]any); ok {
				return l, true
			}
		}
		for _, k := range keys {
			if _, present := x[k]; present && x[k] == nil {
				return nil, true // {"transactions": null}
			}
		}
	}
	return nil, false
}

func (s summarizer) transactions(v any, arguments, raw string) string {
	var args ListTransactionsArgs
	_ = json.Unmarshal([]byte(arguments), &args)
	items, ok := listOf(v, "transactions", "items", "data", "results", "rows")
	if !ok {
		return s.plain(raw)
	}
	var expense, income int64
	var shown []string
	n := 0
	for _, it := range items {
		m, _ := it.(map[string]any)
		typ := str(m["type"])
		if args.Type != "" && typ != "" && typ != args.Type {
			continue
		}
		n++
		c, _ := cents(m["amount"])
		if typ == TypeIncome {
			income += c
		} else {
			expense += c
		}
		if len(shown) < maxListedItems {
			shown = append(shown, s.item(m))
		}
	}
	p := s.period(args.DateFrom, args.DateTo)
	var head string
	switch {
	case s.zh && n == 0:
		head = p + "没有找到" + map[string]string{TypeExpense: "支出", TypeIncome: "收入"}[args.Type] + "记录。"
	case s.zh && args.Type == TypeExpense:
		head = fmt.Sprintf("%s共支出 %s 元（%d 笔）。", p, formatCents(expense), n)
	case s.zh && args.Type == TypeIncome:
		head = fmt.Sprintf("%s共收入 %s 元（%d 笔）。", p, formatCents(income), n)
	case s.zh:
		head = fmt.Sprintf("%s共 %d 笔记录：支出 %s 元，收入 %s 元。", p, n, formatCents(expense), formatCents(income))
	case n == 0:
		t := ""
		if args.Type != "" {
			t = args.Type + " "
		}
		head = "No " + t + "transactions found" + p + "."
	case args.Type == TypeExpense:
		head = fmt.Sprintf("You spent %s%s (%s).", formatCents(expense), p, plural(n, "transaction"))
	case args.Type == TypeIncome:
		head = fmt.Sprintf("You received %s%s (%s).", formatCents(income), p, plural(n, "transaction"))
	default:
		head = fmt.Sprintf("Found %s%s: expenses %s, income %s.", plural(n, "transaction"), p, formatCents(expense), formatCents(income))
	}
	lines := append([]string{head}, shown...)
	if more := n - len(shown); more > 0 {
		if s.zh {
			lines = append(lines, fmt.Sprintf("……另有 %d 笔", more))
		} else {
			lines = append(lines, fmt.Sprintf("...and %d more.", more))
		}
	}
	return strings.Join(lines, "\n")
}

// item formats one transaction as a list line.
func (s summarizer) item(m map[string]any) string {
	fields := []string{"-"}
	if d := firstNonEmpty(str(m["occur_date"]), str(m["date"])); d != "" {
		fields = append(fields, d)
	}
	if t := str(m["type"]); t != "" {
		fields = append(fields, typeWord(t, s.zh))
	}
	if a, ok := amountText(m["amount"]); ok {
		if s.zh {
			a += " 元"
		}
		fields = append(fields, a)
	}
	if c := firstNonEmpty(str(m["category"]), str(m["category_name"])); c != "" {
		fields = append(fields, c)
	}
	if n := str(m["note"]); n != "" {
		fields = append(fields, truncate(n, 60))
	}
	return strings.Join(fields, " ")
}

func (s summarizer) period(from, to string) string {
	today := s.today.Format(DateLayout)
	yesterday := s.today.AddDate(0, 0, -1).Format(DateLayout)
	switch {
	case from != "" && from == to && from == today:
		return map[bool]string{true: "今天", false: " today"}[s.zh]
	case from != "" && from == to && from == yesterday:
		return map[bool]string{true: "昨天", false: " yesterday"}[s.zh]
	case from != "" && from == to:
		if s.zh {
			return from
		}
		return " on " + from
	case from != "" && to != "":
		if s.zh {
			return from + " 至 " + to
		}
		return " from " + from + " to " + to
	case from != "":
		if s.zh {
			return from + " 以来"
		}
		return " since " + from
	case to != "":
		if s.zh {
			return "截至 " + to
		}
		return " until " + to
	}
	return ""
}

func (s summarizer) categories(v any, raw string) string {
	items, ok := listOf(v, "categories", "items", "data", "results")
	if !ok {
		return s.plain(raw)
	}
	var all, expense, income []string
	typed := false
	for _, it := range items {
		var name, kind string
		switch x := it.(type) {
		case string:
			name = x
		case map[string]any:
			name = firstNonEmpty(str(x["name"]), str(x["category"]))
			kind = firstNonEmpty(str(x["type"]), str(x["kind"]))
		}
		if name == "" {
			continue
		}
		all = append(all, name)
		switch kind {
		case TypeIncome:
			income, typed = append(income, name), true
		case TypeExpense:
			expense, typed = append(expense, name), true
		default:
			expense = append(expense, name)
		}
	}
	if len(all) == 0 {
		if s.zh {
			return "目前还没有分类。"
		}
		return "There are no categories yet."
	}
	if s.zh {
		if typed {
			return fmt.Sprintf("共有 %d 个分类。支出：%s；收入：%s。", len(all), joinOr(expense, "、", "无"), joinOr(income, "、", "无"))
		}
		return fmt.Sprintf("共有 %d 个分类：%s。", len(all), strings.Join(all, "、"))
	}
	if typed {
		return fmt.Sprintf("You have %s. Expense: %s. Income: %s.", plural(len(all), "category"), joinOr(expense, ", ", "none"), joinOr(income, ", ", "none"))
	}
	return fmt.Sprintf("You have %s: %s.", plural(len(all), "category"), strings.Join(all, ", "))
}

func joinOr(list []string, sep, empty string) string {
	if len(list) == 0 {
		return empty
	}
	return strings.Join(list, sep)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	if strings.HasSuffix(word, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(word, "y"))
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// str returns v if it is a string or a number, else "".
func str(v any) string {
	switch x := v.(type) {
	case string:
		return strings.TrimSpace(x)
	case json.Number:
		return x.String()
	}
	return ""
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// amountText renders an amount from a tool result: strings are kept as
// the ledger wrote them ("35.00"), numbers get two decimals.
func amountText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		if x = strings.TrimSpace(x); x != "" {
			return x, true
		}
	case json.Number:
		if c, ok := cents(x); ok {
			return formatCents(c), true
		}
	}
	return "", false
}

// cents converts an amount (string or number) to an integer number of
// cents.
func cents(v any) (int64, bool) {
	var s string
	switch x := v.(type) {
	case string:
		s = strings.TrimSpace(x)
	case json.Number:
		s = x.String()
	default:
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 1e15 {
		return 0, false
	}
	return int64(math.Round(f * 100)), true
}

func formatCents(c int64) string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}

func formatAmount(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }

func truncate(s string, n int) string {
	rs := []rune(s)
	if len(rs) <= n {
		return s
	}
	return string(rs[:n]) + "…"
}

package llm

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// complete runs one RuleModel turn.
func complete(t *testing.T, m *RuleModel, msgs ...Message) Message {
	t.Helper()
	resp, err := m.Complete(context.Background(), Request{Messages: msgs, Tools: BookkeeperTools()})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	equal(t, resp.Message.Role, RoleAssistant, "role")
	return resp.Message
}

func user(text string) Message { return Message{Role: RoleUser, Content: text} }

func newTestRuleModel() *RuleModel { return NewRuleModel(RuleOptions{Now: fixedNow}) }

// onlyCall returns the single tool call of msg.
func onlyCall(t *testing.T, msg Message) ToolCall {
	t.Helper()
	if len(msg.ToolCalls) != 1 {
		t.Fatalf("got %d tool calls (content %q), want 1", len(msg.ToolCalls), msg.Content)
	}
	if msg.Content != "" {
		t.Errorf("tool call message has content %q", msg.Content)
	}
	return msg.ToolCalls[0]
}

func TestRuleModelCreateTransaction(t *testing.T) {
	const (
		today     = "2025-03-14"
		yesterday = "2025-03-13"
	)
	tests := []struct {
		text     string
		typ      string
		amount   float64
		category string // "" means category_name must be absent
		date     string // "" means occur_date must be absent
	}{
		// Phrases from the brief.
		{"中午吃粉花了 35", TypeExpense, 35, "餐饮", ""},
		{"打车 23.5 元", TypeExpense, 23.5, "交通", ""},
		{"工资到账 8000", TypeIncome, 8000, "工资", ""},
		{"lunch 35", TypeExpense, 35, "Food", ""},
		{"got paid 2000 salary", TypeIncome, 2000, "Salary", ""},
		{"昨天买菜花了12.8", TypeExpense, 12.8, "餐饮", yesterday},
		{"coffee 4.5", TypeExpense, 4.5, "Food", ""},
		{"taxi 18 yesterday", TypeExpense, 18, "Transport", yesterday},
		{"房租 2500", TypeExpense, 2500, "居住", ""},
		{"收到红包 200", TypeIncome, 200, "人情", ""},
		{"bonus 5000", TypeIncome, 5000, "Bonus", ""},
		{"电费 120.5", TypeExpense, 120.5, "居住", ""},
		{"spent 60 on groceries", TypeExpense, 60, "Food", ""},
		{"paid 15 for parking", TypeExpense, 15, "Transport", ""},
		{"奶茶 18", TypeExpense, 18, "餐饮", ""},
		{"地铁 4 块", TypeExpense, 4, "交通", ""},
		{"received 300 refund", TypeIncome, 300, "Refund", ""},
		// Amount forms.
		{"午饭35元", TypeExpense, 35, "餐饮", ""},
		{"午饭 ¥35", TypeExpense, 35, "餐饮", ""},
		{"午饭 ￥３５", TypeExpense, 35, "餐饮", ""},
		{"sandwich $4.50", TypeExpense, 4.5, "Food", ""},
		{"new laptop 3.5k", TypeExpense, 3500, "Shopping", ""},
		{"年终奖 2w", TypeIncome, 20000, "奖金", ""},
		{"年终奖 1.5万", TypeIncome, 15000, "奖金", ""},
		{"rent 1,200", TypeExpense, 1200, "Housing", ""},
		{"吃饭二十五", TypeExpense, 25, "餐饮", ""},
		{"打车花了三十块", TypeExpense, 30, "交通", ""},
		{"买水五块五", TypeExpense, 5.5, "餐饮", ""},
		{"早餐 5块5", TypeExpense, 5.5, "餐饮", ""},
		{"衣服一百二", TypeExpense, 120, "购物", ""},
		{"两千五 房租", TypeExpense, 2500, "居住", ""},
		{"20 rmb for bubble tea", TypeExpense, 20, "Food", ""},
		{"dinner 12 dollars", TypeExpense, 12, "Food", ""},
		{"lunch for 2 people 35", TypeExpense, 35, "Food", ""},
		{"买了2杯奶茶 36", TypeExpense, 36, "餐饮", ""},
		{"一块蛋糕 15", TypeExpense, 15, "餐饮", ""},
		{"taxi 12:30 cost 40", TypeExpense, 40, "Transport", ""},
		{"35元", TypeExpense, 35, "", ""},
		// More everyday Chinese.
		{"今天早餐 8 元", TypeExpense, 8, "餐饮", today},
		{"前天看电影 80", TypeExpense, 80, "娱乐", "2025-03-12"},
		{"3月5日 加油 300", TypeExpense, 300, "交通", "2025-03-05"},
		{"买药 45.6", TypeExpense, 45.6, "医疗", ""},
		{"交话费 50", TypeExpense, 50, "居住", ""},
		{"淘宝买衣服 199", TypeExpense, 199, "购物", ""},
		{"星巴克 32", TypeExpense, 32, "餐饮", ""},
		{"发红包 88", TypeExpense, 88, "人情", ""},
		{"抢红包 6.66", TypeIncome, 6.66, "人情", ""},
		{"支付宝收到转账 500", TypeIncome, 500, "", ""},
		{"买衣服退款 199", TypeIncome, 199, "退款", ""},
		{"报销 320", TypeIncome, 320, "退款", ""},
		{"兼职收入 600", TypeIncome, 600, "兼职", ""},
		{"基金分红 45", TypeIncome, 45, "理财", ""},
		{"学费 3000", TypeExpense, 3000, "教育", ""},
		{"健身房月卡 300", TypeExpense, 300, "娱乐", ""},
		{"卖了旧手机 800", TypeIncome, 800, "", ""},
		// More everyday English.
		{"breakfast 6.5 today", TypeExpense, 6.5, "Food", today},
		{"uber 23 last night", TypeExpense, 23, "Transport", yesterday},
		{"I paid 30 for dinner", TypeExpense, 30, "Food", ""},
		{"bought shoes for 89.99", TypeExpense, 89.99, "Shopping", ""},
		{"netflix subscription 15.99", TypeExpense, 15.99, "Entertainment", ""},
		{"doctor visit 120", TypeExpense, 120, "Health", ""},
		{"gas bill 80", TypeExpense, 80, "Housing", ""},
		{"gas 40", TypeExpense, 40, "Transport", ""},
		{"uber eats 25", TypeExpense, 25, "Food", ""},
		{"movie tickets 2 for 30", TypeExpense, 30, "Entertainment", ""},
		{"salary 8000", TypeIncome, 8000, "Salary", ""},
		{"freelance income 1200", TypeIncome, 1200, "Side job", ""},
		{"my boss paid me 500 bonus", TypeIncome, 500, "Bonus", ""},
		{"refund of 99 from amazon", TypeIncome, 99, "Refund", ""},
		{"earned 150 in dividends", TypeIncome, 150, "Investment", ""},
		{"sold my old bike for 120", TypeIncome, 120, "", ""},
		{"2025-03-01 lunch 12", TypeExpense, 12, "Food", "2025-03-01"},
		{"gift for mom 60", TypeExpense, 60, "Gifts", ""},
	}
	m := newTestRuleModel()
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			call := onlyCall(t, complete(t, m, user(tc.text)))
			equal(t, call.ID, "call_1", "call id")
			equal(t, call.Type, "function", "call type")
			equal(t, call.Function.Name, ToolCreateTransaction, "tool")
			var args map[string]any
			if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
				t.Fatalf("arguments %q: %v", call.Function.Arguments, err)
			}
			equal(t, args["type"], any(tc.typ), "type")
			amount, ok := args["amount"].(float64)
			if !ok {
				t.Fatalf("amount %v is not a JSON number", args["amount"])
			}
			equal(t, amount, tc.amount, "amount")
			if tc.category == "" {
				if c, ok := args["category_name"]; ok {
					t.Errorf("category_name = %v, want none", c)
				}
			} else {
				equal(t, args["category_name"], any(tc.category), "category_name")
			}
			if tc.date == "" {
				if d, ok := args["occur_date"]; ok {
					t.Errorf("occur_date = %v, want none", d)
				}
			} else {
				equal(t, args["occur_date"], any(tc.date), "occur_date")
			}
			equal(t, args["note"], any(tc.text), "note")
		})
	}
	if len(tests) < 40 {
		t.Errorf("only %d phrases", len(tests))
	}
}

func TestRuleModelQueries(t *testing.T) {
	tests := []struct {
		text string
		tool string
		args string
	}{
		{"how much did I spend today", ToolListTransactions, `{"date_from":"2025-03-14","date_to":"2025-03-14","type":"expense"}`},
		{"今天花了多少", ToolListTransactions, `{"date_from":"2025-03-14","date_to":"2025-03-14","type":"expense"}`},
		{"昨天花了多少钱", ToolListTransactions, `{"date_from":"2025-03-13","date_to":"2025-03-13","type":"expense"}`},
		{"list my transactions", ToolListTransactions, `{}`},
		{"show me my spending this week", ToolListTransactions, `{"date_from":"2025-03-10","date_to":"2025-03-14","type":"expense"}`},
		{"本月收入多少", ToolListTransactions, `{"date_from":"2025-03-01","date_to":"2025-03-14","type":"income"}`},
		{"上个月的账单", ToolListTransactions, `{"date_from":"2025-02-01","date_to":"2025-02-28"}`},
		{"最近7天的支出", ToolListTransactions, `{"date_from":"2025-03-08","date_to":"2025-03-14","type":"expense"}`},
		{"what did I spend last week", ToolListTransactions, `{"date_from":"2025-03-03","date_to":"2025-03-09","type":"expense"}`},
		{"how much income this year", ToolListTransactions, `{"date_from":"2025-01-01","date_to":"2025-03-14","type":"income"}`},
		{"查一下今天的记录", ToolListTransactions, `{"date_from":"2025-03-14","date_to":"2025-03-14"}`},
		{"how much did i spend on 2025-03-01", ToolListTransactions, `{"date_from":"2025-03-01","date_to":"2025-03-01","type":"expense"}`},
		{"show categories", ToolListCategories, `{}`},
		{"有哪些分类", ToolListCategories, `{}`},
		{"What categories are there?", ToolListCategories, `{}`},
		{"列出所有类别", ToolListCategories, `{}`},
	}
	m := newTestRuleModel()
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			call := onlyCall(t, complete(t, m, user(tc.text)))
			equal(t, call.Function.Name, tc.tool, "tool")
			equal(t, call.Function.Arguments, tc.args, "arguments")
		})
	}
}

func TestRuleModelCategoryLanguage(t *testing.T) {
	for _, tc := range []struct{ lang, text, want string }{
		{"zh", "lunch 35", "餐饮"},
		{"en", "中午吃粉花了 35", "Food"},
		{"", "lunch 35", "Food"},
		{"", "午饭 35", "餐饮"},
	} {
		m := NewRuleModel(RuleOptions{Now: fixedNow, CategoryLanguage: tc.lang})
		var args CreateTransactionArgs
		call := onlyCall(t, complete(t, m, user(tc.text)))
		if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
			t.Fatal(err)
		}
		equal(t, args.CategoryName, tc.want, tc.lang+"/"+tc.text)
	}
}

func TestRuleModelUnreadable(t *testing.T) {
	m := newTestRuleModel()
	for _, tc := range []struct {
		text string
		zh   bool
		want string
	}{
		{"hello", false, `"lunch 35"`},
		{"what's the weather like?", false, "Sorry"},
		{"35", false, "I see the amount 35.00"},
		{"asdf 12", false, "I see the amount 12.00"},
		{"", false, "Sorry"},
		{"你好", true, "中午吃粉花了 35"},
		{"帮我写首诗", true, "抱歉"},
		{"二十五", true, "我看到了金额 25.00"},
	} {
		t.Run(tc.text, func(t *testing.T) {
			msg := complete(t, m, user(tc.text))
			if len(msg.ToolCalls) != 0 {
				t.Fatalf("unexpected tool calls %+v", msg.ToolCalls)
			}
			if !strings.Contains(msg.Content, tc.want) {
				t.Errorf("reply %q does not contain %q", msg.Content, tc.want)
			}
			equal(t, hasHan(msg.Content), tc.zh, "reply in Chinese")
		})
	}
	// No user message at all.
	msg := complete(t, m, Message{Role: RoleSystem, Content: "You are a bookkeeper."})
	if len(msg.ToolCalls) != 0 || msg.Content == "" {
		t.Errorf("without a user message got %+v", msg)
	}
}

// toolResult builds the tool message answering call.
func toolResult(call ToolCall, content string) Message {
	return Message{Role: RoleTool, ToolCallID: call.ID, Name: call.Function.Name, Content: content}
}

func TestRuleModelFinalReply(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		result string
		want   string
	}{
		{"created zh", "中午吃粉花了 35", `{"transaction_id":12,"type":"expense","amount":"35.00","category":"餐饮"}`, "已记账：支出 35.00 元（餐饮）"},
		{"created en", "lunch 35", `{"transaction_id":12,"type":"expense","amount":"35.00","category":"餐饮"}`, "Recorded expense 35.00 (餐饮)."},
		{"created income", "got paid 2000 salary", `{"transaction_id":13,"type":"income","amount":2000,"category":"Salary"}`, "Recorded income 2000.00 (Salary)."},
		{"created yesterday zh", "昨天买菜花了12.8", `{"transaction_id":14,"type":"expense","amount":"12.80","category":"餐饮","occur_date":"2025-03-13"}`, "已记账：支出 12.80 元（餐饮），日期 2025-03-13"},
		{"created sparse result", "taxi 18 yesterday", `{"transaction_id":15}`, "Recorded expense 18.00 (Transport) on 2025-03-13."},
		{"create error en", "lunch 35", `{"error":"category \"Food\" not found"}`, `Sorry, I couldn't record that: category "Food" not found.`},
		{"create error zh", "奶茶 18", `{"error":"ledger is busy, try again"}`, "抱歉，记账失败：ledger is busy, try again。"},
		{"create error object", "lunch 35", `{"error":{"message":"lock timeout"}}`, "Sorry, I couldn't record that: lock timeout."},
		{"not approved en", "paid rent 4,800.00", `{"error":"not approved","not_approved":true,"expired":false,"type":"expense","amount":"4800.00","category":"Housing"}`, "Not booked: expense 4800.00 (Housing) was not approved."},
		{"not approved zh", "交房租 4800", `{"error":"not approved","not_approved":true,"type":"expense","amount":"4800.00","category":"居住"}`, "未记账：支出 4800.00 元（居住）未获批准。"},
		{"approval expired en", "paid rent 4,800.00", `{"error":"expired","not_approved":true,"expired":true,"type":"expense","amount":"4800.00","category":"Housing"}`, "Not booked: the approval of expense 4800.00 (Housing) expired before anyone answered."},
		{
			"list spent today en", "how much did I spend today",
			`{"transactions":[{"id":1,"type":"expense","amount":"35.00","category":"Food","occur_date":"2025-03-14","note":"lunch 35"},{"id":2,"type":"expense","amount":"23.50","category":"Transport","occur_date":"2025-03-14","note":"taxi"}]}`,
			"You spent 58.50 today (2 transactions).\n- 2025-03-14 expense 35.00 Food lunch 35\n- 2025-03-14 expense 23.50 Transport taxi",
		},
		{
			"list spent today zh", "今天花了多少",
			`[{"type":"expense","amount":"35.00","category":"餐饮"},{"type":"expense","amount":12.8,"category":"餐饮"}]`,
			"今天共支出 47.80 元（2 笔）。\n- 支出 35.00 元 餐饮\n- 支出 12.80 元 餐饮",
		},
		{
			"list all en", "list my transactions",
			`{"transactions":[{"type":"expense","amount":"35.00"},{"type":"income","amount":"8000.00"}]}`,
			"Found 2 transactions: expenses 35.00, income 8000.00.\n- expense 35.00\n- income 8000.00",
		},
		{"list empty en", "how much did I spend today", `{"transactions":[]}`, "No expense transactions found today."},
		{"list empty zh", "今天花了多少", `{"transactions":null}`, "今天没有找到支出记录。"},
		{"list error", "list my transactions", `{"error":"database unavailable"}`, "Sorry, I couldn't look up your transactions: database unavailable."},
		{"categories en", "show categories", `{"categories":[{"id":1,"name":"Food","type":"expense"},{"id":2,"name":"Salary","type":"income"}]}`, "You have 2 categories. Expense: Food. Income: Salary."},
		{"categories zh", "有哪些分类", `["餐饮","交通","工资"]`, "共有 3 个分类：餐饮、交通、工资。"},
		{"categories empty", "show categories", `[]`, "There are no categories yet."},
		{"plain text result", "lunch 35", `ok`, "Result: ok"},
	}
	m := newTestRuleModel()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			first := complete(t, m, user(tc.text))
			call := onlyCall(t, first)
			final := complete(t, m, user(tc.text), first, toolResult(call, tc.result))
			if len(final.ToolCalls) != 0 {
				t.Fatalf("final reply has tool calls %+v", final.ToolCalls)
			}
			equal(t, final.Content, tc.want, "reply")
		})
	}
}

func TestRuleModelListTruncates(t *testing.T) {
	var items []map[string]any
	for i := 0; i < 8; i++ {
		items = append(items, map[string]any{"type": "expense", "amount": "1.00"})
	}
	m := newTestRuleModel()
	first := complete(t, m, user("list my transactions"))
	final := complete(t, m, user("list my transactions"), first, toolResult(onlyCall(t, first), mustJSON(t, items)))
	lines := strings.Split(final.Content, "\n")
	equal(t, len(lines), 1+maxListedItems+1, "line count")
	equal(t, lines[0], "Found 8 transactions: expenses 8.00, income 0.00.", "head")
	equal(t, lines[len(lines)-1], "...and 3 more.", "tail")
}

func TestRuleModelConversation(t *testing.T) {
	// A second turn: the call ID keeps counting and only the tool results
	// for the latest user message are summarised.
	m := newTestRuleModel()
	conv := []Message{{Role: RoleSystem, Content: "You are a bookkeeper."}, user("lunch 35")}
	first := complete(t, m, conv...)
	call := onlyCall(t, first)
	conv = append(conv, first, toolResult(call, `{"transaction_id":1,"type":"expense","amount":"35.00","category":"Food"}`))
	final := complete(t, m, conv...)
	equal(t, final.Content, "Recorded expense 35.00 (Food).", "first reply")
	conv = append(conv, final, user("打车 23.5 元"))
	second := complete(t, m, conv...)
	call2 := onlyCall(t, second)
	equal(t, call2.ID, "call_2", "second call id")
	conv = append(conv, second, toolResult(call2, `{"transaction_id":2,"type":"expense","amount":"23.50","category":"交通"}`))
	final = complete(t, m, conv...)
	equal(t, final.Content, "已记账：支出 23.50 元（交通）", "second reply")

	// A tool result without a matching call is recognised by its shape.
	final = complete(t, m, user("lunch 35"), Message{Role: RoleTool, Content: `{"transaction_id":3,"type":"expense","amount":"35.00"}`})
	equal(t, final.Content, "Recorded expense 35.00.", "orphan result reply")
}

func TestRuleModelLatency(t *testing.T) {
	m := NewRuleModel(RuleOptions{Now: fixedNow, Latency: 30 * time.Millisecond})
	start := time.Now()
	if _, err := m.Complete(context.Background(), Request{Messages: []Message{user("lunch 35")}}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("Complete took %v, want at least the 30ms latency", d)
	}
}

func TestRuleModelCancelDuringLatency(t *testing.T) {
	m := NewRuleModel(RuleOptions{Now: fixedNow, Latency: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	_, err := m.Complete(ctx, Request{Messages: []Message{user("lunch 35")}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Complete returned after %v; cancellation was not prompt", d)
	}

	ctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if _, err := m.Complete(ctx, Request{Messages: []Message{user("lunch 35")}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}

	// An already cancelled context fails even without latency.
	done, cancel3 := context.WithCancel(context.Background())
	cancel3()
	if _, err := newTestRuleModel().Complete(done, Request{Messages: []Message{user("lunch 35")}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestRuleModelConcurrent(t *testing.T) {
	m := NewRuleModel(RuleOptions{Now: fixedNow, Latency: time.Millisecond})
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := m.Complete(context.Background(), Request{Messages: []Message{user("coffee 4.5")}})
			if err != nil || len(resp.Message.ToolCalls) != 1 {
				t.Errorf("got %+v, %v", resp, err)
			}
		}()
	}
	wg.Wait()
}

func TestExtractAmount(t *testing.T) {
	tests := []struct {
		text string
		want float64
		ok   bool
	}{
		{"35", 35, true},
		{"¥ 35.5", 35.5, true},
		{"$4.50", 4.5, true},
		{"rmb35", 35, true},
		{"usd 20", 20, true},
		{"8,000", 8000, true},
		{"1,234.56 元", 1234.56, true},
		{"3.5k", 3500, true},
		{"2w", 20000, true},
		{"3千", 3000, true},
		{"5块5", 5.5, true},
		{"5块钱", 5, true},
		{"二十五", 25, true},
		{"十块", 10, true},
		{"一百零五", 105, true},
		{"一百二", 120, true},
		{"两千五", 2500, true},
		{"一万二", 12000, true},
		{"十万", 100000, true},
		{"五块五毛", 5.5, true},
		{"5km", 0, false},
		{"iphone15", 0, false},
		{"2杯", 0, false},
		{"3 people", 0, false},
		{"2025-03-01", 0, false},
		{"12:30", 0, false},
		{"5月3日", 0, false},
		{"查一下", 0, false},
		{"一起", 0, false},
		{"万一", 0, false},
		{"第十", 0, false},
		{"十分好", 0, false},
		{"3点", 0, false},
		{"20%", 0, false},
	}
	for _, tc := range tests {
		got, ok := extractAmount(normalize(tc.text))
		if ok != tc.ok || (ok && roundCents(got.value) != tc.want) {
			t.Errorf("extractAmount(%q) = %v, %v; want %v, %v", tc.text, got.value, ok, tc.want, tc.ok)
		}
	}
}

func TestFindKeyword(t *testing.T) {
	for _, tc := range []struct {
		text, kw string
		ok       bool
	}{
		{"took the bus", "bus", true},
		{"two buses", "bus", true},
		{"business lunch", "bus", false},
		{"taxis", "taxi", true},
		{"steak", "tea", false},
		{"去ktv唱歌", "ktv", true},
		{"中午吃粉", "吃", true},
	} {
		_, ok := findKeyword(tc.text, tc.kw)
		equal(t, ok, tc.ok, tc.kw+" in "+tc.text)
	}
}

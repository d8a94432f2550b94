package llm

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/rowlease/rowlease/toolexec"
)

// canonicalCall asks m once about text and returns the tool call's name
// and canonical arguments (what the idempotency key is made of).
func canonicalCall(t *testing.T, m *RuleModel, msgs ...Message) (string, string, CreateTransactionArgs) {
	t.Helper()
	tc := onlyCall(t, complete(t, m, msgs...))
	canon, _, err := toolexec.CanonicalArguments([]byte(tc.Function.Arguments))
	if err != nil {
		t.Fatalf("arguments %s: %v", tc.Function.Arguments, err)
	}
	var args CreateTransactionArgs
	decodeArgsJSON(t, tc.Function.Arguments, &args)
	return tc.Function.Name, string(canon), args
}

// With Vary, the same message asked twice is two different calls: the
// arguments canonicalize differently, while type, amount and date stay
// and the category is the same one under another name.
func TestRuleModelVaryAsksOtherwise(t *testing.T) {
	m := NewRuleModel(RuleOptions{Now: fixedNow, Vary: true})
	for _, text := range []string{"lunch 35", "中午吃粉花了 35", "taxi 18 yesterday", "got paid 2000 salary", "35元"} {
		t.Run(text, func(t *testing.T) {
			base := parseUtterance(text, fixedNow(), "").create
			seen := map[string]bool{}
			for range 20 {
				name, canon, args := canonicalCall(t, m, user(text))
				equal(t, name, ToolCreateTransaction, "tool")
				if seen[canon] {
					t.Fatalf("asked again, the same arguments %s", canon)
				}
				seen[canon] = true
				equal(t, args.Type, base.Type, "type")
				equal(t, args.Amount, base.Amount, "amount")
				equal(t, args.OccurDate, base.OccurDate, "occur_date")
				if !strings.Contains(args.Note, base.Note) || args.Note == base.Note {
					t.Errorf("note %q: want the message %q worded otherwise", args.Note, base.Note)
				}
				if base.CategoryName == "" {
					equal(t, args.CategoryName, "", "category_name")
					continue
				}
				c, ok := categoryOf(base.CategoryName)
				if !ok {
					t.Fatalf("no category %q", base.CategoryName)
				}
				if args.CategoryName != c.Chinese && !strings.EqualFold(args.CategoryName, c.English) {
					t.Errorf("category_name %q is not a name of %s/%s", args.CategoryName, c.Chinese, c.English)
				}
			}
		})
	}
}

// Off (the default), the same message asked twice is the same call, as
// before: identical canonical arguments.
func TestRuleModelWithoutVaryAsksTheSame(t *testing.T) {
	m := newTestRuleModel()
	for _, text := range []string{"lunch 35", "中午吃粉花了 35", "taxi 18 yesterday"} {
		_, first, args := canonicalCall(t, m, user(text))
		equal(t, args.Note, text, "note")
		for range 5 {
			if _, again, _ := canonicalCall(t, m, user(text)); again != first {
				t.Fatalf("%q: asked again, %s; first %s", text, again, first)
			}
		}
	}
}

// A varying model summarises results of its own calls, and disregards
// results of calls it did not issue (an account of an earlier run): it
// asks for the transaction again, where the deterministic model
// summarises.
func TestRuleModelVaryIgnoresResultsItDidNotAskFor(t *testing.T) {
	result := `{"transaction_id":"t1","type":"expense","amount":"35.00","category":"Food","note":"lunch 35","occur_date":"2025-03-14"}`
	conv := func(id string) []Message {
		return []Message{user("lunch 35"),
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: id, Type: ToolCallTypeFunction,
				Function: FunctionCall{Name: ToolCreateTransaction, Arguments: "{}"}}}},
			{Role: RoleTool, ToolCallID: id, Name: ToolCreateTransaction, Content: result}}
	}
	vary := NewRuleModel(RuleOptions{Now: fixedNow, Vary: true})
	if msg := complete(t, vary, conv("call_1")...); len(msg.ToolCalls) != 0 || msg.Content == "" {
		t.Fatalf("own call's result: got %+v, want a summary", msg)
	}
	if name, _, _ := canonicalCall(t, vary, conv("prior_1")...); name != ToolCreateTransaction {
		t.Fatalf("another's call: got %s, want create_transaction asked again", name)
	}
	if msg := complete(t, newTestRuleModel(), conv("prior_1")...); len(msg.ToolCalls) != 0 || msg.Content == "" {
		t.Fatalf("deterministic model: got %+v, want a summary", msg)
	}
}

// Asked is called once per Complete with the latest user message; a
// varying model is safe for concurrent use.
func TestRuleModelAskedAndConcurrentVary(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	m := NewRuleModel(RuleOptions{Now: fixedNow, Vary: true, Asked: func(s string) {
		mu.Lock()
		asked[s]++
		mu.Unlock()
	}})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				complete(t, m, user("coffee 4.5"), Message{Role: RoleAssistant, Content: "ok"}, user([]string{"lunch 35", "taxi 18"}[i%2]))
			}
		}()
	}
	wg.Wait()
	equal(t, asked["lunch 35"], 40, "asks about lunch")
	equal(t, asked["taxi 18"], 40, "asks about taxi")
	equal(t, len(asked), 2, "messages asked about")
}

func categoryOf(name string) (Category, bool) {
	for _, r := range categoryRules {
		if r.cat.Chinese == name || r.cat.English == name {
			return r.cat, true
		}
	}
	return Category{}, false
}

func decodeArgsJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
}

// A failure marked retryable is answered with the call made again —
// worded anew when varying, the same call when not — at most twice; the
// summary after a call that went through leaves the failure out. A failure
// without the mark is summarized, as before.
func TestRuleModelRetriesRetryableFailure(t *testing.T) {
	const (
		failed  = `{"error":"the ledger could not complete this call; it may be retried","retryable":true}`
		refused = `{"error":"the ledger could not complete this call"}`
		booked  = `{"transaction_id":"t1","type":"expense","amount":"35.00","category":"Food","occur_date":"2025-03-14"}`
	)
	for _, vary := range []bool{false, true} {
		m := NewRuleModel(RuleOptions{Now: fixedNow, Vary: vary})
		conv := []Message{user("lunch 35")}
		first := complete(t, m, conv...)
		call := onlyCall(t, first)
		conv = append(conv, first, toolResult(call, failed))
		again := complete(t, m, conv...)
		retried := onlyCall(t, again)
		equal(t, retried.Function.Name, ToolCreateTransaction, "retried tool")
		equal(t, retried.ID, "call_2", "retried call id")
		equal(t, retried.Function.Arguments == call.Function.Arguments, !vary, "the same arguments unless varying")

		final := complete(t, m, append(conv, again, toolResult(retried, booked))...)
		if len(final.ToolCalls) != 0 || !strings.HasPrefix(final.Content, "Recorded expense 35.00") || strings.Contains(final.Content, "Sorry") {
			t.Errorf("vary=%v: after the retry went through, got %+v; want the booking alone", vary, final)
		}

		// Failing every time: two retries, then the failure is told.
		for i := 0; i < maxRetries; i++ {
			next := complete(t, m, conv...)
			c := onlyCall(t, next)
			conv = append(conv, next, toolResult(c, failed))
		}
		if last := complete(t, m, conv...); len(last.ToolCalls) != 0 || !strings.HasPrefix(last.Content, "Sorry, I couldn't record that") {
			t.Errorf("vary=%v: after %d retries, got %+v; want the failure told", vary, maxRetries, last)
		}

		if msg := complete(t, m, user("lunch 35"), first, toolResult(call, refused)); len(msg.ToolCalls) != 0 {
			t.Errorf("vary=%v: a failure not marked retryable was retried: %+v", vary, msg)
		}
	}
}

package llm

import (
	"encoding/json"
	"testing"
)

// FuzzRuleModel checks that any user text yields either a final reply or
// one well-formed tool call, never a panic.
func FuzzRuleModel(f *testing.F) {
	for _, s := range []string{"中午吃粉花了 35", "3.5k", "五块五", "¥", "$", "1,", "1,2345", "块5", "十十", "万万", "一万万", "零", "2025-13-45 lunch 3", "5块", "rmb", "35 k", "ｌｕｎｃｈ　３５", "\xff\xfe 35"} {
		f.Add(s)
	}
	m := newTestRuleModel()
	f.Fuzz(func(t *testing.T, text string) {
		msg := m.next([]Message{user(text)})
		if len(msg.ToolCalls) == 0 {
			if msg.Content == "" {
				t.Fatalf("empty reply for %q", text)
			}
			return
		}
		call := msg.ToolCalls[0]
		if call.Function.Name != ToolCreateTransaction {
			return
		}
		var args CreateTransactionArgs
		if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
			t.Fatalf("bad arguments %q for %q: %v", call.Function.Arguments, text, err)
		}
		if args.Amount <= 0 || (args.Type != TypeIncome && args.Type != TypeExpense) {
			t.Fatalf("bad transaction %+v for %q", args, text)
		}
	})
}

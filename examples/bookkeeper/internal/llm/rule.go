package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// RuleOptions configures a RuleModel.
type RuleOptions struct {
	// Latency is how long every Complete call takes, to imitate a remote
	// model. Complete returns ctx.Err() as soon as ctx is done.
	Latency time.Duration
	// Now returns the current time; it defines "today" and "yesterday"
	// (in Now's location). Nil means time.Now.
	Now func() time.Time
	// CategoryLanguage selects the language of the category_name argument:
	// "zh" always sends Chinese names (餐饮), "en" always English (Food),
	// and "" (the default) follows the language of the user's message.
	CategoryLanguage string
	// Vary makes the model answer otherwise every time it is asked, as a
	// sampled language model does: the note of a create_transaction call
	// gets a random wording, and the category is named one way or another
	// (Chinese, English, upper or lower case). The tool accepts every
	// wording, but the arguments canonicalize differently, so the same
	// message asked twice yields two different tool calls (two
	// idempotency keys). A varying model also does not take the hint of
	// results it did not ask for: tool results answering calls whose ids
	// it did not issue in this conversation (an agent's account of what an
	// earlier, crashed run committed) are disregarded, and the message is
	// answered as if nothing had been done yet. Off (the default), the
	// model is deterministic.
	Vary bool
	// Asked, when set, is called at the start of every Complete with the
	// latest user message (before the latency), so a test can count how
	// often the model is asked per message.
	Asked func(userText string)
}

// RuleModel is a deterministic, offline Model that understands everyday
// Chinese and English bookkeeping phrases by keyword rules.
//
// For the latest user message it answers with one tool call:
// create_transaction for phrases such as "中午吃粉花了 35", "taxi 18
// yesterday" or "got paid 2000 salary"; list_transactions for questions
// such as "how much did I spend today" or "今天花了多少"; list_categories
// for "show categories" or "有哪些分类". Once the conversation holds the
// tool results for that message, it answers with a final summary in the
// user's language (Chinese if the message contains Chinese characters).
// Text it cannot read gets a final reply explaining what it understands.
//
// Amounts: Arabic numbers with optional thousands separators, currency
// signs and units (¥35, $4.50, 35元, 4 块, 20 rmb), "k"/"千" (×1000) and
// "w"/"万" (×10000) suffixes (3.5k = 3500), "5块5" (5.5), and simple
// Chinese numerals (二十五, 一百二, 两千五, 三十块). Amounts are rounded to
// cents. Type: income when the text has an income word (工资, 到账, 收到,
// 红包 received, 奖金, salary, bonus, refund, received, income, "got paid",
// ...), expense otherwise; "paid 15 for parking" is an expense, while
// "got paid"/"paid me" are income. Categories come from the table
// returned by Categories; when no keyword matches, category_name is left
// out. Tool call IDs are "call_N", N counting the tool calls in the
// conversation, so replies are reproducible.
//
// A tool result that is a failure marked retryable ({"error": …,
// "retryable": true}, RetryableField) is answered by making the call again,
// decided afresh (worded anew with Vary), at most twice per tool and
// message; the final summary leaves out the failures a later call of the
// same tool was made for. Other failures are summarized as such.
//
// With RuleOptions.Vary the model is no longer deterministic: each
// create_transaction call is worded anew (see Vary).
//
// A RuleModel is safe for concurrent use. It ignores Request.Tools.
type RuleModel struct {
	opts RuleOptions

	mu  sync.Mutex // guards rng
	rng *rand.Rand // for Vary
}

var _ Model = (*RuleModel)(nil)

// NewRuleModel returns a RuleModel with the given options.
func NewRuleModel(opts RuleOptions) *RuleModel {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &RuleModel{opts: opts, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// Complete waits for the configured latency and returns the next assistant
// message for req.Messages. It returns ctx.Err() if ctx is done first.
func (m *RuleModel) Complete(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	if m.opts.Asked != nil {
		m.opts.Asked(lastUserText(req.Messages))
	}
	if m.opts.Latency > 0 {
		t := time.NewTimer(m.opts.Latency)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return Response{}, ctx.Err()
		case <-t.C:
		}
	}
	return Response{Message: m.next(req.Messages)}, nil
}

// next computes the reply to a conversation.
func (m *RuleModel) next(msgs []Message) Message {
	now := m.opts.Now()
	lastUser := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleUser {
			lastUser = i
			break
		}
	}
	if lastUser < 0 {
		return finalMessage(helpText(false, 0))
	}
	userText := msgs[lastUser].Content
	zh := hasHan(userText)

	// Tool calls issued for the latest user message, and their results.
	calls := map[string]FunctionCall{}
	var results []Message
	for _, msg := range msgs[lastUser+1:] {
		switch msg.Role {
		case RoleAssistant:
			for _, tc := range msg.ToolCalls {
				calls[tc.ID] = tc.Function
			}
		case RoleTool:
			if m.opts.Vary && !ownCallID(msg.ToolCallID) {
				continue // not its own call: a varying model ignores it
			}
			results = append(results, msg)
		}
	}
	if len(results) > 0 {
		if again, ok := m.retry(msgs, results, calls, userText, now); ok {
			return again
		}
		s := summarizer{zh: zh, today: day(now)}
		return finalMessage(s.summarize(dropRetried(results, calls), calls))
	}
	return m.decide(msgs, userText, now)
}

// decide answers the latest user message afresh: one tool call, or a
// final reply when it cannot read the message.
func (m *RuleModel) decide(msgs []Message, userText string, now time.Time) Message {
	zh := hasHan(userText)
	in := parseUtterance(userText, now, m.opts.CategoryLanguage)
	var name string
	var args any
	switch in.kind {
	case intentCreate:
		if m.opts.Vary {
			in.create = m.vary(in.create)
		}
		name, args = ToolCreateTransaction, in.create
	case intentListTransactions:
		name, args = ToolListTransactions, in.list
	case intentListCategories:
		name, args = ToolListCategories, struct{}{}
	default:
		return finalMessage(helpText(zh, in.seenAmount))
	}
	b, err := json.Marshal(args)
	if err != nil { // cannot happen: the argument types always encode
		return finalMessage(helpText(zh, 0))
	}
	return Message{
		Role: RoleAssistant,
		ToolCalls: []ToolCall{{
			ID:       fmt.Sprintf("call_%d", countToolCalls(msgs)+1),
			Type:     ToolCallTypeFunction,
			Function: FunctionCall{Name: name, Arguments: string(b)},
		}},
	}
}

// RetryableField marks a tool's failure that the same call made again
// may get past: {"error": "…", "retryable": true}.
const RetryableField = "retryable"

// maxRetries bounds how often RuleModel makes a call again after a
// failure it may retry, per user message.
const maxRetries = 2

// retry makes the call again when the latest result is a failure that may
// be retried (RetryableField), at most maxRetries times per tool and
// message: the call is decided afresh, so a varying model words it anew.
func (m *RuleModel) retry(msgs, results []Message, calls map[string]FunctionCall, userText string, now time.Time) (Message, bool) {
	last := results[len(results)-1]
	name := toolOf(last, calls)
	if name == "" || !retryable(last.Content) {
		return Message{}, false
	}
	made := 0
	for _, c := range calls {
		if c.Name == name {
			made++
		}
	}
	if made > maxRetries {
		return Message{}, false
	}
	again := m.decide(msgs, userText, now)
	if len(again.ToolCalls) != 1 || again.ToolCalls[0].Function.Name != name {
		return Message{}, false
	}
	return again, true
}

// dropRetried leaves out the failures that a later call of the same tool
// was made for: the summary is about how the calls ended.
func dropRetried(results []Message, calls map[string]FunctionCall) []Message {
	out := make([]Message, 0, len(results))
	for i, r := range results {
		superseded := false
		if retryable(r.Content) {
			for _, later := range results[i+1:] {
				if toolOf(later, calls) == toolOf(r, calls) {
					superseded = true
					break
				}
			}
		}
		if !superseded {
			out = append(out, r)
		}
	}
	return out
}

// toolOf is the tool that produced a result.
func toolOf(r Message, calls map[string]FunctionCall) string {
	if c, ok := calls[r.ToolCallID]; ok && c.Name != "" {
		return c.Name
	}
	return r.Name
}

// retryable reports whether a tool result is a failure marked
// RetryableField.
func retryable(content string) bool {
	v, ok := decodeJSON(content)
	if !ok {
		return false
	}
	if _, failed := errorOf(v); !failed {
		return false
	}
	r, _ := v.(map[string]any)[RetryableField].(bool)
	return r
}

// noteWordings are the ways a varying model words a note; %s is the
// user's message, %04x a random number.
var noteWordings = []string{"%s (#%04x)", "%s · ref %04x", "[%04x] %s", "%s, noted %04x"}

// vary words a create_transaction call otherwise: a note with a random
// number, the category under another of its names.
func (m *RuleModel) vary(c CreateTransactionArgs) CreateTransactionArgs {
	m.mu.Lock()
	w, n, k := m.rng.IntN(len(noteWordings)), m.rng.IntN(1<<16), m.rng.IntN(4)
	m.mu.Unlock()
	if f := noteWordings[w]; strings.HasPrefix(f, "[") {
		c.Note = fmt.Sprintf(f, n, c.Note)
	} else {
		c.Note = fmt.Sprintf(f, c.Note, n)
	}
	if c.CategoryName == "" {
		return c
	}
	for _, r := range categoryRules {
		if r.cat.Chinese != c.CategoryName && r.cat.English != c.CategoryName {
			continue
		}
		switch k {
		case 0:
			c.CategoryName = r.cat.Chinese
		case 1:
			c.CategoryName = r.cat.English
		case 2:
			c.CategoryName = strings.ToLower(r.cat.English)
		default:
			c.CategoryName = strings.ToUpper(r.cat.English)
		}
		break
	}
	return c
}

// ownCallID reports whether id has the form of the ids the model issues
// ("call_N").
func ownCallID(id string) bool {
	rest, ok := strings.CutPrefix(id, "call_")
	if !ok || rest == "" {
		return false
	}
	for _, r := range rest {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// lastUserText is the content of the latest user message, or "".
func lastUserText(msgs []Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleUser {
			return msgs[i].Content
		}
	}
	return ""
}

func countToolCalls(msgs []Message) int {
	n := 0
	for _, msg := range msgs {
		n += len(msg.ToolCalls)
	}
	return n
}

func finalMessage(content string) Message {
	return Message{Role: RoleAssistant, Content: content}
}

// helpText explains what RuleModel understands. amount is a number seen in
// an otherwise unreadable message, or 0.
func helpText(zh bool, amount float64) string {
	if zh {
		prefix := "抱歉，我没看懂这句话。"
		if amount > 0 {
			prefix = fmt.Sprintf("我看到了金额 %s，但不清楚这笔钱是做什么用的。", formatAmount(amount))
		}
		return prefix + "我可以帮你记录收入和支出、查询账目，例如：“中午吃粉花了 35”、“昨天打车 23.5 元”、“工资到账 8000”、“今天花了多少”、“有哪些分类”。"
	}
	prefix := "Sorry, I couldn't understand that."
	if amount > 0 {
		prefix = fmt.Sprintf("I see the amount %s, but not what it was for.", formatAmount(amount))
	}
	return prefix + ` I can record income and expenses and look them up. Try for example: "lunch 35", "taxi 18 yesterday", "got paid 2000 salary", "how much did I spend today" or "show categories".`
}

package agent

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/webhook"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/toolexec"
)

// Defaults of Config.
const (
	// DefaultMaxRounds is how many model rounds a request may use.
	DefaultMaxRounds = 3
	// DefaultHistoryLimit is how many earlier messages of the session the
	// model sees.
	DefaultHistoryLimit = 20
	// maxCallsPerRound bounds the tool calls run for one model response.
	maxCallsPerRound = 4
)

// ErrModel is wrapped by the error of a run whose model call failed (not
// counting cancellation). The request is then marked failed and may be
// retried with the same client request id.
var ErrModel = errors.New("agent: model failed")

// Config configures an Agent.
type Config struct {
	// Store is the database. Required.
	Store *store.Store
	// Model answers the conversation. Required.
	Model llm.Model
	// MaxRounds bounds the model calls per request; 0 means 3.
	MaxRounds int
	// HistoryLimit bounds the earlier messages sent to the model; 0 means 20.
	HistoryLimit int
	// Webhook, when set, is notified of every booked transaction (the
	// external tool ToolNotify); nil means no notifications.
	Webhook *webhook.Sender
	// NoSteps turns the steps off: the model rounds are not recorded, so a
	// run that resumes a crashed one asks the model again, shown only what
	// committed (Run.Prior). A model that answers otherwise when asked
	// again then makes other tool calls. For comparison; the default
	// records every round.
	NoSteps bool
	// InTxBesideStep makes every model round that is a step (not with
	// NoSteps) run a fenced transaction of the run (Run.InTx) on another
	// goroutine while the step is asked and recorded: it journals the
	// round (store.AppendModelRound) and stays open until the step is
	// recorded — on SQLite, where it holds the database's only write lock
	// and the step's write waits for it, until the model answered — and
	// then fails, every other time (ErrBesideStep), so that it rolls back.
	// The failure is logged and the message goes on: a journal row is not
	// worth the user's message. It shows, and the kill test checks, that a
	// step recorded while another transaction of the run is open survives
	// that transaction's rollback.
	InTxBesideStep bool
	// ToolFailEvery, when positive, makes create_transaction fail as a
	// tool (a *toolexec.FailedError, shown to the model as a failure it
	// may retry) for one message in ToolFailEvery (ToolFailurePicked): the
	// call that model round 1 decided fails, every time it is made, so a
	// resumed run that replays the round sees the failure again; the call
	// of a later round goes through. The rule model retries a failure it
	// may retry. For tests of a tool that sometimes fails; 0 means never.
	ToolFailEvery int
	// ApproveAbove, when positive, is the threshold of approval, in
	// cents: before create_transaction books an expense above it, the
	// agent asks a person (request.Await, under ApprovalName(n), with an
	// ApprovalQuestion) and books it only if the answer is
	// {"approved": true}. Denied, nothing is booked and the reply says
	// so. 0 (or negative) never asks. The service's default is
	// DefaultApproveAbove.
	ApproveAbove int64
	// ApprovalWithin, when positive, is the deadline of an approval
	// (request.Within): past it with no answer, a Started Runner runs the
	// message on, nothing is booked and the reply says the approval
	// expired. 0 means no deadline.
	ApprovalWithin time.Duration
	// Now gives "today" for transactions without a date; nil means time.Now.
	Now func() time.Time
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Agent runs user messages. It is safe for concurrent use.
type Agent struct {
	cfg   Config
	st    *store.Store
	tools *toolexec.Registry
	log   *slog.Logger

	besides atomic.Int64 // transactions run beside a step (InTxBesideStep)
}

// New validates cfg and returns an Agent with its tools registered.
func New(cfg Config) (*Agent, error) {
	if cfg.Store == nil || cfg.Model == nil {
		return nil, errors.New("agent: Store and Model are required")
	}
	if cfg.MaxRounds <= 0 {
		cfg.MaxRounds = DefaultMaxRounds
	}
	if cfg.HistoryLimit <= 0 {
		cfg.HistoryLimit = DefaultHistoryLimit
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Agent{cfg: cfg, st: cfg.Store, tools: toolexec.NewRegistry(), log: cfg.Logger}
	for name, fn := range map[string]toolexec.SideEffect{
		llm.ToolCreateTransaction: a.createTransaction,
		llm.ToolListCategories:    a.listCategories,
		llm.ToolListTransactions:  a.listTransactions,
	} {
		if err := a.tools.Register(name, fn); err != nil {
			return nil, err
		}
	}
	if cfg.Webhook != nil {
		// Repeat: after a crash between announcing and recording a
		// notification, send it again with the same key. Right because
		// the receiver honours Idempotency-Key: a key it performed is
		// answered with its first answer, not performed twice.
		if err := a.tools.RegisterExternal(ToolNotify, a.notifyEffect, toolexec.ExternalOptions{Repeat: true}); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Tools is the registry to hand to request.Config.Tools.
func (a *Agent) Tools() *toolexec.Registry { return a.tools }

// Result is the JSON stored with a reply (request.Answer.Result).
type Result struct {
	// TransactionID is the transaction the message recorded, or nil.
	TransactionID *string `json:"transaction_id"`
	// Resumed: the run that answered picked up the work of an earlier run
	// of the same message that had started (stored the user message or
	// committed tool calls) and then crashed, failed or was abandoned.
	Resumed bool `json:"resumed,omitempty"`
}

// ParseResult reads a stored Result; an empty one has no transaction.
func ParseResult(raw json.RawMessage) (Result, error) {
	var r Result
	if len(raw) == 0 {
		return r, nil
	}
	err := json.Unmarshal(raw, &r)
	return r, err
}

// Handle runs one message (see the package documentation). It is a
// request.Agent.
func (a *Agent) Handle(ctx context.Context, run *request.Run) (request.Answer, error) {
	key, client := run.SessionKey(), run.ClientRequestID()
	if m, ok, err := a.st.FindMessage(ctx, a.st.DB, key, client, store.RoleAssistant); err != nil {
		return request.Answer{}, err
	} else if ok {
		return a.answer(ctx, run, m.Content, true)
	}
	history, err := a.st.History(ctx, a.st.DB, key, client, a.cfg.HistoryLimit)
	if err != nil {
		return request.Answer{}, err
	}
	var inserted bool
	if err := run.InTx(ctx, func(tx *sql.Tx) (err error) {
		inserted, err = a.st.AppendMessage(ctx, tx, store.Message{SessionKey: key, ClientRequestID: client,
			RequestID: run.RequestID(), Role: store.RoleUser, Content: run.Content()})
		return err
	}); err != nil {
		return request.Answer{}, err
	}
	// The reply says "resumed" only when an earlier run got somewhere: it
	// stored the message or committed a tool call. Taking over a run that
	// died before either is, to the user, a first answer.
	resumed := !inserted || len(run.Prior()) > 0

	zh := hasHan(run.Content())
	ctx = context.WithValue(ctx, langKey{}, zh)
	msgs := make([]llm.Message, 0, len(history)+8)
	msgs = append(msgs, llm.Message{Role: llm.RoleSystem, Content: systemPrompt(a.cfg.Now())})
	for _, m := range history {
		msgs = append(msgs, llm.Message{Role: llm.Role(m.Role), Content: m.Content})
	}
	msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: run.Content()})
	if a.cfg.NoSteps {
		// Without steps, the best a resumed run can do is tell the model
		// what committed, and hope it does not ask otherwise. With steps
		// the replayed rounds make the same calls, which return their
		// stored results: nothing to add.
		msgs = append(msgs, priorMessages(run.Prior())...)
	}

	ap := &approvals{}
	reply, err := a.converse(ctx, run, msgs, zh, ap)
	if err != nil {
		return request.Answer{}, err
	}
	if ap.answered {
		// The run goes on after a person's answer: replaying what the
		// run that asked did is no takeover. It resumed only if an
		// earlier run had got past the wait: a step after it was
		// replayed, or the booking it approved committed.
		resumed = run.StepsReplayed() > ap.replayed || slices.ContainsFunc(run.Prior(), func(p request.ToolRecord) bool {
			return p.Tool == llm.ToolCreateTransaction
		})
	} else {
		resumed = resumed || run.StepsReplayed() > 0
	}
	// The webhook, before the reply is stored: a stored reply means the
	// notification is settled (see notify).
	if note, err := a.notify(ctx, run, zh); err != nil {
		return request.Answer{}, err
	} else if note != "" {
		reply += "\n" + note
	}
	if err := run.InTx(ctx, func(tx *sql.Tx) error {
		_, err := a.st.AppendMessage(ctx, tx, store.Message{SessionKey: key, ClientRequestID: client,
			RequestID: run.RequestID(), Role: store.RoleAssistant, Content: reply})
		return err
	}); err != nil {
		return request.Answer{}, err
	}
	return a.answer(ctx, run, reply, resumed)
}

// answer builds the Answer: the reply and the request's transaction, read
// from the ledger (the one source of truth, whichever run wrote it).
func (a *Agent) answer(ctx context.Context, run *request.Run, reply string, resumed bool) (request.Answer, error) {
	res := Result{Resumed: resumed}
	t, ok, err := a.st.TransactionByRequest(ctx, a.st.DB, run.RequestID())
	if err != nil {
		return request.Answer{}, err
	}
	if ok {
		res.TransactionID = &t.ID
	}
	b, err := json.Marshal(res)
	if err != nil {
		return request.Answer{}, err
	}
	return request.Answer{Reply: reply, Result: b}, nil
}

// converse runs the model rounds and the tool calls, and returns the reply.
func (a *Agent) converse(ctx context.Context, run *request.Run, msgs []llm.Message, zh bool, ap *approvals) (string, error) {
	tools := llm.BookkeeperTools()
	for round := 1; round <= a.cfg.MaxRounds; round++ {
		m, err := a.modelRound(ctx, run, round, llm.Request{Messages: msgs, Tools: tools})
		if err != nil {
			return "", err
		}
		if len(m.ToolCalls) == 0 {
			if reply := strings.TrimSpace(m.Content); reply != "" {
				return reply, nil
			}
			break
		}
		if round == a.cfg.MaxRounds {
			// No round is left to read the results: run nothing more.
			a.log.Info("agent: out of model rounds", "request", run.RequestID(), "rounds", round)
			break
		}
		m.Role = llm.RoleAssistant
		for i := range m.ToolCalls {
			if m.ToolCalls[i].ID == "" {
				m.ToolCalls[i].ID = fmt.Sprintf("call_r%d_%d", round, i+1)
			}
			m.ToolCalls[i].Type = llm.ToolCallTypeFunction
		}
		msgs = append(msgs, m)
		tctx := context.WithValue(ctx, roundKey{}, round)
		for i, tc := range m.ToolCalls {
			content := errorJSON(fmt.Sprintf("at most %d tool calls per round; call it again in the next round", maxCallsPerRound))
			if i < maxCallsPerRound {
				if content, err = a.callTool(tctx, run, tc, ap); err != nil {
					return "", err
				}
			}
			msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Name: tc.Function.Name, Content: content})
		}
	}
	return a.fallbackReply(ctx, run, zh)
}

// StepName is the name of the step that records model round n (from 1).
func StepName(round int) string { return fmt.Sprintf("model-round-%d", round) }

// modelRound asks the model for round n, as a step: the first run to get
// there asks the model and records its answer before anything acts on it;
// a run that resumes the request gets the recorded answer back without
// asking, so the tool calls that follow are the same calls (the same
// idempotency keys) and their stored results are reused. Everything the
// agent does between two rounds is deterministic given the recorded
// answers and the tools' stored results: the conversation is the same
// prefix (the history and the prompt only feed round 1's model call, which
// a replay does not make), the calls are run in the recorded order, and
// the ids given to calls without one depend only on the round and the
// position.
func (a *Agent) modelRound(ctx context.Context, run *request.Run, n int, req llm.Request) (llm.Message, error) {
	var b *beside
	ask := func(ctx context.Context) (llm.Message, error) {
		a.log.Debug("agent: model asked", "request", run.RequestID(), "client_request_id", run.ClientRequestID(), "round", n)
		resp, err := a.cfg.Model.Complete(ctx, req)
		b.answered()
		if err != nil {
			if ctx.Err() != nil {
				return llm.Message{}, context.Cause(ctx)
			}
			return llm.Message{}, fmt.Errorf("%w: round %d: %w", ErrModel, n, err)
		}
		return resp.Message, nil
	}
	if a.cfg.NoSteps {
		return ask(ctx)
	}
	if a.cfg.InTxBesideStep {
		b = a.startBeside(ctx, run, n)
		defer b.end()
	}
	return request.Step(ctx, run, StepName(n), ask)
}

// callTool runs one tool call and returns the tool message's content. The
// tool's own failures, unknown tools and bad arguments become {"error":…}
// for the model; anything else (lease lost, cancelled, database down,
// the same call running elsewhere) ends the run. A booking above
// Config.ApproveAbove waits for a person's approval first (approve): the
// run ends there, as waiting (request.ErrWaiting), and a denial or an
// expired approval is the call's result, with nothing booked.
func (a *Agent) callTool(ctx context.Context, run *request.Run, tc llm.ToolCall, ap *approvals) (string, error) {
	args := strings.TrimSpace(tc.Function.Arguments)
	if args == "" {
		args = "{}"
	}
	if tc.Function.Name == ToolNotify {
		// The agent notifies, once per booked transaction; not the model.
		return errorJSON(fmt.Sprintf("unknown tool %q; the tools are %s", ToolNotify, strings.Join(a.modelTools(), ", "))), nil
	}
	if tc.Function.Name == llm.ToolCreateTransaction {
		if denied, err := a.approve(ctx, run, ap, args); err != nil || denied != "" {
			return denied, err
		}
	}
	res, err := run.CallTool(ctx, tc.Function.Name, json.RawMessage(args))
	var failed *toolexec.FailedError
	switch {
	case err == nil:
		a.log.Debug("agent: tool done", "request", run.RequestID(), "tool", tc.Function.Name, "reused", res.Reused)
		return string(res.Output), nil
	case errors.As(err, &failed):
		var te *toolError
		if errors.As(failed.Err, &te) {
			return errorJSON(te.msg), nil
		}
		a.log.Warn("agent: tool failed", "request", run.RequestID(), "client_request_id", run.ClientRequestID(),
			"tool", tc.Function.Name, "err", failed.Err)
		return retryableErrorJSON("the ledger could not complete this call; it may be retried"), nil
	case errors.Is(err, toolexec.ErrUnknownTool):
		return errorJSON(fmt.Sprintf("unknown tool %q; the tools are %s", truncate(tc.Function.Name, 64),
			strings.Join(a.modelTools(), ", "))), nil
	case errors.As(err, new(*toolexec.ArgumentsError)):
		return errorJSON("arguments must be a JSON object: " + truncate(err.Error(), 200)), nil
	}
	return "", err
}

// modelTools are the registered tools the model may call.
func (a *Agent) modelTools() []string {
	var out []string
	for _, n := range a.tools.Names() {
		if n != ToolNotify {
			out = append(out, n)
		}
	}
	return out
}

// fallbackReply answers when the model used up its rounds or said nothing.
func (a *Agent) fallbackReply(ctx context.Context, run *request.Run, zh bool) (string, error) {
	t, ok, err := a.st.TransactionByRequest(ctx, a.st.DB, run.RequestID())
	if err != nil {
		return "", err
	}
	switch {
	case ok && zh:
		return fmt.Sprintf("已记账：%s %s 元（%s），但我没能在 %d 步之内完成回答。", typeWord(t.Type, true), t.Amount(), t.Category, a.cfg.MaxRounds), nil
	case ok:
		return fmt.Sprintf("Recorded %s %s (%s), but I could not finish my answer within %d steps.", t.Type, t.Amount(), t.CategoryEN, a.cfg.MaxRounds), nil
	case zh:
		return fmt.Sprintf("抱歉，我没能在 %d 步之内完成这个请求，请换个说法再试一次。", a.cfg.MaxRounds), nil
	}
	return fmt.Sprintf("Sorry, I could not complete that within %d steps. Please rephrase and try again.", a.cfg.MaxRounds), nil
}

// priorMessages turns the tool calls that committed in a crashed run into
// an assistant message and its tool results, so the model sees them as done.
// The webhook notification is the agent's own call, not the model's: left
// out.
func priorMessages(prior []request.ToolRecord) []llm.Message {
	prior = slices.DeleteFunc(slices.Clone(prior), func(p request.ToolRecord) bool { return p.Tool == ToolNotify })
	if len(prior) == 0 {
		return nil
	}
	call := llm.Message{Role: llm.RoleAssistant}
	var results []llm.Message
	for i, p := range prior {
		id := fmt.Sprintf("prior_%d", i+1)
		call.ToolCalls = append(call.ToolCalls, llm.ToolCall{ID: id, Type: llm.ToolCallTypeFunction,
			Function: llm.FunctionCall{Name: p.Tool, Arguments: "{}"}})
		content := string(p.Result)
		if content == "" {
			content = "null"
		}
		results = append(results, llm.Message{Role: llm.RoleTool, ToolCallID: id, Name: p.Tool, Content: content})
	}
	return append([]llm.Message{call}, results...)
}

func systemPrompt(now time.Time) string {
	return "You are a bookkeeping assistant. Record the user's income and expenses with create_transaction " +
		"(at most one transaction per user message), answer questions about them with list_transactions, " +
		"and show the categories with list_categories. Amounts are positive, with at most two decimals. " +
		"Today is " + now.Format(store.DateLayout) + ". Answer briefly, in the user's language."
}

func errorJSON(msg string) string {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return string(b)
}

// retryableErrorJSON is a failure the model may retry: the call made
// again may go through ({"error":…,"retryable":true}).
func retryableErrorJSON(msg string) string {
	b, _ := json.Marshal(map[string]any{"error": msg, llm.RetryableField: true})
	return string(b)
}

func hasHan(s string) bool {
	for _, r := range s {
		if unicode.Is(unicode.Han, r) {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	rs := []rune(s)
	if len(rs) <= n {
		return s
	}
	return string(rs[:n]) + "…"
}

func typeWord(typ string, zh bool) string {
	switch {
	case zh && typ == store.TypeIncome:
		return "收入"
	case zh:
		return "支出"
	}
	return typ
}

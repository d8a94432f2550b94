package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/agent"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/webhook"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/rowleasetest"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// scripted is a model whose answer to round n (1-based, counted over the
// model's life) is next(n, req). It records every request.
type scripted struct {
	mu   sync.Mutex
	reqs []llm.Request
	next func(n int, req llm.Request) (llm.Message, error)
}

func (s *scripted) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, llm.Request{Messages: append([]llm.Message(nil), req.Messages...), Tools: req.Tools})
	n := len(s.reqs)
	s.mu.Unlock()
	m, err := s.next(n, req)
	return llm.Response{Message: m}, err
}

func (s *scripted) calls() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.reqs) }

func (s *scripted) request(n int) llm.Request { s.mu.Lock(); defer s.mu.Unlock(); return s.reqs[n-1] }

func call(id, name, args string) llm.ToolCall {
	return llm.ToolCall{ID: id, Type: llm.ToolCallTypeFunction, Function: llm.FunctionCall{Name: name, Arguments: args}}
}

func calls(cs ...llm.ToolCall) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, ToolCalls: cs}
}

func final(s string) llm.Message { return llm.Message{Role: llm.RoleAssistant, Content: s} }

// toolResults returns the tool messages after the last user message.
func toolResults(req llm.Request) map[string]string {
	out := map[string]string{}
	for _, m := range req.Messages {
		if m.Role == llm.RoleTool {
			out[m.ToolCallID] = m.Content
		}
	}
	return out
}

type env struct {
	st     *store.Store
	runner *request.Runner
	ag     *agent.Agent
	sid    string
}

func newEnv(t *testing.T, db *sqlx.DB, model llm.Model, ttl time.Duration) *env {
	t.Helper()
	return newEnvWith(t, db, model, ttl, nil)
}

// newEnvWith is newEnv with a webhook to notify (nil: none).
func newEnvWith(t *testing.T, db *sqlx.DB, model llm.Model, ttl time.Duration, hook *webhook.Sender) *env {
	t.Helper()
	ctx := context.Background()
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	st := store.New(db.DB, d)
	require.NoError(t, st.Migrate(ctx))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ag, err := agent.New(agent.Config{Store: st, Model: model, Logger: log, Webhook: hook,
		Now: func() time.Time { return time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC) }})
	require.NoError(t, err)
	r, err := request.New(request.Config{DB: st.DB, Dialect: d, TTL: ttl, Tools: ag.Tools(), Logger: log})
	require.NoError(t, err)
	sess, err := st.CreateSession(ctx, r.Sessions())
	require.NoError(t, err)
	return &env{st: st, runner: r, ag: ag, sid: sess.ID}
}

func (e *env) handle(t *testing.T, content, id string) (request.Outcome, agent.Result) {
	t.Helper()
	out, err := e.runner.Handle(context.Background(), request.Message{SessionKey: e.sid, ClientRequestID: id, Content: content}, e.ag.Handle)
	require.NoError(t, err)
	res, err := agent.ParseResult(out.Result)
	require.NoError(t, err)
	return out, res
}

func (e *env) count(t *testing.T) int {
	n, err := e.st.CountTransactions(context.Background(), e.st.DB)
	require.NoError(t, err)
	return n
}

func TestToolErrorsGoBackToTheModel(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		m := &scripted{}
		m.next = func(n int, req llm.Request) (llm.Message, error) {
			switch n {
			case 1:
				return calls(
					call("a", "fly_to_the_moon", `{}`),
					call("b", llm.ToolCreateTransaction, `{"type":"expense","amount":-5}`),
					call("c", llm.ToolCreateTransaction, `not json`),
					call("d", llm.ToolCreateTransaction, `{"type":"expense","amount":5,"colour":"red"}`),
				), nil
			case 2:
				return calls(call("e", llm.ToolCreateTransaction, `{"type":"expense","amount":12.5,"category_name":"food","note":"noodles"}`)), nil
			}
			return final("done"), nil
		}
		e := newEnv(t, db, m, 10*time.Second)
		out, res := e.handle(t, "noodles 12.5", "c1")
		assert.Equal(t, "done", out.Reply)
		require.NotNil(t, res.TransactionID)
		assert.Equal(t, 3, m.calls())
		assert.Equal(t, 1, e.count(t))

		got := toolResults(m.request(2))
		assert.Contains(t, got["a"], `"error"`)
		assert.Contains(t, got["a"], `unknown tool \"fly_to_the_moon\"`)
		assert.Contains(t, got["b"], "not positive")
		assert.Contains(t, got["c"], "arguments must be a JSON object")
		assert.Contains(t, got["d"], `unknown field \"colour\"`)
		var created map[string]any
		require.NoError(t, json.Unmarshal([]byte(toolResults(m.request(3))["e"]), &created))
		assert.Equal(t, *res.TransactionID, created["transaction_id"])
		assert.Equal(t, "12.50", created["amount"])
		assert.Equal(t, "Food", created["category"])
		assert.Equal(t, "2024-05-01", created["occur_date"], "no date means today")

		// The conversation the model saw: system prompt, then the user.
		first := m.request(1).Messages
		assert.Equal(t, llm.RoleSystem, first[0].Role)
		assert.Contains(t, first[0].Content, "2024-05-01")
		assert.Equal(t, llm.Message{Role: llm.RoleUser, Content: "noodles 12.5"}, first[len(first)-1])
		assert.Len(t, m.request(1).Tools, 3)
	})
}

func TestAtMostThreeRounds(t *testing.T) {
	m := &scripted{next: func(n int, req llm.Request) (llm.Message, error) {
		return calls(call("x", llm.ToolListCategories, `{}`)), nil
	}}
	e := newEnv(t, testdb.Open(t, lease.SQLite), m, 10*time.Second)
	out, res := e.handle(t, "show categories", "c1")
	assert.Equal(t, agent.DefaultMaxRounds, m.calls())
	assert.Contains(t, out.Reply, "within 3 steps")
	assert.Nil(t, res.TransactionID)
}

func TestOneTransactionPerRequest(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		m := &scripted{}
		m.next = func(n int, req llm.Request) (llm.Message, error) {
			switch n {
			case 1:
				return calls(call("a", llm.ToolCreateTransaction, `{"type":"expense","amount":10}`)), nil
			case 2:
				return calls(call("b", llm.ToolCreateTransaction, `{"type":"expense","amount":20}`)), nil
			}
			return final("ok"), nil
		}
		e := newEnv(t, db, m, 10*time.Second)
		_, res := e.handle(t, "10 and 20", "c1")
		require.NotNil(t, res.TransactionID)
		assert.Equal(t, 1, e.count(t))
		assert.Contains(t, toolResults(m.request(3))["b"], "only one transaction per message")
		tr, ok, err := e.st.TransactionByRequest(context.Background(), e.st.DB, mustRequestID(t, e, "c1"))
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, "10.00", tr.Amount())
		assert.Equal(t, store.OtherCategoryID, tr.CategoryID, "no category: the catch-all")
	})
}

func mustRequestID(t *testing.T, e *env, client string) string {
	t.Helper()
	var id string
	require.NoError(t, e.st.DB.QueryRow(e.st.Dialect.Rebind("SELECT id FROM rowlease_request WHERE client_request_id = ?"), client).Scan(&id))
	return id
}

func TestCreateTransactionArguments(t *testing.T) {
	db := testdb.Open(t, lease.SQLite)
	var args string
	m := &scripted{}
	m.next = func(n int, req llm.Request) (llm.Message, error) {
		if len(toolResults(req)) == 0 {
			return calls(call("a", llm.ToolCreateTransaction, args)), nil
		}
		return final(toolResults(req)["a"]), nil
	}
	e := newEnv(t, db, m, 10*time.Second)
	for i, tc := range []struct {
		args, want string
	}{
		{`{"type":"expense","amount":35,"category_name":"餐饮"}`, `"category":"餐饮"`},
		{`{"type":"expense","amount":"35.5","category_name":"TRANSPORT"}`, `"amount":"35.50"`},
		{`{"type":"income","amount":2000,"category_name":"Salary","occur_date":"2024-04-30"}`, `"occur_date":"2024-04-30"`},
		{`{"type":"income","amount":20,"category_name":"Gifts"}`, `"category":"Gifts"`},
		{`{"type":"income","amount":20,"category_name":"Food"}`, `category \"Food\" is for expense, not income`},
		{`{"type":"expense","amount":20,"category_name":"Spaceships"}`, `unknown category \"Spaceships\"; use one of: Food, Transport`},
		{`{"type":"expense","amount":1.234}`, "more than two decimal places"},
		{`{"type":"expense","amount":1e12}`, "larger than"},
		{`{"type":"expense","amount":"ten"}`, "invalid arguments"},
		{`{"type":"expense"}`, "amount is required"},
		{`{"amount":3}`, "type is required"},
		{`{"type":"refund","amount":3}`, "type is required"},
		{`{"type":"expense","amount":3,"occur_date":"yesterday"}`, "is not a date"},
		{`{"type":"expense","amount":3,"note":"` + strings.Repeat("n", agent.MaxNoteLen+1) + `"}`, "note is longer"},
	} {
		args = tc.args
		out, _ := e.handle(t, "test", "c"+string(rune('a'+i)))
		assert.Contains(t, out.Reply, tc.want, tc.args)
	}
	assert.Equal(t, 4, e.count(t))
}

func TestListTools(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, llm.NewRuleModel(llm.RuleOptions{Now: func() time.Time { return time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC) }}), 10*time.Second)
		e.handle(t, "中午吃粉花了 35", "c1")
		e.handle(t, "taxi 18 yesterday", "c2")
		e.handle(t, "got paid 2000 salary", "c3")
		out, res := e.handle(t, "今天花了多少", "c4")
		assert.Nil(t, res.TransactionID)
		assert.Contains(t, out.Reply, "35.00")
		assert.NotContains(t, out.Reply, "18.00")
		out, _ = e.handle(t, "show categories", "c5")
		assert.Contains(t, out.Reply, "Food")
		assert.Contains(t, out.Reply, "Side job")
		out, _ = e.handle(t, "有哪些分类", "c6")
		assert.Contains(t, out.Reply, "餐饮")
		assert.Equal(t, 3, e.count(t))
	})
}

// A run that dies after create_transaction committed: the next run (after
// the TTL) replays the recorded first round, so the call is the committed
// one and its result is reused; the model is asked only the round that
// was not recorded, and the user message is stored once.
func TestResumeAfterCrash(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		ttl := 500 * time.Millisecond
		var crashing *request.Run
		m := &scripted{}
		m.next = func(n int, req llm.Request) (llm.Message, error) {
			if n == 1 {
				return calls(call("call_1", llm.ToolCreateTransaction, `{"type":"expense","amount":35,"category_name":"餐饮","note":"中午吃粉"}`)), nil
			}
			rowleasetest.Crash(crashing) // the process dies in the second round
			return llm.Message{}, errors.New("crashed")
		}
		e := newEnv(t, db, m, ttl)
		msg := request.Message{SessionKey: e.sid, ClientRequestID: "c1", Content: "中午吃粉花了 35"}
		_, err := e.runner.Handle(context.Background(), msg, func(ctx context.Context, run *request.Run) (request.Answer, error) {
			crashing = run
			return e.ag.Handle(ctx, run)
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 1, e.count(t))

		rule := &scripted{next: func(n int, req llm.Request) (llm.Message, error) {
			r, err := llm.NewRuleModel(llm.RuleOptions{}).Complete(context.Background(), req)
			return r.Message, err
		}}
		e2 := &env{st: e.st, sid: e.sid}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		e2.ag, err = agent.New(agent.Config{Store: e.st, Model: rule, Logger: log})
		require.NoError(t, err)
		e2.runner, err = request.New(request.Config{DB: e.st.DB, TTL: ttl, Tools: e2.ag.Tools(), Logger: log})
		require.NoError(t, err)
		var out request.Outcome
		deadline := time.Now().Add(20 * time.Second)
		for {
			out, err = e2.runner.Handle(context.Background(), msg, e2.ag.Handle)
			if !errors.Is(err, request.ErrInFlight) && !errors.As(err, new(*session.BusyError)) {
				break
			}
			require.True(t, time.Now().Before(deadline), "the dead run's leases never expired")
			time.Sleep(50 * time.Millisecond)
		}
		require.NoError(t, err)
		res, err := agent.ParseResult(out.Result)
		require.NoError(t, err)
		assert.True(t, res.Resumed)
		require.NotNil(t, res.TransactionID)
		assert.Contains(t, out.Reply, "已记账：支出 35.00 元（餐饮）")
		assert.Equal(t, 1, rule.calls(), "round 1 was replayed: the model only had to answer")
		var sawPrior bool
		for _, m := range rule.request(1).Messages {
			if m.Role == llm.RoleTool && strings.Contains(m.Content, *res.TransactionID) {
				sawPrior = true
			}
		}
		assert.True(t, sawPrior)
		assert.Equal(t, 1, e.count(t))
		ms, err := e.st.Messages(context.Background(), e.st.DB, e.sid, 0)
		require.NoError(t, err)
		require.Len(t, ms, 2)
		assert.Equal(t, store.RoleUser, ms[0].Role)
		assert.Equal(t, out.Reply, ms[1].Content)
	})
}

// A model that words its answer otherwise each time it is asked
// (RuleOptions.Vary), and a run that dies in round 2, after
// create_transaction committed. With steps the resumed run replays round
// 1: the same call, reused, and the model is asked round 2 only. Without
// them (Config.NoSteps) the model is asked again and makes another call,
// under another key — a second write, which only this ledger's "one
// transaction per message" rule refuses.
func TestResumeWithAVaryingModel(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		for _, noSteps := range []bool{false, true} {
			ttl := 500 * time.Millisecond
			vary := llm.NewRuleModel(llm.RuleOptions{Vary: true})
			var crashing *request.Run
			var asked int
			m := &scripted{next: func(n int, req llm.Request) (llm.Message, error) {
				asked++
				if n == 2 {
					rowleasetest.Crash(crashing) // the process dies in the second round
					return llm.Message{}, errors.New("crashed")
				}
				r, err := vary.Complete(context.Background(), req)
				return r.Message, err
			}}
			e := newEnv(t, db, m, ttl)
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			var err error
			e.ag, err = agent.New(agent.Config{Store: e.st, Model: m, Logger: log, NoSteps: noSteps})
			require.NoError(t, err)
			e.runner, err = request.New(request.Config{DB: e.st.DB, TTL: ttl, Tools: e.ag.Tools(), Logger: log})
			require.NoError(t, err)
			client := fmt.Sprintf("c-nosteps-%v", noSteps) // mustRequestID looks in every session
			msg := request.Message{SessionKey: e.sid, ClientRequestID: client, Content: "lunch 35"}
			_, err = e.runner.Handle(context.Background(), msg, func(ctx context.Context, run *request.Run) (request.Answer, error) {
				crashing = run
				return e.ag.Handle(ctx, run)
			})
			require.ErrorIs(t, err, context.Canceled)
			rows := func() (n int) {
				require.NoError(t, db.Get(&n, db.Rebind("SELECT COUNT(*) FROM ledger_transaction WHERE request_id = ?"), mustRequestID(t, e, client)))
				return n
			}
			require.Equal(t, 1, rows(), "create_transaction committed before the crash")

			var out request.Outcome
			deadline := time.Now().Add(20 * time.Second)
			for {
				out, err = e.runner.Handle(context.Background(), msg, e.ag.Handle)
				if !errors.Is(err, request.ErrInFlight) && !errors.As(err, new(*session.BusyError)) {
					break
				}
				require.True(t, time.Now().Before(deadline), "the dead run's leases never expired")
				time.Sleep(50 * time.Millisecond)
			}
			require.NoError(t, err)
			res, err := agent.ParseResult(out.Result)
			require.NoError(t, err)
			assert.True(t, res.Resumed)
			require.NotNil(t, res.TransactionID)
			assert.Equal(t, 1, rows(), "one ledger row either way")
			var createCalls int
			require.NoError(t, db.Get(&createCalls, db.Rebind("SELECT COUNT(*) FROM "+schema.ToolExecutionTable+" WHERE request_id = ? AND tool_name = ?"),
				mustRequestID(t, e, client), llm.ToolCreateTransaction))
			if noSteps {
				assert.Equal(t, 2, createCalls, "without steps: asked again, the model made another call")
				assert.Equal(t, 4, asked, "round 1, round 2 (died), then rounds 1 and 2 again")
			} else {
				assert.Equal(t, 1, createCalls, "with steps: the replayed round made the same call")
				assert.Equal(t, 3, asked, "round 1, round 2 (died), then round 2 only")
			}
		}
	})
}

// With ToolFailEvery and InTxBesideStep: the create_transaction call of
// round 1 fails as a tool, the model is told it may retry and books in
// round 2, and the reply says so without the failure; every round's step
// is recorded while a transaction of the run journals the round beside
// it, and the one of round 2 (every other one) rolls back, which fails
// neither its step nor the message.
func TestToolFailureRetriedBesideFailingTx(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		model := llm.NewRuleModel(llm.RuleOptions{Vary: true})
		e := newEnv(t, db, model, 10*time.Second)
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		var err error
		e.ag, err = agent.New(agent.Config{Store: e.st, Model: model, Logger: log,
			InTxBesideStep: true, ToolFailEvery: 1})
		require.NoError(t, err)
		e.runner, err = request.New(request.Config{DB: e.st.DB, TTL: 10 * time.Second, Tools: e.ag.Tools(), Logger: log})
		require.NoError(t, err)
		require.True(t, agent.ToolFailurePicked("c1", 1))

		out, res := e.handle(t, "lunch 35", "c1")
		require.NotNil(t, res.TransactionID)
		assert.True(t, strings.HasPrefix(out.Reply, "Recorded expense 35.00"), out.Reply)
		assert.NotContains(t, out.Reply, "Sorry")
		assert.Equal(t, 1, e.count(t))

		id := mustRequestID(t, e, "c1")
		num := func(q string, args ...any) (n int) {
			require.NoError(t, db.Get(&n, db.Rebind(q), args...))
			return n
		}
		byStatus := "SELECT COUNT(*) FROM " + schema.ToolExecutionTable + " WHERE request_id = ? AND tool_name = ? AND status = ?"
		assert.Equal(t, 1, num(byStatus, id, llm.ToolCreateTransaction, schema.StoredFailed), "round 1's call failed")
		assert.Equal(t, 1, num(byStatus, id, llm.ToolCreateTransaction, schema.StoredSucceeded), "round 2's went through")
		var failure string
		require.NoError(t, db.Get(&failure, db.Rebind("SELECT "+schema.ColError+" FROM "+schema.ToolExecutionTable+
			" WHERE request_id = ? AND status = ?"), id, schema.StoredFailed))
		assert.Contains(t, failure, "-tool-fail-every")
		assert.Equal(t, 3, num("SELECT COUNT(*) FROM "+schema.StepTable+" WHERE request_id = ?", id), "three rounds recorded")
		var rounds []int
		require.NoError(t, db.Select(&rounds, db.Rebind("SELECT round_no FROM model_round WHERE request_id = ? ORDER BY round_no"), id))
		assert.Equal(t, []int{1, 3}, rounds, "round 2's journal rolled back")
	})
}

// An expense above ApproveAbove waits for approval (the run ends as
// waiting, nothing booked); once approved it is booked, and a call made
// again for the same booking after a retryable failure (ToolFailEvery,
// with a model that words it anew) is not asked about twice.
func TestApprovalAskedOncePerBooking(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		model := llm.NewRuleModel(llm.RuleOptions{Vary: true})
		e := newEnv(t, db, model, 10*time.Second)
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		var err error
		e.ag, err = agent.New(agent.Config{Store: e.st, Model: model, Logger: log, ToolFailEvery: 1, ApproveAbove: 100_000})
		require.NoError(t, err)
		e.runner, err = request.New(request.Config{DB: e.st.DB, TTL: 10 * time.Second, Tools: e.ag.Tools(), Logger: log, Agent: e.ag.Handle})
		require.NoError(t, err)
		ctx := context.Background()

		small, _ := e.handle(t, "lunch 35", "c0")
		assert.Nil(t, small.Waiting, "at or under the threshold nothing waits")
		out, err := e.runner.Handle(ctx, request.Message{SessionKey: e.sid, ClientRequestID: "c1", Content: "paid rent 4,800.00"}, nil)
		require.NoError(t, err)
		require.NotNil(t, out.Waiting)
		assert.Equal(t, agent.ApprovalName(1), out.Waiting.Name)
		var q agent.ApprovalQuestion
		require.NoError(t, json.Unmarshal(out.Waiting.Question, &q))
		assert.Equal(t, "Book 4,800.00 to Housing?", q.Text)
		assert.Equal(t, 1, e.count(t))

		out, err = e.runner.Answer(ctx, e.sid, "c1", agent.ApprovalName(1), agent.Approval{Approved: true})
		require.NoError(t, err)
		require.Nil(t, out.Waiting, "one question for the booking, though its call was made twice")
		assert.True(t, strings.HasPrefix(out.Reply, "Recorded expense 4800.00"), out.Reply)
		res, err := agent.ParseResult(out.Result)
		require.NoError(t, err)
		require.NotNil(t, res.TransactionID)
		assert.False(t, res.Resumed)
		assert.Equal(t, 2, e.count(t))
	})
}

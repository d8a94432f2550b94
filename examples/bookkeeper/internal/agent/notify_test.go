package agent_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/agent"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/webhook"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/rowleasetest"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

var fixedNow = func() time.Time { return time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC) }

func receiver(t *testing.T, cfg webhook.ReceiverConfig) (*webhook.Receiver, *webhook.Sender) {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r := webhook.NewReceiver(cfg)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	s, err := webhook.NewSender(srv.URL+"/booked", 5*time.Second)
	require.NoError(t, err)
	return r, s
}

// notifyRows counts the notify_webhook executions by status.
func notifyRows(t *testing.T, e *env) map[string]int {
	t.Helper()
	rows, err := e.st.DB.Query(e.st.Dialect.Rebind("SELECT status, COUNT(*) FROM "+schema.ToolExecutionTable+
		" WHERE tool_name = ? GROUP BY status"), agent.ToolNotify)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// A message that books a transaction notifies the webhook once, with the
// tool execution's id as Idempotency-Key, and the reply says so; a
// question notifies nothing; a replay sends nothing.
func TestNotifyOncePerBookedMessage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		r, s := receiver(t, webhook.ReceiverConfig{})
		e := newEnvWith(t, db, llm.NewRuleModel(llm.RuleOptions{Now: fixedNow}), 10*time.Second, s)
		out, res := e.handle(t, "中午吃粉花了 35", "c1")
		require.NotNil(t, res.TransactionID)
		assert.Equal(t, "已记账：支出 35.00 元（餐饮）\n已推送通知（回执 r-000001）。", out.Reply)
		out, _ = e.handle(t, "taxi 18 yesterday", "c2")
		assert.Contains(t, out.Reply, "Webhook notified (receipt r-000002).")
		out, res2 := e.handle(t, "how much did I spend today", "c3")
		assert.Nil(t, res2.TransactionID)
		assert.NotContains(t, out.Reply, "otif")
		again, _ := e.handle(t, "中午吃粉花了 35", "c1")
		assert.True(t, again.Replayed)

		effects := r.Effects()
		require.Len(t, effects, 2)
		n := effects[0].Notification
		assert.Equal(t, webhook.Notification{Event: webhook.EventBooked, TransactionID: *res.TransactionID, Type: "expense",
			Amount: "35.00", Category: "food", OccurDate: "2024-05-01", SessionID: e.sid, RequestID: out0(t, e, "c1")}, n)
		var key string
		require.NoError(t, db.Get(&key, db.Rebind("SELECT id FROM "+schema.ToolExecutionTable+" WHERE tool_name = ? AND request_id = ?"),
			agent.ToolNotify, n.RequestID))
		assert.Equal(t, key, effects[0].Key, "the effect key is the tool execution's id")
		assert.Equal(t, map[string]int{schema.StoredSucceeded: 2}, notifyRows(t, e))
		assert.Equal(t, webhook.Stats{Requests: 2, Effects: 2}, r.Stats())
	})
}

// out0 returns the request id of a client request id.
func out0(t *testing.T, e *env, client string) string {
	t.Helper()
	var id string
	require.NoError(t, e.st.DB.QueryRow(e.st.Dialect.Rebind("SELECT id FROM "+schema.RequestTable+
		" WHERE session_key = ? AND client_request_id = ?"), e.sid, client).Scan(&id))
	return id
}

// The receiver performs the effect but its answer is a 500: the outcome is
// unknown, so the request fails (it is not answered as a success). The
// retry sends the same key again; the receiver answers with its first
// answer, and there is one effect.
func TestNotifyUnknownOutcomeFailsUntilRetried(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		var failAnswer atomic.Bool
		failAnswer.Store(true)
		r, s := receiver(t, webhook.ReceiverConfig{Hook: func(stage webhook.Stage, key string) error {
			if stage == webhook.Performed && failAnswer.Swap(false) {
				return errors.New("the answer is lost")
			}
			return nil
		}})
		e := newEnvWith(t, db, llm.NewRuleModel(llm.RuleOptions{Now: fixedNow}), 10*time.Second, s)
		msg := request.Message{SessionKey: e.sid, ClientRequestID: "c1", Content: "coffee 4.5"}
		_, err := e.runner.Handle(context.Background(), msg, e.ag.Handle)
		require.ErrorIs(t, err, request.ErrAgentFailed)
		require.ErrorAs(t, err, new(*toolexec.UnknownOutcomeError))
		var ue *toolexec.UnknownOutcomeError
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, 1, e.count(t))
		assert.Equal(t, map[string]int{schema.StoredStarted: 1}, notifyRows(t, e))
		require.Len(t, r.Effects(), 1)
		assert.Equal(t, ue.EffectKey, r.Effects()[0].Key)

		out, res := e.handle(t, "coffee 4.5", "c1")
		assert.True(t, out.Resumed)
		assert.True(t, res.Resumed)
		assert.Contains(t, out.Reply, "Recorded expense 4.50")
		assert.Contains(t, out.Reply, "Webhook notified (receipt r-000001).")
		assert.Len(t, r.Effects(), 1, "the same key again: no second effect")
		assert.Equal(t, webhook.Stats{Requests: 2, Effects: 1, Replays: 1}, r.Stats())
		assert.Equal(t, map[string]int{schema.StoredSucceeded: 1}, notifyRows(t, e))
		assert.Equal(t, 1, e.count(t))
	})
}

// A refusal (4xx) is told in the reply; the transaction stands and the
// request is answered.
func TestNotifyRefused(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "unknown ledger", http.StatusBadRequest)
		}))
		t.Cleanup(srv.Close)
		s, err := webhook.NewSender(srv.URL, 0)
		require.NoError(t, err)
		e := newEnvWith(t, db, llm.NewRuleModel(llm.RuleOptions{Now: fixedNow}), 10*time.Second, s)
		out, res := e.handle(t, "lunch 42.5", "c1")
		require.NotNil(t, res.TransactionID)
		assert.Contains(t, out.Reply, "Recorded expense 42.50")
		assert.Contains(t, out.Reply, "The webhook refused the notification (HTTP 400); the transaction is recorded.")
		assert.Equal(t, map[string]int{schema.StoredFailed: 1}, notifyRows(t, e))
		assert.Equal(t, 1, e.count(t))
	})
}

// The model cannot call the notification tool: it is the agent's.
func TestModelCannotNotify(t *testing.T) {
	r, s := receiver(t, webhook.ReceiverConfig{})
	m := &scripted{}
	m.next = func(n int, req llm.Request) (llm.Message, error) {
		if n == 1 {
			return calls(call("a", agent.ToolNotify, `{"event":"transaction.booked","transaction_id":"x"}`)), nil
		}
		return final("ok"), nil
	}
	e := newEnvWith(t, testdb.Open(t, testdb.Dialects()[0]), m, 10*time.Second, s)
	e.handle(t, "notify someone", "c1")
	res := toolResults(m.request(2))["a"]
	assert.Contains(t, res, `unknown tool \"notify_webhook\"`)
	assert.NotContains(t, res, "notify_webhook,")
	assert.Empty(t, r.Effects())
	assert.Empty(t, notifyRows(t, e))
}

// The run dies (abandoned: no release, no more writes) while the receiver
// holds the request after performing the effect. The next run, after the
// TTL, finds the notification announced without a result and sends it
// again with the same key: one effect, and the reply has its receipt.
func TestCrashAfterTheEffectSendsTheSameKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		const ttl = 500 * time.Millisecond
		var crashing atomic.Pointer[request.Run]
		var crashed atomic.Bool
		r, s := receiver(t, webhook.ReceiverConfig{Hook: func(stage webhook.Stage, key string) error {
			if stage == webhook.Performed && !crashed.Swap(true) {
				rowleasetest.Crash(crashing.Load())
			}
			return nil
		}})
		e := newEnvWith(t, db, llm.NewRuleModel(llm.RuleOptions{Now: fixedNow}), ttl, s)
		msg := request.Message{SessionKey: e.sid, ClientRequestID: "c1", Content: "电影票 80"}
		_, err := e.runner.Handle(context.Background(), msg, func(ctx context.Context, run *request.Run) (request.Answer, error) {
			crashing.Store(run)
			return e.ag.Handle(ctx, run)
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Len(t, r.Effects(), 1)
		assert.Equal(t, map[string]int{schema.StoredStarted: 1}, notifyRows(t, e))

		var out request.Outcome
		deadline := time.Now().Add(20 * time.Second)
		for {
			out, err = e.runner.Handle(context.Background(), msg, e.ag.Handle)
			if !errors.Is(err, request.ErrInFlight) && !errors.As(err, new(*session.BusyError)) && !errors.As(err, new(*toolexec.BusyError)) {
				break
			}
			require.True(t, time.Now().Before(deadline), "the dead run's leases never expired")
			time.Sleep(50 * time.Millisecond)
		}
		require.NoError(t, err)
		assert.True(t, out.Resumed)
		assert.Equal(t, "已记账：支出 80.00 元（娱乐）\n已推送通知（回执 r-000001）。", out.Reply)
		assert.Len(t, r.Effects(), 1)
		assert.Equal(t, 1, r.Stats().Replays)
		assert.Equal(t, map[string]int{schema.StoredSucceeded: 1}, notifyRows(t, e))
		assert.Equal(t, 1, e.count(t))
	})
}

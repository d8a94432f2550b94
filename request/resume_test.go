package request

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// durableAgent asks its "model" (a step that answers differently every
// time it is asked) which amount to write, writes it with the "write"
// tool, and replies. crash, when it returns true for a run, makes the run
// die after the tool committed and before the reply.
type durableAgent struct {
	modelCalls atomic.Int64
	mu         sync.Mutex
	order      map[string][]string // session → client request ids, in the order their runs started
	inflight   atomic.Int64
	maxSeen    atomic.Int64
	hold       time.Duration // how long a run holds its session after the tool call
	crash      func(run *Run) bool
}

func newDurableAgent() *durableAgent { return &durableAgent{order: map[string][]string{}} }

func (a *durableAgent) run(ctx context.Context, run *Run) (Answer, error) {
	n := a.inflight.Add(1)
	defer a.inflight.Add(-1)
	for m := a.maxSeen.Load(); n > m && !a.maxSeen.CompareAndSwap(m, n); m = a.maxSeen.Load() {
	}
	a.mu.Lock()
	a.order[run.SessionKey()] = append(a.order[run.SessionKey()], run.ClientRequestID())
	a.mu.Unlock()
	type call struct {
		Amount int    `json:"amount"`
		Note   string `json:"note"`
	}
	c, err := Step(ctx, run, "model", func(context.Context) (call, error) {
		k := a.modelCalls.Add(1)
		// A real model words its answer differently every time: without
		// the recorded step, a resumed run would make another call.
		return call{Amount: int(k), Note: fmt.Sprintf("asked %d", k)}, nil
	})
	if err != nil {
		return Answer{}, err
	}
	if _, err := run.CallTool(ctx, "write", json.RawMessage(fmt.Sprintf(`{"amount":%d}`, c.Amount))); err != nil {
		return Answer{}, err
	}
	if a.hold > 0 {
		t := time.NewTimer(a.hold)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Answer{}, context.Cause(ctx)
		}
	}
	if a.crash != nil && a.crash(run) {
		run.abandon() // the process dies after the tool committed, before the reply
		return Answer{}, errors.New("crashed")
	}
	return Answer{Reply: fmt.Sprintf("wrote %d", c.Amount)}, nil
}

func (a *durableAgent) orderOf(session string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.order[session]...)
}

// TestResumeOrphanedRejectRun: a message accepted at once (Reject) whose
// run dies after its tool committed, and whose client never comes back,
// is resumed by a started Runner that nobody sends to: its step is
// replayed (the model is not asked again), its tool call is the same
// call, and Status and Wait show the outcome.
func TestResumeOrphanedRejectRun(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 600*time.Millisecond)
		ctx := bg(t)
		ag := newDurableAgent()
		ag.crash = func(run *Run) bool { return !run.Resumed() }
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "lunch 35"}, ag.run)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, int64(1), ag.modelCalls.Load())
		var content string
		require.NoError(t, db.Get(&content, db.Rebind("SELECT content FROM rowlease_request WHERE client_request_id = ?"), "c"))
		assert.Equal(t, "lunch 35", content, "stored with the request (by the INSERT: TestLockPathStatements still counts 9)")

		b := e.newRunner(t, func(c *Config) {
			c.Agent = ag.run
			c.Queue.DispatchInterval = 20 * time.Millisecond
			c.Resume.Grace = 100 * time.Millisecond
		})
		require.NoError(t, b.Start(ctx))
		st, err := b.Wait(ctx, "s", "c")
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State, st.Error)
		assert.Equal(t, "wrote 1", st.Reply)
		assert.Equal(t, int64(2), st.Attempt)
		assert.Equal(t, int64(1), ag.modelCalls.Load(), "the model was not asked again")
		assert.Equal(t, 1, e.ledgerRows(t), "the same call: written once")
		out, err := st.Outcome()
		require.NoError(t, err)
		assert.Equal(t, "wrote 1", out.Reply)
	})
}

// TestResumeGivesUpAfterMaxAttempts: a request whose runs keep dying is
// resumed with a back-off until it has run MaxAttempts times, then marked
// error with the cause; a client's resend still retries it.
func TestResumeGivesUpAfterMaxAttempts(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 400*time.Millisecond)
		ctx := bg(t)
		ag := newDurableAgent()
		var runs atomic.Int64
		ag.crash = func(*Run) bool { runs.Add(1); return true }
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, ag.run)
		require.ErrorIs(t, err, context.Canceled)

		b := e.newRunner(t, func(c *Config) {
			c.Agent = ag.run
			c.Queue.DispatchInterval = 20 * time.Millisecond
			c.Resume = ResumeConfig{Grace: 50 * time.Millisecond, Backoff: 100 * time.Millisecond, MaxAttempts: 3}
		})
		require.NoError(t, b.Start(ctx))
		st, err := b.Wait(ctx, "s", "c")
		require.NoError(t, err)
		require.Equal(t, StateFailed, st.State)
		assert.Contains(t, st.Error, "died 3 times")
		assert.Equal(t, int64(3), st.Attempt)
		assert.Equal(t, int64(3), runs.Load(), "the first run and two resumed ones")
		assert.Equal(t, int64(1), ag.modelCalls.Load(), "every resumed run replayed the step")
		assert.Equal(t, 1, e.ledgerRows(t))
		_, err = st.Outcome()
		require.ErrorIs(t, err, ErrAgentFailed)

		// The client's resend retries it.
		ag.crash = nil
		out, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, ag.run)
		require.NoError(t, err)
		assert.Equal(t, "wrote 1", out.Reply)
		assert.Equal(t, 1, e.ledgerRows(t))
	})
}

// TestResumeDisabled: with Resume.Disabled the service does not resume a
// run accepted at once, and it does not hold up the queue behind it; its
// client's resend does.
func TestResumeDisabled(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 500*time.Millisecond)
		ctx := bg(t)
		ag := newDurableAgent()
		ag.crash = func(run *Run) bool { return run.ClientRequestID() == "crash" && !run.Resumed() }
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "crash", Content: "x"}, ag.run)
		require.ErrorIs(t, err, context.Canceled)
		b := e.newRunner(t, func(c *Config) {
			c.Agent = ag.run
			c.Queue.DispatchInterval = 20 * time.Millisecond
			c.Resume = ResumeConfig{Disabled: true, Grace: time.Millisecond}
		})
		out, err := b.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "q", Content: "q", OnBusy: Queue}, nil)
		require.NoError(t, err)
		require.True(t, out.Queued)
		require.NoError(t, b.Start(ctx))
		st, err := b.Wait(ctx, "s", "q")
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State)
		st, err = b.Status(ctx, "s", "crash")
		require.NoError(t, err)
		assert.Equal(t, StateProcessing, st.State, "not resumed by the service")
		out, err = b.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "crash", Content: "x"}, nil)
		require.NoError(t, err)
		assert.True(t, out.Resumed)
		assert.Equal(t, []string{"crash", "q", "crash"}, ag.orderOf("s"))
		assert.Equal(t, 2, e.ledgerRows(t))
	})
}

// TestResumeBoundedConcurrency: a Runner resumes at most
// Resume.MaxConcurrent dead runs at once; all of them finish.
func TestResumeBoundedConcurrency(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 600*time.Millisecond)
		ctx := bg(t)
		ag := newDurableAgent()
		ag.crash = func(run *Run) bool { return !run.Resumed() }
		const n = 6
		for i := range n {
			_, err := e.r.Handle(ctx, Message{SessionKey: fmt.Sprintf("s%d", i), ClientRequestID: "c", Content: "x"}, ag.run)
			require.ErrorIs(t, err, context.Canceled)
		}
		ag.maxSeen.Store(0)
		ag.hold = 50 * time.Millisecond // a resumed run holds on, so that several would overlap
		b := e.newRunner(t, func(c *Config) {
			c.Agent = ag.run
			c.Queue.DispatchInterval = 10 * time.Millisecond
			c.Queue.DispatchBatch = 50
			c.Resume = ResumeConfig{Grace: 10 * time.Millisecond, MaxConcurrent: 2}
		})
		require.NoError(t, b.Start(ctx))
		for i := range n {
			st, err := b.Wait(ctx, fmt.Sprintf("s%d", i), "c")
			require.NoError(t, err)
			require.Equal(t, StateSucceeded, st.State, st.Error)
		}
		assert.LessOrEqual(t, ag.maxSeen.Load(), int64(2))
		assert.Equal(t, int64(n), ag.modelCalls.Load())
		assert.Equal(t, n, e.ledgerRows(t))
	})
}

// TestNoOrphans: 20 sessions, each with one message running (Reject,
// accepted at once) and 9 queued behind it; every worker dies, the
// running ones after their tool committed and before their reply. One
// fresh Runner that nobody sends to finishes all 200: in each session the
// orphaned running one first and then the queue in arrival order, each
// effect once, the model asked once per message.
func TestNoOrphans(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		const sessions, queued = 20, 9
		// Seconds to spare: on SQLite twenty runs' renewals wait for one
		// write lock, and a run that lost its lease has its message run
		// again (at least once: the effect is still once, and the model
		// is asked again only if the step was not recorded yet).
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		ag := newDurableAgent()
		ag.crash = func(run *Run) bool { return strings.HasSuffix(run.ClientRequestID(), "-running") && !run.Resumed() }
		// The workers: they never resume a dead run themselves (a long
		// grace), and all die.
		a := e.newRunner(t, func(c *Config) { c.Agent = ag.run; c.Resume.Grace = time.Hour })
		want := map[string][]string{}
		for s := range sessions {
			key := fmt.Sprintf("s%02d", s)
			id := key + "-running"
			_, err := a.Handle(ctx, Message{SessionKey: key, ClientRequestID: id, Content: id}, nil)
			require.ErrorIs(t, err, context.Canceled)
			want[key] = []string{id}
		}
		for i := range queued {
			for s := range sessions {
				key := fmt.Sprintf("s%02d", s)
				id := fmt.Sprintf("%s-q%d", key, i)
				out, err := a.Handle(ctx, Message{SessionKey: key, ClientRequestID: id, Content: id, OnBusy: Queue}, nil)
				require.NoError(t, err)
				require.True(t, out.Queued, id)
				want[key] = append(want[key], id)
			}
		}
		require.NoError(t, a.Close(ctx))
		require.Equal(t, int64(sessions), ag.modelCalls.Load())
		require.Equal(t, sessions, e.ledgerRows(t))

		b := e.newRunner(t, func(c *Config) {
			c.Agent = ag.run
			c.Queue.DispatchInterval = 20 * time.Millisecond
			c.Queue.DispatchBatch = 2 * sessions
			c.Resume.Grace = 100 * time.Millisecond
		})
		require.NoError(t, b.Start(ctx))
		reruns := 0
		for s := range sessions {
			key := fmt.Sprintf("s%02d", s)
			for _, id := range want[key] {
				st, err := b.Wait(ctx, key, id)
				require.NoError(t, err)
				require.Equal(t, StateSucceeded, st.State, "%s: %s", id, st.Error)
			}
			got := ag.orderOf(key)
			require.NotEmpty(t, got)
			assert.Equal(t, want[key][0], got[0], "%s: the worker's run", key)
			// A run that lost its lease (a loaded machine starving its
			// heartbeat) is taken over: the same message runs again at
			// once, before the next one. Count those, and check the order
			// of the messages.
			var runs []string
			for _, id := range got[1:] {
				if len(runs) > 0 && runs[len(runs)-1] == id {
					reruns++
					continue
				}
				runs = append(runs, id)
			}
			assert.Equal(t, want[key], runs, "%s: the orphan resumed first, then the queue in arrival order", key)
		}
		if reruns > 0 {
			t.Logf("%d runs lost their lease and were taken over", reruns)
		}
		total := sessions * (1 + queued)
		assert.Equal(t, total, e.ledgerRows(t), "each effect once")
		var distinct int
		require.NoError(t, db.Get(&distinct, "SELECT COUNT(DISTINCT request_id) FROM ledger_entry"))
		assert.Equal(t, total, distinct)
		// The model is asked once per message (plus once per run that lost
		// its lease before its step was recorded).
		assert.GreaterOrEqual(t, ag.modelCalls.Load(), int64(total))
		assert.LessOrEqual(t, ag.modelCalls.Load(), int64(total+reruns), "the model asked once per message")
	})
}

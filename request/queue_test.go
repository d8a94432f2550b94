package request

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// newRunner is another Runner (another process, as far as the database
// can tell) on e's database and tools, with cfg changed by mod. It is
// stopped when the test ends.
func (e *env) newRunner(t *testing.T, mod func(*Config)) *Runner {
	t.Helper()
	ttl := e.r.cfg.TTL
	cfg := Config{DB: e.db, TTL: ttl, HeartbeatInterval: ttl / 4, Tools: e.tools, ReleaseTimeout: 10 * time.Second,
		Session: sessionConfigAutoCreate(), Queue: QueueConfig{PollMin: 5 * time.Millisecond, PollMax: 50 * time.Millisecond}}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, r.Close(ctx))
	})
	return r
}

// recorder is an agent that records the order in which messages run and
// how many run at once.
type recorder struct {
	mu       sync.Mutex
	order    []string
	inflight atomic.Int64
	maxSeen  atomic.Int64
	runs     sync.Map // client request id → *atomic.Int64
}

func (rc *recorder) enter(run *Run) func() {
	n := rc.inflight.Add(1)
	for {
		m := rc.maxSeen.Load()
		if n <= m || rc.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	rc.mu.Lock()
	rc.order = append(rc.order, run.ClientRequestID())
	rc.mu.Unlock()
	c, _ := rc.runs.LoadOrStore(run.ClientRequestID(), new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	return func() { rc.inflight.Add(-1) }
}

func (rc *recorder) agent(ctx context.Context, run *Run) (Answer, error) {
	defer rc.enter(run)()
	return Answer{Reply: "ok " + run.Content()}, nil
}

func (rc *recorder) runsOf(id string) int64 {
	c, ok := rc.runs.Load(id)
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

func (rc *recorder) ordered() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.order...)
}

// blocker is an agent that holds its session until released.
type blocker struct {
	rc      *recorder
	started chan struct{}
	release chan struct{}
}

func newBlocker(rc *recorder) *blocker {
	return &blocker{rc: rc, started: make(chan struct{}), release: make(chan struct{})}
}

func (b *blocker) agent(ctx context.Context, run *Run) (Answer, error) {
	defer b.rc.enter(run)()
	close(b.started)
	select {
	case <-b.release:
	case <-ctx.Done():
		return Answer{}, context.Cause(ctx)
	}
	return Answer{Reply: "ok " + run.Content()}, nil
}

// rowsOf reads everything stored of one request: its row, its tool
// executions and its ledger entries.
func rowsOf(t *testing.T, e *env, sessionKey, client string) []string {
	t.Helper()
	var out []string
	var id string
	require.NoError(t, e.db.Get(&id, e.d.Rebind("SELECT id FROM rowlease_request WHERE session_key = ? AND client_request_id = ?"), sessionKey, client))
	for _, q := range []string{
		"SELECT status, COALESCE(holder, ''), COALESCE(token, ''), generation, COALESCE(reply, ''), COALESCE(interrupted_by, '') FROM rowlease_request WHERE id = ?",
		"SELECT tool_name, status, COALESCE(token, ''), generation, COALESCE(result, ''), COALESCE(holder, '') FROM rowlease_tool_execution WHERE request_id = ? ORDER BY id",
		"SELECT amount, '', '', 0, '', '' FROM ledger_entry WHERE request_id = ? ORDER BY amount",
	} {
		rows, err := e.db.Queryx(e.d.Rebind(q), id)
		require.NoError(t, err)
		for rows.Next() {
			var a, b, c, d, f string
			var g int64
			require.NoError(t, rows.Scan(&a, &b, &c, &g, &d, &f))
			out = append(out, fmt.Sprintf("%s|%s|%s|%d|%s|%s", a, b, c, g, d, f))
		}
		require.NoError(t, rows.Err())
		_ = rows.Close()
	}
	return out
}

func requestRows(t *testing.T, e *env) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.Get(&n, "SELECT COUNT(*) FROM rowlease_request"))
	return n
}

// TestQueuedMessagesRunInOrder: 20 messages queued behind a slow one run
// in arrival order, each once, one at a time, started by the runs that
// free the session; the 21st is refused with ErrQueueFull and writes
// nothing; a resend of a queued message answers its position again.
func TestQueuedMessagesRunInOrder(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		rc := &recorder{}
		r := e.newRunner(t, func(c *Config) { c.Agent = rc.agent })
		slow := newBlocker(rc)
		slowDone := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "slow", Content: "slow"}, slow.agent)
			slowDone <- err
		}()
		<-slow.started

		const n = 20
		var want []string
		for i := range n {
			id := fmt.Sprintf("q-%02d", i)
			want = append(want, id)
			out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: id, Content: id, OnBusy: Queue}, nil)
			require.NoError(t, err)
			require.True(t, out.Queued, id)
			assert.Equal(t, i, out.Position, id)
			assert.Empty(t, out.Reply)
		}
		rows := requestRows(t, e)
		_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "q-full", Content: "x", OnBusy: Queue}, nil)
		require.ErrorIs(t, err, ErrQueueFull)
		var full *QueueFullError
		require.ErrorAs(t, err, &full)
		assert.Equal(t, DefaultQueueMax, full.Max)
		assert.Equal(t, rows, requestRows(t, e), "a refused message writes nothing")
		_, err = r.Status(ctx, "s", "q-full")
		require.ErrorIs(t, err, ErrNotFound)
		require.ErrorIs(t, err, lease.ErrNotFound)

		// A resend of a queued message, whatever its policy, answers its
		// position and adds nothing.
		for _, p := range []Policy{Reject, Queue, Interrupt} {
			out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "q-05", Content: "q-05", OnBusy: p}, nil)
			require.NoError(t, err)
			assert.True(t, out.Queued)
			assert.Equal(t, 5, out.Position)
		}
		st, err := r.Status(ctx, "s", "q-05")
		require.NoError(t, err)
		assert.Equal(t, StateQueued, st.State)
		assert.Equal(t, 5, st.Position)
		assert.Zero(t, st.Attempt)
		assert.Equal(t, rows, requestRows(t, e))

		close(slow.release)
		require.NoError(t, <-slowDone)
		st, err = r.Wait(ctx, "s", want[n-1])
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State)
		assert.Equal(t, "ok "+want[n-1], st.Reply)

		assert.Equal(t, append([]string{"slow"}, want...), rc.ordered(), "arrival order")
		assert.Equal(t, int64(1), rc.maxSeen.Load(), "one run at a time")
		for _, id := range want {
			assert.Equal(t, int64(1), rc.runsOf(id), "%s runs once", id)
			st, err := r.Status(ctx, "s", id)
			require.NoError(t, err)
			assert.Equal(t, StateSucceeded, st.State, id)
			assert.Equal(t, int64(1), st.Attempt, id)
			out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: id, Content: id}, nil)
			require.NoError(t, err)
			assert.True(t, out.Replayed)
			assert.Equal(t, "ok "+id, out.Reply)
		}
		ss, err := r.Sessions().Inspect(ctx, db, "s")
		require.NoError(t, err)
		assert.False(t, ss.Held, "the last run frees the session")
	})
}

// TestQueueDrainsAfterACrash: the process that holds the session crashes
// while messages are queued behind it, and so does every other process;
// a process started afterwards resumes the crashed message (accepted at
// once, its content stored) once its lease has expired and its grace
// passed, and then drains the queue, in order.
func TestQueueDrainsAfterACrash(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 600*time.Millisecond)
		ctx := bg(t)
		rcA := &recorder{}
		a := e.newRunner(t, func(c *Config) { c.Agent = rcA.agent })
		crash := newBlocker(rcA)
		done := make(chan error, 1)
		go func() {
			_, err := a.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "crash", Content: "x"},
				func(ctx context.Context, run *Run) (Answer, error) {
					_, err := crash.agent(ctx, run)
					run.abandon() // the process dies here, holding its leases
					return Answer{}, err
				})
			done <- err
		}()
		<-crash.started
		var want []string
		for i := range 5 {
			id := fmt.Sprintf("q-%d", i)
			want = append(want, id)
			out, err := a.Handle(ctx, Message{SessionKey: "s", ClientRequestID: id, Content: id, OnBusy: Queue}, nil)
			require.NoError(t, err)
			require.True(t, out.Queued)
		}
		close(crash.release)
		require.ErrorIs(t, <-done, context.Canceled)
		require.NoError(t, a.Close(ctx)) // every process is gone

		// A new process, with its dispatcher.
		rcB := &recorder{}
		b := e.newRunner(t, func(c *Config) {
			c.Agent = rcB.agent
			c.Queue.DispatchInterval = 20 * time.Millisecond
		})
		require.NoError(t, b.Start(ctx))
		st, err := b.Wait(ctx, "s", want[len(want)-1])
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State)
		assert.Equal(t, append([]string{"crash"}, want...), rcB.ordered(), "the crashed one first, then arrival order, all in the new process")
		assert.Equal(t, int64(1), rcB.maxSeen.Load())
		assert.Equal(t, []string{"crash"}, rcA.ordered(), "nothing ran in the crashed process")
		for _, id := range want {
			st, err := b.Status(ctx, "s", id)
			require.NoError(t, err)
			assert.Equal(t, StateSucceeded, st.State, id)
			assert.Equal(t, "ok "+id, st.Reply)
		}
		// The crashed message itself was resumed by the service.
		st, err = b.Status(ctx, "s", "crash")
		require.NoError(t, err)
		assert.Equal(t, StateSucceeded, st.State)
		assert.Equal(t, "ok x", st.Reply)
		assert.Equal(t, int64(2), st.Attempt)
	})
}

// TestQueuedRunThatDiesIsResumed: a message started from the queue whose
// run dies is resumed by a dispatcher, its committed tool call reused,
// before the messages queued after it.
func TestQueuedRunThatDiesIsResumed(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 600*time.Millisecond)
		ctx := bg(t)
		rc := &recorder{}
		var died atomic.Bool
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			defer rc.enter(run)()
			res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":7}`))
			if err != nil {
				return Answer{}, err
			}
			if run.ClientRequestID() == "q-0" && died.CompareAndSwap(false, true) {
				run.abandon()
				return Answer{}, errors.New("died")
			}
			return Answer{Reply: fmt.Sprintf("ok reused=%v", res.Reused)}, nil
		}
		a := e.newRunner(t, func(c *Config) { c.Agent = agent })
		first := newBlocker(&recorder{})
		done := make(chan error, 1)
		go func() {
			_, err := a.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "first", Content: "x"}, first.agent)
			done <- err
		}()
		<-first.started
		for _, id := range []string{"q-0", "q-1"} {
			out, err := a.Handle(ctx, Message{SessionKey: "s", ClientRequestID: id, Content: id, OnBusy: Queue}, nil)
			require.NoError(t, err)
			require.True(t, out.Queued)
		}
		close(first.release)
		require.NoError(t, <-done)
		waitFor(t, func() bool { return rc.runsOf("q-0") == 1 && died.Load() })
		require.NoError(t, a.Close(ctx))

		b := e.newRunner(t, func(c *Config) {
			c.Agent = agent
			c.Queue.DispatchInterval = 20 * time.Millisecond
		})
		require.NoError(t, b.Start(ctx))
		st, err := b.Wait(ctx, "s", "q-1")
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State)
		st, err = b.Status(ctx, "s", "q-0")
		require.NoError(t, err)
		assert.Equal(t, StateSucceeded, st.State)
		assert.Equal(t, "ok reused=true", st.Reply, "the resumed run reuses the committed tool call")
		assert.Equal(t, int64(2), st.Attempt)
		assert.Equal(t, []string{"q-0", "q-0", "q-1"}, rc.ordered())
		assert.Equal(t, 2, e.ledgerRows(t), "one write for q-0, one for q-1")
	})
}

// TestInterruptDuringASideEffect: a message with the Interrupt policy
// stops the running one while its tool is inside its side effect. The
// effect commits once (SQLite: the interrupter's write waits for the
// effect's transaction) or not at all (MySQL, PostgreSQL: the cancelled
// context rolls it back); the interrupted run writes nothing after it was
// cancelled, even with a context of its own; it ends interrupted, keeps
// what committed, and never runs again; then the new message runs.
func TestInterruptDuringASideEffect(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second)
		ctx := bg(t)
		entered, proceed := make(chan struct{}), make(chan struct{})
		var effectSawCancel atomic.Bool
		require.NoError(t, e.tools.Register("slow_write", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
			if _, err := x.Tx.ExecContext(ctx, e.d.Rebind("INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)"),
				x.Call.RequestID, "1"); err != nil {
				return nil, err
			}
			close(entered)
			select {
			case <-ctx.Done():
				effectSawCancel.Store(true)
				return nil, context.Cause(ctx)
			case <-proceed:
			}
			return json.RawMessage(`{"ok":true}`), nil
		}))
		rc := &recorder{}
		r := e.newRunner(t, func(c *Config) { c.Agent = rc.agent })
		var lateWrite error
		victimRuns := atomic.Int64{}
		victim := func(ctx context.Context, run *Run) (Answer, error) {
			victimRuns.Add(1)
			if _, err := run.CallTool(ctx, "slow_write", json.RawMessage(`{}`)); err != nil {
				// The cancellation reached the side effect.
				_, lateWrite = run.CallTool(context.WithoutCancel(ctx), "write", json.RawMessage(`{"amount":2}`))
				return Answer{}, err
			}
			<-ctx.Done() // a model round, cut short
			_, lateWrite = run.CallTool(context.WithoutCancel(ctx), "write", json.RawMessage(`{"amount":2}`))
			return Answer{}, context.Cause(ctx)
		}
		victimDone := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "victim", Content: "v"}, victim)
			victimDone <- err
		}()
		<-entered
		type result struct {
			out Outcome
			err error
		}
		intDone := make(chan result, 1)
		go func() {
			out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "new", Content: "stop, do this", OnBusy: Interrupt}, nil)
			intDone <- result{out, err}
		}()
		if e.d == lease.SQLite {
			// One writer at a time: the interrupter's write waits for the
			// effect's transaction, which commits.
			close(proceed)
		}
		verr := <-victimDone
		var ie *InterruptedError
		require.ErrorAs(t, verr, &ie)
		assert.Equal(t, "new", ie.By)
		require.ErrorIs(t, lateWrite, ErrInterrupted, "a write after the cancellation is refused")
		victimRows := func() []string { return rowsOf(t, e, "s", "victim") }
		after := victimRows()

		res := <-intDone
		require.NoError(t, res.err)
		assert.Equal(t, "ok stop, do this", res.out.Reply)
		assert.Equal(t, int64(1), rc.runsOf("new"))

		var ledger, writes2, toolOK int
		require.NoError(t, db.Get(&ledger, "SELECT COUNT(*) FROM ledger_entry WHERE amount = '1'"))
		require.NoError(t, db.Get(&writes2, "SELECT COUNT(*) FROM ledger_entry WHERE amount = '2'"))
		require.NoError(t, db.Get(&toolOK, "SELECT COUNT(*) FROM rowlease_tool_execution WHERE tool_name = 'slow_write' AND status = 'success'"))
		assert.Zero(t, writes2, "the interrupted run wrote nothing after it was cancelled")
		assert.Equal(t, ledger, toolOK, "the effect and its success mark commit together")
		if e.d == lease.SQLite {
			assert.Equal(t, 1, ledger, "committed once, before the interrupt")
		} else {
			assert.True(t, effectSawCancel.Load())
			assert.Equal(t, 0, ledger, "rolled back by the cancellation")
		}

		st, err := r.Status(ctx, "s", "victim")
		require.NoError(t, err)
		assert.Equal(t, StateInterrupted, st.State)
		assert.Equal(t, "new", st.InterruptedBy)
		assert.False(t, st.Live)
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "victim", Content: "v"}, victim)
		require.ErrorIs(t, err, ErrInterrupted, "a resend answers interrupted")
		assert.Equal(t, int64(1), victimRuns.Load(), "and never runs it again")
		assert.Equal(t, after, victimRows(), "nothing of the interrupted run changed afterwards")
	})
}

// TestInterruptDeadRun: the running message's process died; the
// interrupting message waits for its lease to expire, marks it
// interrupted, and runs.
func TestInterruptDeadRun(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second) // the interrupter must arrive within the TTL, also on a loaded machine
		ctx := bg(t)
		rc := &recorder{}
		r := e.newRunner(t, func(c *Config) { c.Agent = rc.agent })
		_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "dead", Content: "x"},
			func(ctx context.Context, run *Run) (Answer, error) {
				run.abandon()
				return Answer{}, errors.New("crashed")
			})
		require.ErrorIs(t, err, context.Canceled)
		out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "new", Content: "n", OnBusy: Interrupt}, nil)
		require.NoError(t, err)
		assert.Equal(t, "ok n", out.Reply)
		st, err := r.Status(ctx, "s", "dead")
		require.NoError(t, err)
		assert.Equal(t, StateInterrupted, st.State)
		assert.Equal(t, "new", st.InterruptedBy)
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "dead", Content: "x"}, rc.agent)
		require.ErrorIs(t, err, ErrInterrupted)
		assert.Zero(t, rc.runsOf("dead"))
	})
}

// TestInterruptClaimWaitsForTheDeadRunsRequestLease: a run takes its
// session lease a statement before its request lease, so when it dies the
// session lapses a moment first. A claim of the session in that moment
// must not start the interrupter: the dead request, still held, would not
// be marked interrupted, and no later claim would mark it (it would stay
// processing until resent). The claim waits until the request lease is
// gone too, then marks it and starts the interrupter. The leases are freed
// by hand, one after the other, in place of that moment.
func TestInterruptClaimWaitsForTheDeadRunsRequestLease(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		ctx := bg(t)
		rc := &recorder{}
		r := e.newRunner(t, func(c *Config) { c.Agent = rc.agent })
		_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "dead", Content: "x"},
			func(ctx context.Context, run *Run) (Answer, error) {
				run.abandon()
				return Answer{}, errors.New("crashed")
			})
		require.ErrorIs(t, err, context.Canceled)
		// The interrupter is queued and asks the dead run to stop; its
		// Handle gives up waiting (the message stays queued).
		wctx, cancel := context.WithCancel(ctx)
		waited := make(chan error, 1)
		go func() {
			_, err := r.Handle(wctx, Message{SessionKey: "s", ClientRequestID: "new", Content: "n", OnBusy: Interrupt}, nil)
			waited <- err
		}()
		waitFor(t, func() bool {
			st, err := r.Status(ctx, "s", "new")
			return err == nil && st.State == StateQueued
		})
		cancel()
		require.ErrorIs(t, <-waited, context.Canceled)

		// The session lease lapses; the request lease is still live.
		_, err = db.ExecContext(ctx, "UPDATE "+schema.SessionTable+" SET token = NULL, holder = NULL, expires_at = NULL WHERE session_key = 's'")
		require.NoError(t, err)
		run, err := r.claimHead(ctx, "s")
		require.NoError(t, err)
		if run != nil {
			r.releaseAll(ctx, run)
		}
		require.False(t, run != nil, "the interrupter was claimed while the dead run's request lease was live")
		st, err := r.Status(ctx, "s", "dead")
		require.NoError(t, err)
		assert.Equal(t, StateProcessing, st.State)
		assert.Equal(t, "new", st.InterruptedBy)

		// Then the request lease lapses too: the claim marks the dead
		// request interrupted and starts the interrupter.
		_, err = db.ExecContext(ctx, e.d.Rebind("UPDATE "+schema.RequestTable+" SET token = NULL, holder = NULL, expires_at = NULL WHERE session_key = 's' AND client_request_id = ?"), "dead")
		require.NoError(t, err)
		run, err = r.claimHead(ctx, "s")
		require.NoError(t, err)
		require.NotNil(t, run)
		assert.Equal(t, "new", run.ClientRequestID())
		st, err = r.Status(ctx, "s", "dead")
		require.NoError(t, err)
		assert.Equal(t, StateInterrupted, st.State)
		assert.Equal(t, "new", st.InterruptedBy)
		out, err := r.runAndContinue(ctx, run, rc.agent)
		require.NoError(t, err)
		assert.Equal(t, "ok n", out.Reply)
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "dead", Content: "x"}, rc.agent)
		require.ErrorIs(t, err, ErrInterrupted)
		assert.Zero(t, rc.runsOf("dead"))
	})
}

// TestTwoInterrupters: both ask the running message to stop; it stops
// once, and they run after it in their order of arrival, neither
// interrupting the other.
func TestTwoInterrupters(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second)
		ctx := bg(t)
		rc := &recorder{}
		r := e.newRunner(t, func(c *Config) { c.Agent = rc.agent })
		// The running message ignores its context until released, so that
		// both interrupters are queued while it runs.
		started, release := make(chan struct{}), make(chan struct{})
		victimDone := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "victim", Content: "v"},
				func(ctx context.Context, run *Run) (Answer, error) {
					close(started)
					<-release
					<-ctx.Done()
					return Answer{}, context.Cause(ctx)
				})
			victimDone <- err
		}()
		<-started
		errs := make(chan error, 2)
		for _, id := range []string{"i-1", "i-2"} {
			go func() {
				_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: id, Content: id, OnBusy: Interrupt}, nil)
				errs <- err
			}()
			waitFor(t, func() bool {
				st, err := r.Status(ctx, "s", id)
				return err == nil && st.State == StateQueued
			})
		}
		close(release)
		require.ErrorIs(t, <-victimDone, ErrInterrupted)
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		assert.Equal(t, []string{"i-1", "i-2"}, rc.ordered())
		st, err := r.Status(ctx, "s", "victim")
		require.NoError(t, err)
		assert.Equal(t, "i-1", st.InterruptedBy, "the first interrupter's flag stays")
	})
}

// TestInterruptLosesToAFinishedAnswer: an interrupt that arrives as the
// running message returns its answer changes nothing of it: the answer is
// stored, and the interrupting message runs next.
func TestInterruptLosesToAFinishedAnswer(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second)
		ctx := bg(t)
		rc := &recorder{}
		r := e.newRunner(t, func(c *Config) { c.Agent = rc.agent })
		started, release := make(chan struct{}), make(chan struct{})
		victimDone := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "victim", Content: "v"},
				func(ctx context.Context, run *Run) (Answer, error) {
					close(started)
					<-release
					return Answer{Reply: "done anyway"}, nil // it ignores its context
				})
			victimDone <- err
		}()
		<-started
		intDone := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "new", Content: "n", OnBusy: Interrupt}, nil)
			intDone <- err
		}()
		waitFor(t, func() bool {
			st, err := r.Status(ctx, "s", "new")
			return err == nil && st.State == StateQueued
		})
		close(release)
		require.NoError(t, <-victimDone)
		require.NoError(t, <-intDone)
		st, err := r.Status(ctx, "s", "victim")
		require.NoError(t, err)
		assert.Equal(t, StateSucceeded, st.State)
		assert.Equal(t, "done anyway", st.Reply)
	})
}

// TestTwoWaitersInTwoProcesses: a duplicate of a message in flight, and a
// waiter in each of two processes, all get the same stored reply.
func TestTwoWaitersInTwoProcesses(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		a := e.newRunner(t, nil)
		b := e.newRunner(t, nil)
		owner := newBlocker(&recorder{})
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "pay 35"}
		ownerDone := make(chan Outcome, 1)
		go func() {
			out, err := a.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
				if _, err := owner.agent(ctx, run); err != nil {
					return Answer{}, err
				}
				res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":35}`))
				if err != nil {
					return Answer{}, err
				}
				return Answer{Reply: "paid", Result: res.Output}, nil
			})
			assert.NoError(t, err)
			ownerDone <- out
		}()
		<-owner.started
		_, err := b.Handle(ctx, msg, owner.agent)
		require.ErrorIs(t, err, ErrInFlight, "a duplicate in another process")

		got := make(chan Status, 2)
		for _, w := range []*Runner{a, b} {
			go func() {
				st, err := w.Wait(ctx, "s", "c")
				assert.NoError(t, err)
				got <- st
			}()
		}
		// A waiter with a deadline that passes first reports the state.
		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		st, err := b.Wait(short, "s", "c")
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, StateProcessing, st.State)
		assert.True(t, st.Live)

		close(owner.release)
		out := <-ownerDone
		s1, s2 := <-got, <-got
		for _, s := range []Status{s1, s2} {
			assert.Equal(t, StateSucceeded, s.State)
			assert.Equal(t, "paid", s.Reply)
			assert.JSONEq(t, string(out.Result), string(s.Result))
			assert.Equal(t, out.RequestID, s.RequestID)
			o, err := s.Outcome()
			require.NoError(t, err)
			assert.True(t, o.Replayed)
		}
		assert.Equal(t, 1, e.ledgerRows(t))
		_, err = a.Wait(ctx, "s", "unknown")
		require.ErrorIs(t, err, ErrNotFound)
	})
}

// TestSweeperWhileRequestsArrive: the sweeper runs, in small batches,
// while messages arrive, are resent, and queue up behind a long one. It
// turns finished requests into tombstones and deletes their tool calls;
// it never touches a queued or processing request; a resend of a swept id
// gets ErrExpired and never runs again.
func TestSweeperWhileRequestsArrive(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		rc := &recorder{}
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			defer rc.enter(run)()
			if _, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":1}`)); err != nil {
				return Answer{}, err
			}
			return Answer{Reply: "ok"}, nil
		}
		r := e.newRunner(t, func(c *Config) {
			c.Agent = agent
			c.Retention.Batch = 3
		})
		// A long message with two queued behind it, in their own session.
		long := newBlocker(&recorder{})
		longDone := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "held", ClientRequestID: "long", Content: "l"}, long.agent)
			longDone <- err
		}()
		<-long.started
		for _, id := range []string{"w-1", "w-2"} {
			out, err := r.Handle(ctx, Message{SessionKey: "held", ClientRequestID: id, Content: id, OnBusy: Queue}, nil)
			require.NoError(t, err)
			require.True(t, out.Queued)
		}

		stop := make(chan struct{})
		var swept atomic.Int64
		sweeperDone := make(chan error, 1)
		go func() {
			for {
				n, err := r.Sweep(ctx, 0)
				swept.Add(int64(n))
				if err != nil {
					sweeperDone <- err
					return
				}
				select {
				case <-stop:
					sweeperDone <- nil
					return
				default:
				}
			}
		}()
		const sessions, perSession = 3, 8
		var wg sync.WaitGroup
		for s := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perSession {
					msg := Message{SessionKey: fmt.Sprintf("s%d", s), ClientRequestID: fmt.Sprintf("c%d", i), Content: "x"}
					out, err := r.Handle(ctx, msg, nil)
					if !assert.NoError(t, err) {
						return
					}
					assert.Equal(t, "ok", out.Reply)
					// A resend: the stored reply, or expired if the sweeper
					// came first; never a second run.
					out, err = r.Handle(ctx, msg, nil)
					if err != nil {
						assert.ErrorIs(t, err, ErrExpired)
					} else {
						assert.True(t, out.Replayed)
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		require.NoError(t, <-sweeperDone)
		_, err := r.Sweep(ctx, 0)
		require.NoError(t, err)

		for s := range sessions {
			for i := range perSession {
				key, id := fmt.Sprintf("s%d", s), fmt.Sprintf("c%d", i)
				_, err := r.Handle(ctx, Message{SessionKey: key, ClientRequestID: id, Content: "x"}, nil)
				require.ErrorIs(t, err, ErrExpired, "%s/%s", key, id)
				st, err := r.Status(ctx, key, id)
				require.NoError(t, err)
				assert.Equal(t, StateExpired, st.State)
				assert.Empty(t, st.Reply)
			}
		}
		assert.Equal(t, int64(sessions*perSession), int64(len(rc.ordered())), "each message ran once")
		// The long one and its queue were never touched.
		for id, want := range map[string]State{"long": StateProcessing, "w-1": StateQueued, "w-2": StateQueued} {
			st, err := r.Status(ctx, "held", id)
			require.NoError(t, err)
			assert.Equal(t, want, st.State, id)
		}
		var tools int
		require.NoError(t, db.Get(&tools, "SELECT COUNT(*) FROM rowlease_tool_execution"))
		assert.Zero(t, tools, "the tool calls of swept requests are deleted")
		var tombstones int
		require.NoError(t, db.Get(&tombstones, "SELECT COUNT(*) FROM rowlease_request WHERE status = 'expired'"))
		assert.Equal(t, sessions*perSession, tombstones)

		close(long.release)
		require.NoError(t, <-longDone)
		st, err := r.Wait(ctx, "held", "w-2")
		require.NoError(t, err)
		assert.Equal(t, StateSucceeded, st.State)
		// A fingerprint that differs is still told apart from expiry.
		_, err = r.Handle(ctx, Message{SessionKey: "s0", ClientRequestID: "c0", Content: "other"}, nil)
		require.ErrorIs(t, err, ErrFingerprintMismatch)
	})
}

// TestRetentionKeepsRecentRequests: Sweep only takes requests older than
// the retention, and Start runs it.
func TestRetentionKeepsRecentRequests(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		r := e.newRunner(t, func(c *Config) {
			c.Retention = RetentionConfig{After: time.Hour, Interval: 10 * time.Millisecond}
		})
		_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, answerOK)
		require.NoError(t, err)
		n, err := r.Sweep(ctx, time.Hour)
		require.NoError(t, err)
		assert.Zero(t, n)
		require.NoError(t, r.Start(ctx))
		require.Error(t, r.Start(ctx), "a second Start")
		st, err := r.Status(ctx, "s", "c")
		require.NoError(t, err)
		assert.Equal(t, StateSucceeded, st.State)
		n, err = r.Sweep(ctx, 0)
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		_, err = r.Sweep(ctx, -time.Second)
		require.ErrorIs(t, err, lease.ErrInvalid)
	})
}

// TestPolicyValidation: bad policies and missing agents are refused before
// anything is written.
func TestPolicyValidation(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		for _, msg := range []Message{
			{SessionKey: "s", ClientRequestID: "c", Content: "x", OnBusy: Policy(7)},
			{SessionKey: "s", ClientRequestID: "c", Content: "x", OnBusy: Queue},     // e.r has no Config.Agent
			{SessionKey: "s", ClientRequestID: "c", Content: "x", OnBusy: Interrupt}, // nor here
		} {
			_, err := e.r.Handle(ctx, msg, answerOK)
			var ve *lease.ValidationError
			require.ErrorAs(t, err, &ve, "%v", msg.OnBusy)
		}
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, nil)
		require.ErrorIs(t, err, lease.ErrInvalid, "no agent at all")
		assert.Zero(t, requestRows(t, e))
		_, err = e.r.Status(ctx, "", "c")
		require.ErrorIs(t, err, lease.ErrInvalid)
		for _, s := range []string{"reject", "queue", "interrupt", ""} {
			p, err := ParsePolicy(s)
			require.NoError(t, err)
			if s != "" {
				assert.Equal(t, s, p.String())
			}
		}
		_, err = ParsePolicy("later")
		require.ErrorIs(t, err, lease.ErrInvalid)
		for _, cfg := range []Config{
			{DB: db, Queue: QueueConfig{Max: -1}},
			{DB: db, Queue: QueueConfig{PollMin: time.Second, PollMax: time.Millisecond}},
			{DB: db, Retention: RetentionConfig{After: -time.Hour}},
		} {
			_, err := New(cfg)
			require.ErrorIs(t, err, lease.ErrInvalid)
		}
	})
}

// TestConcurrentQueueing: 30 messages queued at once, from as many
// goroutines, behind a running one, with room for 12: exactly 12 are
// queued, with the positions 0 to 11, the rest get ErrQueueFull and write
// nothing; the 12 then run once each, one at a time, in the order of
// their positions.
func TestConcurrentQueueing(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second) // on SQLite the slow run's renewals wait behind 30 writers
		ctx := bg(t)
		rc := &recorder{}
		r := e.newRunner(t, func(c *Config) {
			c.Agent = rc.agent
			c.Queue.Max = 12
		})
		slow := newBlocker(rc)
		slowDone := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "slow", Content: "slow"}, slow.agent)
			slowDone <- err
		}()
		<-slow.started

		const n = 30
		type res struct {
			id  string
			out Outcome
			err error
		}
		results := make(chan res, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				id := fmt.Sprintf("q-%02d", i)
				out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: id, Content: id, OnBusy: Queue}, nil)
				results <- res{id, out, err}
			})
		}
		close(start)
		wg.Wait()
		close(results)
		byPos := map[int]string{}
		full := 0
		for x := range results {
			switch {
			case x.err == nil:
				require.True(t, x.out.Queued, x.id)
				_, dup := byPos[x.out.Position]
				require.False(t, dup, "position %d given twice", x.out.Position)
				byPos[x.out.Position] = x.id
			case errors.Is(x.err, ErrQueueFull):
				full++
				_, err := r.Status(ctx, "s", x.id)
				require.ErrorIs(t, err, ErrNotFound, "a refused message writes nothing")
			default:
				t.Fatalf("%s: %v", x.id, x.err)
			}
		}
		require.Len(t, byPos, 12, "exactly as many as the queue takes")
		assert.Equal(t, n-12, full)
		var want []string
		for p := range 12 {
			id, ok := byPos[p]
			require.True(t, ok, "position %d", p)
			want = append(want, id)
		}

		close(slow.release)
		require.NoError(t, <-slowDone)
		st, err := r.Wait(ctx, "s", want[11])
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State)
		assert.Equal(t, append([]string{"slow"}, want...), rc.ordered(), "the order of the positions")
		assert.Equal(t, int64(1), rc.maxSeen.Load(), "one run at a time")
	})
}

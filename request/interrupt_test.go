package request

import (
	"context"
	"encoding/json"
	"errors"
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
		require.ErrorAs(t, lateWrite, new(*InterruptedError), "a write after the cancellation is refused")
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
		require.ErrorAs(t, err, new(*InterruptedError), "a resend answers interrupted")
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
		require.ErrorAs(t, err, new(*InterruptedError))
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
		run, _, err := r.claimHead(ctx, "s")
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
		run, _, err = r.claimHead(ctx, "s")
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
		require.ErrorAs(t, err, new(*InterruptedError))
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
		require.ErrorAs(t, <-victimDone, new(*InterruptedError))
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

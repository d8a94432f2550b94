package request

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// TestInterruptReachesTheRunThatTookOver: a run of request R is taken over
// by a second run of R in the same process while the first is still
// finishing (its leases lapsed: here given back by hand). When the first
// run ends, the second must still be registered for interrupts: an
// interrupting message stops it within a heartbeat round, not never.
func TestInterruptReachesTheRunThatTookOver(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 8*time.Second)
		r := e.newRunner(t, func(c *Config) { c.Agent = answerOK })
		ctx := bg(t)
		require.NoError(t, r.Sessions().Create(ctx, db, "s"))
		msg := Message{SessionKey: "s", ClientRequestID: "c1", Content: "x"}

		firstIn, firstGo := make(chan struct{}), make(chan struct{})
		firstDone := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
				// The process stalls: its heartbeat stops and its leases
				// lapse (given back here, so the test need not wait a TTL).
				run.abandon()
				r.releaseAll(ctx, run)
				close(firstIn)
				<-firstGo
				return Answer{}, errors.New("stalled")
			})
			firstDone <- err
		}()
		<-firstIn

		secondIn := make(chan struct{})
		type result struct {
			out Outcome
			err error
		}
		secondDone := make(chan result, 1)
		go func() {
			out, err := r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
				close(secondIn)
				t := time.NewTimer(30 * time.Second)
				defer t.Stop()
				select {
				case <-ctx.Done():
					return Answer{}, context.Cause(ctx)
				case <-t.C:
					return Answer{}, errors.New("never interrupted")
				}
			})
			secondDone <- result{out, err}
		}()
		<-secondIn
		// The first run ends now, after the second registered.
		close(firstGo)
		require.Error(t, <-firstDone)

		out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c2", Content: "stop", OnBusy: Interrupt}, answerOK)
		require.NoError(t, err)
		assert.Equal(t, "ok", out.Reply)
		second := <-secondDone
		assert.True(t, second.out.Resumed, "the second run took the request over")
		require.ErrorAs(t, second.err, new(*InterruptedError), "the run that took over was interrupted")
	})
}

// hookMu serializes the tests that set afterOwnerFound.
var hookMu sync.Mutex

// TestDisownWhileDeliveringStrandsNothing: a Handle that waits to run its
// queued message gives up (disown) just as another goroutine claimed the
// message for it (deliver). The claimed run must not be left in the
// channel of a waiter that has gone, holding its session and request with
// no heartbeat: it is started as any other.
func TestDisownWhileDeliveringStrandsNothing(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		r := e.newRunner(t, func(c *Config) { c.Agent = answerOK })
		ctx := bg(t)
		require.NoError(t, r.Sessions().Create(ctx, db, "s"))
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x", OnBusy: Interrupt}
		require.NoError(t, validate(&msg))
		id := uuid.NewString()
		own := r.own(id)
		_, err := r.enqueue(ctx, msg, id)
		require.NoError(t, err)
		run, _, err := r.claimHead(ctx, "s")
		require.NoError(t, err)
		require.NotNil(t, run)
		require.Equal(t, id, run.id)

		var once sync.Once
		hook := func(run *Run) {
			if run.id == id {
				once.Do(func() { r.disown(id, own) }) // the waiter gives up now
			}
		}
		// Other tests may deliver meanwhile: the hook acts on this run
		// only, and the dialects take turns with it.
		hookMu.Lock()
		afterOwnerFound.Store(&hook)
		r.deliver(run)
		afterOwnerFound.Store(nil)
		hookMu.Unlock()

		require.Len(t, own, 0, "the claimed run is not left with a waiter that has gone")
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		st, err := r.Wait(wctx, "s", "c")
		require.NoError(t, err)
		assert.Equal(t, StateSucceeded, st.State)
	})
}

// TestTakeoverAmbiguousCommitFreesTheLocks: the commit of a takeover (a
// failed request run again) takes effect while the caller sees an error.
// The session and the request must not stay held for a TTL with no
// heartbeat: the next message of the session runs at once, and the
// message sent again resumes its request.
func TestTakeoverAmbiguousCommitFreesTheLocks(t *testing.T) {
	eachCounted(t, 30*time.Second, func(t *testing.T, e *env, c *countdb.Counter) {
		ctx := bg(t)
		require.NoError(t, e.r.Sessions().Create(ctx, e.db, "s"))
		msg := Message{SessionKey: "s", ClientRequestID: "c1", Content: "x"}
		_, err := e.r.Handle(ctx, msg, func(context.Context, *Run) (Answer, error) { return Answer{}, errors.New("model down") })
		require.ErrorIs(t, err, ErrAgentFailed)

		var seen, once atomic.Bool
		c.FailAfter(func(q string) error {
			if isSessionAcquire(q) {
				seen.Store(true)
			}
			if q == countdb.Commit && seen.Load() && once.CompareAndSwap(false, true) {
				return errDropped
			}
			return nil
		})
		_, err = e.r.Handle(ctx, msg, answerOK)
		c.FailAfter(nil)
		require.ErrorIs(t, err, errDropped)
		require.True(t, once.Load(), "the takeover's commit failed")

		st, err := e.r.Sessions().Inspect(ctx, e.db, "s")
		require.NoError(t, err)
		assert.False(t, st.Held, "the session is free at once (holder %q)", st.Holder)
		_, held := e.status(t, "s", "c1")
		assert.False(t, held, "the request is free at once")

		out, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c2", Content: "y"}, answerOK)
		require.NoError(t, err, "the next message of the session is not refused")
		assert.Equal(t, "ok", out.Reply)
		out, err = e.r.Handle(ctx, msg, answerOK)
		require.NoError(t, err)
		assert.True(t, out.Resumed)
		assert.Equal(t, "ok", out.Reply)
	})
}

// isToolMark reports whether q is the statement that marks a tool
// execution done: an UPDATE of the tool table that stores the result.
func isToolMark(q string) bool {
	return strings.Contains(q, "UPDATE ") && strings.Contains(q, schema.ToolExecutionTable) && strings.Contains(q, schema.ColResult)
}

// TestRetriedSideEffectStaysSupervised: the mark of a tool call (after
// the heartbeat let go of the tool lease) or the commit after it ends in a
// transient error, so the side effect's transaction is run again. The
// retry runs under the heartbeat as the first run did: when the tool lease
// is lost during the retry, the side effect's context is cancelled. The
// mark fails on every dialect (an injected SQLITE_BUSY); the commit fails
// on PostgreSQL, where a deferred constraint trigger raises a real
// serialization failure at COMMIT.
func TestRetriedSideEffectStaysSupervised(t *testing.T) {
	t.Run("mark", func(t *testing.T) {
		eachCounted(t, 4*time.Second, func(t *testing.T, e *env, c *countdb.Counter) {
			var injected atomic.Int64
			c.FailAfter(func(q string) error {
				if isToolMark(q) && injected.Add(1) == 1 {
					return busyError{}
				}
				return nil
			})
			defer c.FailAfter(nil)
			retriedSideEffect(t, e, func(context.Context, toolexec.Exec) error { return nil })
			assert.Equal(t, int64(1), injected.Load(), "the mark failed once")
		})
	})
	t.Run("commit", func(t *testing.T) {
		t.Parallel()
		db := testdb.Open(t, lease.Postgres)
		e := newEnv(t, db, 4*time.Second)
		for _, q := range []string{
			"CREATE TABLE commit_fault (n INT)",
			"CREATE FUNCTION commit_fault_raise() RETURNS trigger LANGUAGE plpgsql AS " +
				"$$ BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END $$",
			"CREATE CONSTRAINT TRIGGER commit_fault_t AFTER INSERT ON commit_fault DEFERRABLE INITIALLY DEFERRED " +
				"FOR EACH ROW EXECUTE FUNCTION commit_fault_raise()",
		} {
			_, err := db.Exec(q)
			require.NoError(t, err)
		}
		retriedSideEffect(t, e, func(ctx context.Context, x toolexec.Exec) error {
			_, err := x.Tx.ExecContext(ctx, "INSERT INTO commit_fault (n) VALUES (1)") // fails at COMMIT
			return err
		})
	})
}

// retriedSideEffect runs a tool whose first run does first (and then
// fails where the caller arranged it) and whose second run loses its tool
// lease, and checks that the loss cancelled the second run.
func retriedSideEffect(t *testing.T, e *env, first func(context.Context, toolexec.Exec) error) {
	ctx := bg(t)
	require.NoError(t, e.r.Sessions().Create(ctx, e.db, "s"))
	var current atomic.Pointer[Run]
	var runs atomic.Int64
	var cancelled atomic.Bool
	require.NoError(t, e.tools.Register("slow", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		if runs.Add(1) == 1 {
			return json.RawMessage(`{"ok":true}`), first(ctx, x)
		}
		// The retry: the tool lease is taken from this run.
		if _, err := current.Load().flowDB().ExecContext(ctx, e.d.Rebind("UPDATE "+schema.ToolExecutionTable+
			" SET holder = 'thief', token = ? WHERE id = ?"), uuid.NewString(), x.ExecutionID); err != nil {
			return nil, err
		}
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case <-ctx.Done():
			cancelled.Store(errors.Is(context.Cause(ctx), lease.ErrLost))
			return nil, context.Cause(ctx)
		case <-t.C:
			return nil, errors.New("the lost tool lease went unnoticed")
		}
	}))
	_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, func(ctx context.Context, run *Run) (Answer, error) {
		current.Store(run)
		_, err := run.CallTool(ctx, "slow", json.RawMessage(`{}`))
		return Answer{Reply: "ok"}, err
	})
	assert.Equal(t, int64(2), runs.Load(), "the side effect ran again")
	assert.True(t, cancelled.Load(), "the retry ran under the heartbeat, which cancelled it on the loss")
	require.ErrorIs(t, err, ErrTakenOver)
}

// TestBeginKeepsTheCause: when every attempt to take the locks ends in a
// retryable database error, Handle gives up with ErrInFlight, and the
// last error stays in the chain and in the text.
func TestBeginKeepsTheCause(t *testing.T) {
	eachCounted(t, 30*time.Second, func(t *testing.T, e *env, c *countdb.Counter) {
		ctx := bg(t)
		require.NoError(t, e.r.Sessions().Create(ctx, e.db, "s"))
		c.FailAfter(func(q string) error {
			if isSessionAcquire(q) {
				return busyError{}
			}
			return nil
		})
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, answerOK)
		c.FailAfter(nil)
		require.ErrorIs(t, err, ErrInFlight)
		assert.ErrorAs(t, err, new(busyError), "the database's error is kept")
		assert.True(t, engine.IsRetryable(err))
		// The whole text: the cause, and nothing else (no token).
		assert.Equal(t, "request: request in flight: the database kept refusing the locks: "+busyError{}.Error(), err.Error())
	})
}

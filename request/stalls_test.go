package request

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/countdb"
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
				run.Abandon()
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
		require.ErrorIs(t, second.err, ErrInterrupted, "the run that took over was interrupted")
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
		run, err := r.claimHead(ctx, "s")
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

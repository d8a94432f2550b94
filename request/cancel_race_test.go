package request

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCancelLeavesAnInterruptAsIs: a run that another message asked to
// stop ends interrupted, as documented, even when its own client cancels
// it in the same process before its heartbeat has read the interrupt
// (the TTL is long: the first read is a quarter of it away).
func TestCancelLeavesAnInterruptAsIs(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		ctx := bg(t)
		r := e.newRunner(t, func(c *Config) { c.Agent = answerOK })
		other := e.newRunner(t, func(c *Config) { c.Agent = answerOK })
		started := make(chan struct{})
		var cause error
		done := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "running", Content: "x"},
				func(ctx context.Context, run *Run) (Answer, error) {
					close(started)
					<-ctx.Done()
					cause = context.Cause(ctx)
					return Answer{}, cause
				})
			done <- err
		}()
		<-started
		interrupter := make(chan error, 1)
		go func() {
			_, err := other.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "stop", Content: "y", OnBusy: Interrupt}, answerOK)
			interrupter <- err
		}()
		waitFor(t, func() bool {
			st, err := r.Status(ctx, "s", "running")
			require.NoError(t, err)
			return st.InterruptedBy == "stop"
		})

		st, err := r.Cancel(ctx, "s", "running")
		require.NoError(t, err)
		assert.Equal(t, StateInterrupted, st.State)
		assert.Equal(t, "stop", st.InterruptedBy)
		require.ErrorIs(t, <-done, ErrInterrupted)
		require.ErrorIs(t, cause, ErrInterrupted)
		require.NoError(t, <-interrupter)
	})
}

// TestCancelStopsTheRunThatTookOver: a run of request R is taken over by
// a second run of R in the same process while the first is still
// finishing. When the first run ends, the second must still be the one
// Cancel stops at once in this process (as the interrupt watch does,
// TestInterruptReachesTheRunThatTookOver).
func TestCancelStopsTheRunThatTookOver(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		r := e.newRunner(t, func(c *Config) { c.Agent = answerOK })
		ctx := bg(t)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}

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

		secondIn := make(chan context.Context, 1)
		secondDone := make(chan error, 1)
		var id string
		go func() {
			_, err := r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
				id = run.RequestID()
				secondIn <- ctx
				<-ctx.Done()
				return Answer{}, context.Cause(ctx)
			})
			secondDone <- err
		}()
		second := <-secondIn
		// The first run ends now, after the second registered.
		close(firstGo)
		require.Error(t, <-firstDone)

		// Cancel's stop in this process, without the flag (which the
		// heartbeat would read within an interval): at once.
		r.stopLocal(id, ErrCancelled)
		atOnce := false
		select {
		case <-second.Done():
			atOnce = true
		default:
		}
		// Cancel as a client does: its flag stops the run in any case
		// (within a heartbeat interval).
		st, err := r.Cancel(ctx, "s", "c")
		require.NoError(t, err)
		assert.Equal(t, StateCancelled, st.State)
		require.ErrorIs(t, <-secondDone, ErrCancelled)
		require.True(t, atOnce, "Cancel's stop in this process missed the run that took over")
		require.ErrorIs(t, context.Cause(second), ErrCancelled)
	})
}

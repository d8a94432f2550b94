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

package request

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
)

// TestCancelQueued: a queued message cancelled never runs; the queue
// behind it goes on; every resend of its id gets ErrCancelled.
func TestCancelQueued(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second)
		ctx := bg(t)
		rc := &recorder{}
		r := e.newRunner(t, func(c *Config) { c.Agent = rc.agent })
		b := newBlocker(rc)
		done := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "running", Content: "x"}, b.agent)
			done <- err
		}()
		<-b.started
		for _, id := range []string{"q-1", "q-2"} {
			out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: id, Content: id, OnBusy: Queue}, nil)
			require.NoError(t, err)
			require.True(t, out.Queued)
		}
		st, err := r.Cancel(ctx, "s", "q-1")
		require.NoError(t, err)
		assert.Equal(t, StateCancelled, st.State)
		assert.True(t, st.State.Final())
		out, err := r.Status(ctx, "s", "q-2")
		require.NoError(t, err)
		assert.Equal(t, 0, out.Position, "the cancelled one no longer counts ahead")

		close(b.release)
		require.NoError(t, <-done)
		st, err = r.Wait(ctx, "s", "q-2")
		require.NoError(t, err)
		assert.Equal(t, StateSucceeded, st.State)
		assert.Equal(t, []string{"running", "q-2"}, rc.ordered(), "the cancelled message never ran")

		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "q-1", Content: "q-1", OnBusy: Queue}, nil)
		require.ErrorIs(t, err, ErrCancelled)
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "q-1", Content: "q-1"}, nil)
		require.ErrorIs(t, err, ErrCancelled)
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "q-1", Content: "other"}, nil)
		require.ErrorIs(t, err, ErrFingerprintMismatch)
		st, err = r.Status(ctx, "s", "q-1")
		require.NoError(t, err)
		_, err = st.Outcome()
		require.ErrorIs(t, err, ErrCancelled)

		// A finished one does not change; an unknown one is not found.
		st, err = r.Cancel(ctx, "s", "q-2")
		require.NoError(t, err)
		assert.Equal(t, StateSucceeded, st.State)
		_, err = r.Cancel(ctx, "s", "nobody")
		require.ErrorIs(t, err, lease.ErrNotFound)
		_, err = r.Cancel(ctx, "", "x")
		require.ErrorIs(t, err, lease.ErrInvalid)
	})
}

// TestCancelRunning: a running message cancelled has its context
// cancelled with cause ErrCancelled, ends cancelled, keeps the tool call
// it committed, frees its session, and every resend gets ErrCancelled.
// The cancel comes from another Runner (another process), so the run
// learns of it through its heartbeat; and from its own Runner, at once.
func TestCancelRunning(t *testing.T) {
	for _, from := range []string{"another process", "the same process"} {
		t.Run(from, func(t *testing.T) {
			each(t, func(t *testing.T, db *sqlx.DB) {
				e := newEnv(t, db, 800*time.Millisecond)
				ctx := bg(t)
				session := "s-" + from[:3]
				other := e.newRunner(t, nil)
				canceller := other
				if from == "the same process" {
					canceller = e.r
				}
				msg := Message{SessionKey: session, ClientRequestID: "c", Content: "pay 35"}
				committed := make(chan struct{})
				var cause error
				done := make(chan error, 1)
				go func() {
					_, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
						if _, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":35}`)); err != nil {
							return Answer{}, err
						}
						close(committed)
						<-ctx.Done()
						cause = context.Cause(ctx)
						// A late write after the cancel is refused.
						_, err := run.CallTool(context.Background(), "write", json.RawMessage(`{"amount":36}`))
						assert.ErrorIs(t, err, ErrCancelled)
						return Answer{}, cause
					})
					done <- err
				}()
				<-committed
				st, err := canceller.Cancel(ctx, session, "c")
				require.NoError(t, err)
				assert.Equal(t, StateCancelled, st.State)
				assert.True(t, st.CancelRequested)
				assert.Empty(t, st.InterruptedBy)
				require.ErrorIs(t, <-done, ErrCancelled)
				require.ErrorIs(t, cause, ErrCancelled)
				assert.Equal(t, 1, e.ledgerRows(t), "the committed tool call stays; nothing after the cancel")

				_, err = e.r.Handle(ctx, msg, func(context.Context, *Run) (Answer, error) {
					t.Error("a cancelled request never runs again")
					return Answer{}, nil
				})
				require.ErrorIs(t, err, ErrCancelled)
				// The session is free at once.
				out, err := e.r.Handle(ctx, Message{SessionKey: session, ClientRequestID: "next", Content: "y"},
					func(context.Context, *Run) (Answer, error) { return Answer{Reply: "free"}, nil })
				require.NoError(t, err)
				assert.Equal(t, "free", out.Reply)
			})
		})
	}
}

// TestCancelDeadAndFailed: a processing request whose run died is
// cancelled at once; a failed one is cancelled so a resend does not run
// it again.
func TestCancelDeadAndFailed(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 500*time.Millisecond)
		ctx := bg(t)
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "dead", Content: "x"},
			func(ctx context.Context, run *Run) (Answer, error) {
				run.abandon()
				return Answer{}, errors.New("crashed")
			})
		require.ErrorIs(t, err, context.Canceled)
		e.waitFree(t, "s", "dead")
		st, err := e.r.Cancel(ctx, "s", "dead")
		require.NoError(t, err)
		assert.Equal(t, StateCancelled, st.State)

		_, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "failed", Content: "x"},
			func(context.Context, *Run) (Answer, error) { return Answer{}, errors.New("model down") })
		require.ErrorIs(t, err, ErrAgentFailed)
		st, err = e.r.Cancel(ctx, "s", "failed")
		require.NoError(t, err)
		assert.Equal(t, StateCancelled, st.State)
		_, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "failed", Content: "x"},
			func(context.Context, *Run) (Answer, error) { return Answer{Reply: "ran"}, nil })
		require.ErrorIs(t, err, ErrCancelled)

		// Swept with its steps, as any finished request.
		n, err := e.r.Sweep(ctx, 0)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		st, err = e.r.Status(ctx, "s", "dead")
		require.NoError(t, err)
		assert.Equal(t, StateExpired, st.State)
	})
}

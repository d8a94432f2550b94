package request

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
)

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

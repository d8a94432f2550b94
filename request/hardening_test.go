package request

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/countdb"
	"github.com/rowlease/rowlease/internal/testdb"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// eachCounted runs fn as a parallel subtest per dialect, on an env whose
// database counts every round trip and can fail one after it took effect
// (countdb.Counter.FailAfter).
func eachCounted(t *testing.T, ttl time.Duration, fn func(t *testing.T, e *env, c *countdb.Counter)) {
	t.Helper()
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			c := &countdb.Counter{}
			db := testdb.OpenWith(t, d, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
			fn(t, newEnvTB(t, db, ttl), c)
		})
	}
}

// isSessionAcquire reports whether q is the statement that takes a session
// lock: an UPDATE of the session table that bumps the generation.
func isSessionAcquire(q string) bool {
	return strings.HasPrefix(q, "UPDATE") && strings.Contains(q, schema.SessionTable) && strings.Contains(q, "+ 1 END")
}

var errDropped = errors.New("connection dropped with the reply on the wire")

func answerOK(context.Context, *Run) (Answer, error) { return Answer{Reply: "ok"}, nil }

// TestNewRequestLeavesNoGhostSession (issue 8, item 5): the statement that
// takes the session for a new request, or the commit it is part of, takes
// effect while the caller sees an error. The session must not stay held by
// a request that does not exist: the next message of the session runs at
// once, not after the 30s TTL, and the failed message sent again runs as
// new.
func TestNewRequestLeavesNoGhostSession(t *testing.T) {
	cases := []struct {
		name string
		pick func() func(q string) error
	}{
		{"session statement", func() func(string) error {
			var once atomic.Bool
			return func(q string) error {
				if isSessionAcquire(q) && once.CompareAndSwap(false, true) {
					return errDropped
				}
				return nil
			}
		}},
		{"commit", func() func(string) error {
			var seen, once atomic.Bool
			return func(q string) error {
				if isSessionAcquire(q) {
					seen.Store(true)
				}
				if q == countdb.Commit && seen.Load() && once.CompareAndSwap(false, true) {
					return errDropped
				}
				return nil
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachCounted(t, 30*time.Second, func(t *testing.T, e *env, c *countdb.Counter) {
				ctx := bg(t)
				require.NoError(t, e.r.Sessions().Create(ctx, e.db, "s"))
				c.FailAfter(tc.pick())
				_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c1", Content: "x"}, answerOK)
				c.FailAfter(nil)
				require.ErrorIs(t, err, errDropped)

				st, err := e.r.Sessions().Inspect(ctx, e.db, "s")
				require.NoError(t, err)
				assert.False(t, st.Held, "the session is not held by a request that does not exist (holder %q)", st.Holder)
				out, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c2", Content: "y"}, answerOK)
				require.NoError(t, err, "the next message of the session is not refused")
				assert.Equal(t, "ok", out.Reply)

				out, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c1", Content: "x"}, answerOK)
				require.NoError(t, err)
				assert.False(t, out.Replayed)
				assert.False(t, out.Resumed, "nothing of the failed send was left to resume")
				assert.Equal(t, int64(1), out.Attempt)
			})
		})
	}
}

// TestMissingSessionIsNotFoundOnBothPaths (issue 8, item 8): a failed
// request whose session row is gone reports session.ErrNotFound (404)
// when retried, as a new request in that session does; it is not retried
// as if the request had changed state, nor reported in flight.
func TestMissingSessionIsNotFoundOnBothPaths(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		ctx := bg(t)
		r, err := New(Config{DB: db, TTL: 30 * time.Second, ReleaseTimeout: 10 * time.Second}) // no AutoCreate
		require.NoError(t, err)
		require.NoError(t, r.Sessions().Create(ctx, db, "s"))
		fail := func(context.Context, *Run) (Answer, error) { return Answer{}, errors.New("model unavailable") }
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, fail)
		require.ErrorIs(t, err, ErrAgentFailed)
		_, err = db.ExecContext(ctx, e.d.Rebind("DELETE FROM rowlease_session WHERE session_key = ?"), "s")
		require.NoError(t, err)
		before := snapshot(t, e)

		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, answerOK)
		assert.ErrorIs(t, err, session.ErrNotFound, "takeover path")
		assert.NotErrorIs(t, err, ErrInFlight)
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "new", Content: "y"}, answerOK)
		assert.ErrorIs(t, err, session.ErrNotFound, "new-request path")
		assert.Equal(t, before, snapshot(t, e), "nothing changed")
		_, err = r.find(ctx, Message{SessionKey: "s", ClientRequestID: "new"})
		assert.ErrorIs(t, err, sql.ErrNoRows)
	})
}

// TestAnswerKeptWhenCancelledAfterIt (issue 8, item 6): the caller's
// context is cancelled (shutdown, a run timeout) just after the agent
// returned its answer. The answer is stored, not thrown away: the retry
// replays it instead of running the agent (and its model rounds) again.
func TestAnswerKeptWhenCancelledAfterIt(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		ctx, cancel := context.WithCancel(bg(t))
		defer cancel()
		var runs atomic.Int64
		agent := func(_ context.Context, run *Run) (Answer, error) {
			runs.Add(1)
			cancel() // the caller gives up as the answer comes back
			return Answer{Reply: "recorded", Result: json.RawMessage(`{"id":7}`)}, nil
		}
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
		out, err := e.r.Handle(ctx, msg, agent)
		require.NoError(t, err)
		assert.Equal(t, "recorded", out.Reply)
		require.Error(t, ctx.Err())

		st, held := e.status(t, "s", "c")
		assert.Equal(t, "success", st)
		assert.False(t, held)
		ss, err := e.r.Sessions().Inspect(bg(t), db, "s")
		require.NoError(t, err)
		assert.False(t, ss.Held, "the session is freed")

		out, err = e.r.Handle(bg(t), msg, agent)
		require.NoError(t, err)
		assert.True(t, out.Replayed)
		assert.JSONEq(t, `{"id":7}`, string(out.Result))
		assert.Equal(t, int64(1), runs.Load(), "the agent ran once")
	})
}

// TestCancelledFailureLeavesTheRequestToResume: when the agent fails
// because the caller's context was cancelled, nothing is marked: the
// request stays processing, free, and the retry resumes it.
func TestCancelledFailureLeavesTheRequestToResume(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		ctx, cancel := context.WithCancel(bg(t))
		defer cancel()
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
		_, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			cancel()
			<-ctx.Done()
			return Answer{}, ctx.Err()
		})
		require.ErrorIs(t, err, context.Canceled)
		st, held := e.status(t, "s", "c")
		assert.Equal(t, "processing", st)
		assert.False(t, held)
		out, err := e.r.Handle(bg(t), msg, answerOK)
		require.NoError(t, err)
		assert.True(t, out.Resumed)
	})
}

package request

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strings"
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
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
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
// lock: an UPDATE of the session table that bumps the generation, alone
// or (a new request on PostgreSQL) in the statement that also inserts the
// request (isAtOnceClaim).
func isSessionAcquire(q string) bool {
	bumps := strings.Contains(q, "`generation` + 1") || strings.Contains(q, `"generation" + 1`)
	return (strings.HasPrefix(q, "UPDATE") || isAtOnceClaim(q)) && strings.Contains(q, schema.SessionTable) && bumps
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
		// queueOn: the dialects on which the case sends a Queue message.
		// On PostgreSQL a new Reject message's claim is one statement with
		// no commit and no INSERT of its own, and on MySQL two autocommit
		// statements with no commit; a Queue message's claim keeps its
		// transaction.
		queueOn []lease.Dialect
	}{
		{"session statement", func() func(string) error {
			var once atomic.Bool
			return func(q string) error {
				if isSessionAcquire(q) && once.CompareAndSwap(false, true) {
					return errDropped
				}
				return nil
			}
		}, nil},
		{"request insert", func() func(string) error {
			// MySQL's new message inserts its request first, in autocommit
			// (requestFirstClaimer); elsewhere the insert is in the claim's
			// transaction.
			var once atomic.Bool
			return func(q string) error {
				if strings.HasPrefix(q, "INSERT INTO") && strings.Contains(q, schema.RequestTable) && once.CompareAndSwap(false, true) {
					return errDropped
				}
				return nil
			}
		}, []lease.Dialect{lease.Postgres}},
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
		}, []lease.Dialect{lease.Postgres, lease.MySQL}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachCounted(t, 30*time.Second, func(t *testing.T, e *env, c *countdb.Counter) {
				ctx := bg(t)
				require.NoError(t, e.r.Sessions().Create(ctx, e.db, "s"))
				msg := Message{SessionKey: "s", ClientRequestID: "c1", Content: "x"}
				if slices.Contains(tc.queueOn, e.d) {
					msg.OnBusy = Queue
					e.r.cfg.Agent = answerOK
				}
				c.FailAfter(tc.pick())
				_, err := e.r.Handle(ctx, msg, answerOK)
				c.FailAfter(nil)
				require.ErrorIs(t, err, errDropped)
				noGhostLeft(t, ctx, e)
			})
		})
	}
}

// TestMissingSessionIsNotFoundOnBothPaths (issue 8, item 8): a failed
// request whose session row is gone reports *session.NotFoundError (404)
// when retried, as a new request in that session does; it is not retried
// as if the request had changed state, nor reported in flight.
func TestMissingSessionIsNotFoundOnBothPaths(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		ctx := bg(t)
		r, err := New(Config{DB: db, TTL: 30 * time.Second, ReleaseTimeout: 10 * time.Second, RequireSession: true}) // no AutoCreate
		require.NoError(t, err)
		require.NoError(t, r.Sessions().Create(ctx, db, "s"))
		fail := func(context.Context, *Run) (Answer, error) { return Answer{}, errors.New("model unavailable") }
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, fail)
		require.ErrorIs(t, err, ErrAgentFailed)
		_, err = db.ExecContext(ctx, e.d.Rebind("DELETE FROM rowlease_session WHERE session_key = ?"), "s")
		require.NoError(t, err)
		before := snapshot(t, e)

		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, answerOK)
		assert.ErrorAs(t, err, new(*session.NotFoundError), "takeover path")
		assert.NotErrorIs(t, err, ErrInFlight)
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "new", Content: "y"}, answerOK)
		assert.ErrorAs(t, err, new(*session.NotFoundError), "new-request path")
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

// claimTool inserts a tool execution held by holder for ttl, as
// toolexec.Store.Execute's claim does before it runs the side effect.
func claimTool(t *testing.T, e *env, sessionKey, requestID, holder, tool, args string, ttl time.Duration) toolexec.Grant {
	t.Helper()
	_, hash, err := toolexec.CanonicalArguments(json.RawMessage(args))
	require.NoError(t, err)
	g, err := e.r.tools.Lease().Create(bg(t), e.db, uuid.NewString(), holder, ttl, lease.CreateOptions{
		State: schema.StoredProcessing, Set: []lease.Assignment{
			lease.Set(schema.ColSessionKey, sessionKey), lease.Set(schema.ColRequestID, requestID),
			lease.Set(schema.ColToolName, tool), lease.Set(schema.ColArgumentsHash, hash),
			lease.Set(schema.ColIdempotencyKey, toolexec.IdempotencyKey(requestID, tool, hash, 0)),
		}})
	require.NoError(t, err)
	return g
}

// TestTakeoverTakesTheRunningToolCalls (issue 8, item 7): a run crashes
// while a tool call is claimed, and the tool lease outlives the request
// and session leases (claimed after their last renewal it does, by up to
// one heartbeat interval; here by a minute, so the test does not depend
// on timing). The run that takes the request over makes the same call: it
// is not refused as running elsewhere, the side effect commits once, and
// the dead run's tool lease can no longer mark anything.
func TestTakeoverTakesTheRunningToolCalls(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		ttl := 400 * time.Millisecond
		e := newEnv(t, db, ttl)
		ctx := bg(t)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "pay 35"}
		other := claimTool(t, e, "other-session", uuid.NewString(), "someone", "write", `{"amount":1}`, time.Minute)
		var dead toolexec.Grant
		_, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			dead = claimTool(t, e, "s", run.RequestID(), run.holder, "write", `{"amount":35}`, time.Minute)
			run.abandon() // the process dies with the call claimed
			return Answer{}, errors.New("crashed")
		})
		require.ErrorIs(t, err, context.Canceled)
		waitFor(t, func() bool {
			_, held := e.status(t, "s", "c")
			ss, err := e.r.sessions.Inspect(ctx, db, "s")
			require.NoError(t, err)
			return !held && !ss.Held
		})

		out, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":35}`))
			if err != nil {
				return Answer{}, err
			}
			assert.Equal(t, dead.Key, res.ExecutionID, "the same call, taken over")
			assert.Greater(t, res.Generation, dead.Generation)
			return Answer{Reply: "paid"}, nil
		})
		require.NoError(t, err)
		assert.True(t, out.Resumed)
		assert.Equal(t, 1, e.ledgerRows(t))

		_, err = e.r.tools.Lease().Transition(ctx, db, dead, lease.ChangeOptions{From: []string{"processing"}, To: "success"})
		assert.ErrorIs(t, err, lease.ErrLost, "the dead run's mark is refused")
		st, err := e.r.tools.Lease().Inspect(ctx, db, other.Key)
		require.NoError(t, err)
		assert.True(t, st.Held, "another request's call is left alone")
		assert.Equal(t, "someone", st.Holder)
	})
}

// TestAnswerResultMustBeJSON (issue 8, item 10): an answer whose Result is
// not valid JSON is not stored (every replay of it would fail); the
// request is marked error, the session freed, and the retry runs again.
func TestAnswerResultMustBeJSON(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		ctx := bg(t)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
		_, err := e.r.Handle(ctx, msg, func(context.Context, *Run) (Answer, error) {
			return Answer{Reply: "ok", Result: json.RawMessage(`{"id":`)}, nil
		})
		require.ErrorIs(t, err, ErrAgentFailed)
		require.ErrorIs(t, err, lease.ErrInvalid)
		var ve *engine.ValidationError
		require.ErrorAs(t, err, &ve)
		st, held := e.status(t, "s", "c")
		assert.Equal(t, "error", st)
		assert.False(t, held)
		ss, err := e.r.Sessions().Inspect(ctx, db, "s")
		require.NoError(t, err)
		assert.False(t, ss.Held)
		var stored sql.NullString
		require.NoError(t, db.QueryRowContext(ctx, e.d.Rebind("SELECT result FROM rowlease_request WHERE client_request_id = ?"), "c").Scan(&stored))
		assert.False(t, stored.Valid, "nothing stored")

		good := func(context.Context, *Run) (Answer, error) {
			return Answer{Reply: "ok", Result: json.RawMessage(`{"id":7}`)}, nil
		}
		out, err := e.r.Handle(ctx, msg, good)
		require.NoError(t, err)
		assert.True(t, out.Resumed)
		out, err = e.r.Handle(ctx, msg, good)
		require.NoError(t, err)
		assert.True(t, out.Replayed)
		assert.JSONEq(t, `{"id":7}`, string(out.Result))
	})
}

// offsetClock is a local clock off real time by a fixed amount, keeping
// the monotonic reading.
type offsetClock time.Duration

func (c offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// TestInjectedClockReachesTheHeartbeat (issue 8, item 11): with
// Config.Lease.Clock a minute behind real time, the heartbeat reads the
// same clock as the leases' trust deadlines, and a run outlives several
// heartbeat intervals instead of being cancelled at once.
func TestInjectedClockReachesTheHeartbeat(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, time.Second)
		ctx := bg(t)
		r, err := New(Config{DB: db, TTL: time.Second, HeartbeatInterval: 200 * time.Millisecond, ReleaseTimeout: 10 * time.Second,
			Session: sessionConfigAutoCreate(), Lease: lease.Options{Clock: offsetClock(-time.Minute)}})
		require.NoError(t, err)
		out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"},
			func(ctx context.Context, run *Run) (Answer, error) {
				timer := time.NewTimer(600 * time.Millisecond) // three heartbeat intervals of model round
				defer timer.Stop()
				select {
				case <-timer.C:
					return Answer{Reply: "ok"}, nil
				case <-ctx.Done():
					return Answer{}, context.Cause(ctx)
				}
			})
		require.NoError(t, err)
		assert.Equal(t, "ok", out.Reply)
		st, _ := e.status(t, "s", "c")
		assert.Equal(t, "success", st)
	})
}

// TestColumnsCannotBeChanged (issue 8, item 14): the columns are handed
// out as a copy; changing it does not change what New uses.
func TestColumnsCannotBeChanged(t *testing.T) {
	c := Columns()
	c.Key, c.Token = "changed", "changed"
	assert.Equal(t, schema.ColID, Columns().Key)
	assert.Equal(t, schema.ColToken, Columns().Token)
	r, err := New(Config{DB: testdb.Open(t, lease.SQLite)})
	require.NoError(t, err)
	assert.Equal(t, Columns(), engine.TableOf(r.req).Columns())
}

// TestRenamedTables (issue 8, item 14): Config names the request and
// tool-execution tables, as Session.Table names the session's; the whole
// flow (new request, tool call, takeover after a failure, replay) runs on
// them. A bad name is refused before any SQL.
func TestRenamedTables(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		newEnv(t, db, 30*time.Second) // the schema
		ctx := bg(t)
		for _, q := range []string{
			"ALTER TABLE rowlease_request RENAME TO app_request",
			"ALTER TABLE rowlease_tool_execution RENAME TO app_tool_call",
		} {
			_, err := db.ExecContext(ctx, q)
			require.NoError(t, err)
		}
		tools := toolexec.NewRegistry()
		require.NoError(t, tools.Register("read", func(context.Context, toolexec.Exec) (json.RawMessage, error) {
			return json.RawMessage(`{"ok":true}`), nil
		}))
		r, err := New(Config{DB: db, TTL: 30 * time.Second, Tools: tools, Session: sessionConfigAutoCreate(),
			RequestTable: "app_request", ToolExecutionTable: "app_tool_call"})
		require.NoError(t, err)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
		var runs atomic.Int64
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			if _, err := run.CallTool(ctx, "read", json.RawMessage(`{"a":1}`)); err != nil {
				return Answer{}, err
			}
			if runs.Add(1) == 1 {
				return Answer{}, errors.New("model unavailable")
			}
			assert.Len(t, run.Prior(), 1)
			return Answer{Reply: "ok"}, nil
		}
		_, err = r.Handle(ctx, msg, agent)
		require.ErrorIs(t, err, ErrAgentFailed)
		out, err := r.Handle(ctx, msg, agent)
		require.NoError(t, err)
		assert.True(t, out.Resumed)
		out, err = r.Handle(ctx, msg, agent)
		require.NoError(t, err)
		assert.True(t, out.Replayed)
		var n int
		require.NoError(t, db.GetContext(ctx, &n, "SELECT COUNT(*) FROM app_request"))
		assert.Equal(t, 1, n)
		require.NoError(t, db.GetContext(ctx, &n, "SELECT COUNT(*) FROM app_tool_call"))
		assert.Equal(t, 1, n)
	})
}

func TestBadTableNames(t *testing.T) {
	db := testdb.Open(t, lease.SQLite)
	for name, cfg := range map[string]Config{
		"request table": {DB: db, RequestTable: "bad-name"},
		"tool table":    {DB: db, ToolExecutionTable: "a.b.c"},
	} {
		_, err := New(cfg)
		var ve *engine.ValidationError
		assert.ErrorAs(t, err, &ve, name)
	}
}

// TestOutcomeJSON (issue 8, item 14): an Outcome encodes with snake_case
// names, and nothing else (it carries no token).
func TestOutcomeJSON(t *testing.T) {
	b, err := json.Marshal(Outcome{RequestID: "r", Reply: "hi", Result: json.RawMessage(`{"id":7}`), Replayed: true, Resumed: true, Attempt: 2})
	require.NoError(t, err)
	assert.JSONEq(t, `{"request_id":"r","reply":"hi","result":{"id":7},"replayed":true,"resumed":true,"attempt":2}`, string(b))
	b, err = json.Marshal(Outcome{RequestID: "r"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"request_id":"r","reply":"","replayed":false,"resumed":false,"attempt":0}`, string(b), "no result: omitted")
}

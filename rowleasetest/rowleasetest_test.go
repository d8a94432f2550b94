package rowleasetest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/rowleasetest"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// TestMain fails the run if a heartbeat (or anything else) is left
// behind.
func TestMain(m *testing.M) { testdb.Main(m) }

// dbPath is the file of the main database of db.
func dbPath(t *testing.T, db *sql.DB) string {
	t.Helper()
	var seq int
	var name, file string
	require.NoError(t, db.QueryRowContext(t.Context(), "PRAGMA database_list").Scan(&seq, &name, &file))
	require.Equal(t, "main", name)
	return file
}

// TestNewDB: the database has the lock tables, WAL, the busy timeout and
// BEGIN IMMEDIATE; it lives in the test's temporary directory and is
// closed (and its file removed) when the test ends.
func TestNewDB(t *testing.T) {
	var db *sql.DB
	var path string
	t.Run("open", func(t *testing.T) {
		db = rowleasetest.NewDB(t)
		ctx := t.Context()
		path = dbPath(t, db)
		assert.True(t, strings.HasPrefix(path, os.TempDir()), "in a temporary directory: %s", path)

		for _, table := range []string{schema.SessionTable, schema.RequestTable, schema.ToolExecutionTable} {
			var n int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?", table).Scan(&n))
			assert.Equal(t, 1, n, table)
		}
		var mode string
		var timeout int
		require.NoError(t, db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode))
		require.NoError(t, db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&timeout))
		assert.Equal(t, "wal", mode)
		assert.Equal(t, 10000, timeout)

		// A transaction takes the write lock at BEGIN, before it writes:
		// another connection that will not wait cannot begin one.
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback() //nolint:errcheck
		other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_txlock=immediate")
		require.NoError(t, err)
		defer other.Close()
		otx, err := other.BeginTx(ctx, nil)
		if err == nil {
			_ = otx.Rollback()
		}
		require.Error(t, err, "a second writer began while the first transaction was open: BEGIN is not IMMEDIATE")
		assert.Contains(t, err.Error(), "locked")
		require.NoError(t, tx.Rollback())
	})
	require.NotNil(t, db)
	assert.ErrorContains(t, db.PingContext(t.Context()), "closed", "closed at the test's cleanup")
	_, err := os.Stat(path)
	assert.True(t, errors.Is(err, os.ErrNotExist), "file removed with the test's directory: %v", err)
}

// TestNewDBIsolated: two calls give two databases.
func TestNewDBIsolated(t *testing.T) {
	a, b := rowleasetest.NewDB(t), rowleasetest.NewDB(t)
	assert.NotEqual(t, dbPath(t, a), dbPath(t, b))
	_, err := a.ExecContext(t.Context(), "INSERT INTO "+schema.SessionTable+" (session_key) VALUES ('only-in-a')")
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+schema.SessionTable).Scan(&n))
	assert.Zero(t, n)
}

func TestClock(t *testing.T) {
	var c rowleasetest.Clock
	before := time.Now()
	now := c.Now()
	assert.Contains(t, now.String(), "m=", "carries the monotonic reading")
	assert.False(t, now.Before(before))
	assert.Zero(t, c.Offset())

	c.Advance(time.Hour)
	c.Advance(time.Minute)
	assert.Equal(t, time.Hour+time.Minute, c.Offset())
	ref := time.Now().Add(time.Hour + time.Minute)
	assert.False(t, c.Now().Before(ref), "an hour and a minute ahead")
	assert.Contains(t, c.Now().String(), "m=")

	assert.PanicsWithValue(t, "rowleasetest: Clock.Advance(-1s): negative duration", func() { c.Advance(-time.Second) })
	assert.Equal(t, time.Hour+time.Minute, c.Offset(), "a refused Advance changes nothing")

	// Safe for concurrent use (run with -race).
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, time.Hour+time.Minute+400*time.Millisecond, c.Offset())
}

// TestClockMovesTrustNotExpiry: advancing the clock ends a grant's trust,
// but the lease stays held in the database — its clock decides expiry —
// so another holder still gets ErrHeld.
func TestClockMovesTrustNotExpiry(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		ctx := t.Context()
		d, err := lease.DetectDialect(db)
		require.NoError(t, err)
		require.NoError(t, schema.Apply(ctx, db, d))
		clk := &rowleasetest.Clock{}
		sessions, err := session.New(session.Config{Dialect: d, AutoCreate: true, Lease: lease.Options{Clock: clk}})
		require.NoError(t, err)

		g, err := sessions.Acquire(ctx, db, "s", "request-1", time.Minute)
		require.NoError(t, err)
		require.True(t, g.Trusted(clk.Now()))

		clk.Advance(2 * time.Minute)
		assert.False(t, g.Trusted(clk.Now()), "past the trust deadline on the advanced clock")
		_, err = sessions.Acquire(ctx, db, "s", "request-2", time.Minute)
		assert.ErrorIs(t, err, lease.ErrHeld, "the database clock has not moved")
		st, err := sessions.Inspect(ctx, db, "s")
		require.NoError(t, err)
		assert.True(t, st.Held)
		assert.Equal(t, "request-1", st.Holder)
	})
}

// ledger creates the application's own table next to the lock tables, and
// a tool that books into it.
func ledger(t *testing.T, db *sql.DB, runs *int) rowleasetest.Option {
	t.Helper()
	_, err := db.ExecContext(t.Context(), "CREATE TABLE ledger (request_id VARCHAR(64), amount INTEGER)")
	require.NoError(t, err)
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	insert := d.Rebind("INSERT INTO ledger (request_id, amount) VALUES (?, ?)")
	return rowleasetest.WithTool("book", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		*runs++
		var args struct{ Amount int }
		if err := json.Unmarshal(x.Canonical, &args); err != nil {
			return nil, err
		}
		_, err := x.Tx.ExecContext(ctx, insert, x.Call.RequestID, args.Amount)
		return json.RawMessage(`{"booked":true}`), err
	})
}

func bookAgent(calls *int) request.Agent {
	return func(ctx context.Context, run *request.Run) (request.Answer, error) {
		*calls++
		res, err := run.CallTool(ctx, "book", json.RawMessage(`{"amount":35}`))
		if err != nil {
			return request.Answer{}, err
		}
		return request.Answer{Reply: "booked 35 for " + run.Content(), Result: res.Output}, nil
	}
}

func count(t *testing.T, db *sql.DB, query string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(t.Context(), query).Scan(&n))
	return n
}

// TestHandle: the agent runs under a real Run — its tool call goes through
// toolexec and commits once — and what it did is in the Result and in the
// database; the runner replays the message.
func TestHandle(t *testing.T) {
	db := rowleasetest.NewDB(t)
	var toolRuns, agentRuns int
	agent := bookAgent(&agentRuns)
	res := rowleasetest.Handle(t, agent, rowleasetest.WithDB(db), ledger(t, db, &toolRuns),
		rowleasetest.WithMessage(request.Message{Content: "lunch"}))
	require.NoError(t, res.Err)
	assert.Equal(t, "booked 35 for lunch", res.Outcome.Reply)
	assert.JSONEq(t, `{"booked":true}`, string(res.Outcome.Result))
	assert.Equal(t, int64(1), res.Outcome.Attempt)
	assert.False(t, res.Outcome.Replayed)
	assert.Equal(t, request.Message{SessionKey: rowleasetest.SessionKey, ClientRequestID: rowleasetest.ClientRequestID, Content: "lunch"}, res.Message)
	assert.Same(t, db, res.DB)

	assert.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM ledger"))
	assert.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM rowlease_request WHERE status = 'success' AND token IS NULL"))
	assert.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM rowlease_tool_execution WHERE tool_name = 'book' AND status = 'success'"))
	assert.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM rowlease_session WHERE token IS NULL"), "the session is free again")

	again, err := res.Runner.Handle(t.Context(), res.Message, agent)
	require.NoError(t, err)
	assert.True(t, again.Replayed)
	assert.Equal(t, res.Outcome.RequestID, again.RequestID)
	assert.Equal(t, 1, agentRuns)
	assert.Equal(t, 1, toolRuns)
}

// TestHandleDefaults: without options Handle opens its own database, sends the
// default message, and hands Handle's errors back without failing.
func TestHandleDefaults(t *testing.T) {
	res := rowleasetest.Handle(t, func(ctx context.Context, run *request.Run) (request.Answer, error) {
		return request.Answer{}, errors.New("the model is down")
	})
	require.ErrorIs(t, res.Err, request.ErrAgentFailed)
	assert.ErrorContains(t, res.Err, "the model is down")
	require.NotNil(t, res.DB)
	require.NotNil(t, res.Runner)
	assert.Equal(t, 1, count(t, res.DB, "SELECT COUNT(*) FROM rowlease_request WHERE status = 'error' AND session_key = 'session-1' AND client_request_id = 'message-1'"))

	res = rowleasetest.Handle(t, nil)
	assert.ErrorIs(t, res.Err, lease.ErrInvalid, "a nil agent is Handle's error, not a failed test")
}

// TestRunWithTools: the application's registry is used, and WithTool and
// WithExternalTool add to it.
func TestRunWithTools(t *testing.T) {
	reg := toolexec.NewRegistry()
	require.NoError(t, reg.Register("mine", func(context.Context, toolexec.Exec) (json.RawMessage, error) {
		return json.RawMessage(`"mine"`), nil
	}))
	var sent []string
	res := rowleasetest.Handle(t, func(ctx context.Context, run *request.Run) (request.Answer, error) {
		var out []string
		for _, tool := range []string{"mine", "added", "notify"} {
			r, err := run.CallTool(ctx, tool, json.RawMessage(`{}`))
			if err != nil {
				return request.Answer{}, err
			}
			out = append(out, string(r.Output))
		}
		return request.Answer{Reply: strings.Join(out, " ")}, nil
	},
		rowleasetest.WithTools(reg),
		rowleasetest.WithTool("added", func(context.Context, toolexec.Exec) (json.RawMessage, error) {
			return json.RawMessage(`"added"`), nil
		}),
		rowleasetest.WithExternalTool("notify", func(_ context.Context, x toolexec.External) (json.RawMessage, error) {
			sent = append(sent, x.EffectKey)
			return json.RawMessage(`"sent"`), nil
		}, toolexec.ExternalOptions{}))
	require.NoError(t, res.Err)
	assert.Equal(t, `"mine" "added" "sent"`, res.Outcome.Reply)
	assert.Len(t, sent, 1)
	assert.Equal(t, []string{"added", "mine", "notify"}, reg.Names())
}

// recordingT is a TB that records what Fatalf says and forwards the
// rest to the real test. Fatalf ends the goroutine, as testing's does.
type recordingT struct {
	*testing.T
	mu    sync.Mutex
	fatal string
}

func (r *recordingT) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// logT is the real test, with its log lines also kept.
type logT struct {
	*testing.T
	mu   sync.Mutex
	logs []string
}

func (l *logT) Logf(format string, args ...any) {
	l.mu.Lock()
	l.logs = append(l.logs, fmt.Sprintf(format, args...))
	l.mu.Unlock()
	l.T.Logf(format, args...)
}

// fatal runs fn with a recordingT on a goroutine of its own and returns
// what Fatalf said ("" if nothing).
func fatal(t *testing.T, fn func(tb rowleasetest.TB)) string {
	rt := &recordingT{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(rt)
	}()
	<-done
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.fatal
}

// TestBadSetupFailsTheTest: each bad option or Config fails the test with
// its cause, and the agent never runs.
func TestBadSetupFailsTheTest(t *testing.T) {
	noop := func(context.Context, toolexec.Exec) (json.RawMessage, error) { return nil, nil }
	for name, c := range map[string]struct {
		opts []rowleasetest.Option
		want string
	}{
		"nil db":         {[]rowleasetest.Option{rowleasetest.WithDB(nil)}, "WithDB(nil)"},
		"nil registry":   {[]rowleasetest.Option{rowleasetest.WithTools(nil)}, "WithTools(nil)"},
		"nil config":     {[]rowleasetest.Option{rowleasetest.WithConfig(nil)}, "WithConfig(nil)"},
		"nil option":     {[]rowleasetest.Option{nil}, "nil Option"},
		"tool twice":     {[]rowleasetest.Option{rowleasetest.WithTool("t", noop), rowleasetest.WithTool("t", noop)}, `tool "t" registered twice`},
		"nil tool":       {[]rowleasetest.Option{rowleasetest.WithTool("t", nil)}, "nil side effect"},
		"interval > ttl": {[]rowleasetest.Option{rowleasetest.WithConfig(func(c *request.Config) { c.TTL, c.HeartbeatInterval = time.Second, time.Second })}, "request.New: heartbeat: invalid interval"},
	} {
		t.Run(name, func(t *testing.T) {
			ran := false
			got := fatal(t, func(tb rowleasetest.TB) {
				rowleasetest.Handle(tb, func(context.Context, *request.Run) (request.Answer, error) {
					ran = true
					return request.Answer{}, nil
				}, c.opts...)
			})
			assert.Contains(t, got, c.want)
			assert.False(t, ran)
			got = fatal(t, func(tb rowleasetest.TB) { rowleasetest.NewRunner(tb, c.opts...) })
			assert.Contains(t, got, c.want)
		})
	}
}

// TestRunClockAdvance: an agent that moves the clock past the trust
// deadline loses its leases at the heartbeat's next wake-up; Handle
// returns ErrTakenOver, the loss is logged through t.Logf, and the same
// message then runs again at once (the leases were given back).
func TestRunClockAdvance(t *testing.T) {
	clk := &rowleasetest.Clock{}
	rt := &logT{T: t}
	ttl := 1500 * time.Millisecond // the heartbeat wakes every 500 ms
	res := rowleasetest.Handle(rt, func(ctx context.Context, run *request.Run) (request.Answer, error) {
		clk.Advance(time.Hour)
		// Cancelled within one heartbeat interval of real time; the
		// timer only keeps a broken clock from hanging the test.
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return request.Answer{}, context.Cause(ctx)
		case <-timer.C:
			return request.Answer{}, errors.New("the work context was not cancelled")
		}
	}, rowleasetest.WithClock(clk), rowleasetest.WithConfig(func(c *request.Config) { c.TTL = ttl }))
	require.ErrorIs(t, res.Err, request.ErrTakenOver)
	require.ErrorIs(t, res.Err, lease.ErrLost)
	var lost *heartbeat.LostError
	require.ErrorAs(t, res.Err, &lost)
	assert.Equal(t, heartbeat.ReasonDeadline, lost.Reason)

	rt.mu.Lock()
	logs := strings.Join(rt.logs, "\n")
	rt.mu.Unlock()
	assert.Contains(t, logs, "lease lost")

	again, err := res.Runner.Handle(t.Context(), res.Message, func(context.Context, *request.Run) (request.Answer, error) {
		return request.Answer{Reply: "done"}, nil
	})
	require.NoError(t, err)
	assert.True(t, again.Resumed)
	assert.Equal(t, "done", again.Reply)
}

// TestRunOnEachDialect: WithDB runs on a database of any dialect that has
// the lock tables.
func TestRunOnEachDialect(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		d, err := lease.DetectDialect(db)
		require.NoError(t, err)
		require.NoError(t, schema.Apply(t.Context(), db, d))
		var toolRuns, agentRuns int
		res := rowleasetest.Handle(t, bookAgent(&agentRuns), rowleasetest.WithDB(db.DB), ledger(t, db.DB, &toolRuns),
			rowleasetest.WithMessage(request.Message{SessionKey: "s-" + db.DriverName(), Content: "taxi"}))
		require.NoError(t, res.Err)
		assert.Equal(t, "booked 35 for taxi", res.Outcome.Reply)
		assert.Equal(t, 1, count(t, db.DB, "SELECT COUNT(*) FROM ledger"))
		assert.Equal(t, 1, toolRuns)
	})
}

// TestCrash: a run that Crash abandons writes nothing and keeps its leases
// until they expire; the resend after the TTL takes the request over and
// answers it.
func TestCrash(t *testing.T) {
	db := rowleasetest.NewDB(t)
	const ttl = 300 * time.Millisecond
	short := rowleasetest.WithConfig(func(c *request.Config) { c.TTL, c.HeartbeatInterval = ttl, ttl/4 })
	res := rowleasetest.Handle(t, func(ctx context.Context, run *request.Run) (request.Answer, error) {
		rowleasetest.Crash(run)
		return request.Answer{Reply: "never stored"}, nil
	}, rowleasetest.WithDB(db), short)
	require.ErrorIs(t, res.Err, context.Canceled)
	assert.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM rowlease_request WHERE status = 'processing' AND token IS NOT NULL"), "left as a crash leaves it")
	assert.Equal(t, 1, count(t, db, "SELECT COUNT(*) FROM rowlease_session WHERE token IS NOT NULL"), "the session is still held")

	_, err := res.Runner.Handle(t.Context(), res.Message, func(context.Context, *request.Run) (request.Answer, error) {
		return request.Answer{Reply: "answered"}, nil
	})
	require.ErrorIs(t, err, request.ErrInFlight, "the crashed run's lease is live until its TTL")

	require.Eventually(t, func() bool {
		out, err := res.Runner.Handle(t.Context(), res.Message, func(context.Context, *request.Run) (request.Answer, error) {
			return request.Answer{Reply: "answered"}, nil
		})
		return err == nil && out.Reply == "answered" && out.Resumed
	}, 30*time.Second, ttl/2, "a resend after the TTL takes the request over")
	rowleasetest.Crash(nil) // a nil run is ignored
}

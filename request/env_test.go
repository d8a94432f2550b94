package request

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// env is a fresh database with the lock tables, a ledger table and a
// Runner whose tools write to it.
type env struct {
	// pauseSideEffect, when set, excludes the side effect's own writes
	// from the statement count.
	pauseSideEffect *countdb.Counter
	db              *sqlx.DB
	d               lease.Dialect
	r               *Runner
	tools           *toolexec.Registry
	writes          atomic.Int64 // side effects committed by the "write" tool
}

const ledgerDDL = "CREATE TABLE ledger_entry (request_id VARCHAR(64) NOT NULL, amount VARCHAR(32) NOT NULL)"

// newEnv applies the schema and a tiny ledger table on a fresh database,
// and registers a side-effecting tool "write" and a read-only tool "read".
func newEnv(t *testing.T, db *sqlx.DB, ttl time.Duration) *env { return newEnvTB(t, db, ttl) }

func newEnvTB(t testing.TB, db *sqlx.DB, ttl time.Duration) *env {
	t.Helper()
	ctx := context.Background()
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	require.NoError(t, schema.Apply(ctx, db, d))
	_, err = db.ExecContext(ctx, ledgerDDL)
	require.NoError(t, err)
	e := &env{db: db, d: d}
	tools := toolexec.NewRegistry()
	require.NoError(t, tools.Register("write", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		var args struct {
			Amount json.Number `json:"amount"`
		}
		if err := json.Unmarshal(x.Canonical, &args); err != nil {
			return nil, err
		}
		if args.Amount == "" {
			return nil, errors.New("amount required")
		}
		if c := e.pauseSideEffect; c != nil {
			c.Pause()
			defer c.Resume()
		}
		if _, err := x.Tx.ExecContext(ctx, d.Rebind("INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)"),
			x.Call.RequestID, args.Amount.String()); err != nil {
			return nil, err
		}
		e.writes.Add(1)
		return json.RawMessage(fmt.Sprintf(`{"written":%q,"generation":%d}`, args.Amount, x.Generation)), nil
	}))
	require.NoError(t, tools.Register("read", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		return json.RawMessage(`{"ok":true}`), nil
	}))
	e.tools = tools
	e.r, err = New(Config{DB: db, TTL: ttl, HeartbeatInterval: ttl / 4, Tools: tools, ReleaseTimeout: 10 * time.Second,
		Session: sessionConfigAutoCreate()})
	require.NoError(t, err)
	return e
}

func (e *env) ledgerRows(t testing.TB) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.Get(&n, "SELECT COUNT(*) FROM ledger_entry"))
	return n
}

func (e *env) status(t *testing.T, session, client string) (status string, held bool) {
	t.Helper()
	ex, err := e.r.find(context.Background(), Message{SessionKey: session, ClientRequestID: client})
	require.NoError(t, err)
	st, err := e.r.req.Inspect(context.Background(), e.db, ex.id)
	require.NoError(t, err)
	return ex.status, st.Held
}

func each(t *testing.T, fn func(t *testing.T, db *sqlx.DB)) { testdb.Each(t, fn) }

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func isConflict(err error) bool {
	return errors.Is(err, ErrInFlight) || errors.As(err, new(*session.BusyError))
}

// waitFor polls a condition that other goroutines make true, bounded.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30s")
		}
		timer := time.NewTimer(2 * time.Millisecond)
		<-timer.C
	}
}

// snapshot reads the lock columns of every row of the three tables.
func snapshot(t *testing.T, e *env) []string { return snapshotExcept(t, e, "") }

func snapshotExcept(t *testing.T, e *env, skipClient string) []string {
	t.Helper()
	var out []string
	rows, err := e.db.Queryx(e.d.Rebind("SELECT session_key, COALESCE(holder,''), COALESCE(token,''), generation FROM rowlease_session ORDER BY session_key"))
	require.NoError(t, err)
	for rows.Next() {
		var a, b, c string
		var g int64
		require.NoError(t, rows.Scan(&a, &b, &c, &g))
		out = append(out, fmt.Sprintf("session %s %s %s %d", a, b, c, g))
	}
	rows.Close()
	rows, err = e.db.Queryx(e.d.Rebind("SELECT client_request_id, status, COALESCE(holder,''), COALESCE(token,''), generation FROM rowlease_request WHERE client_request_id <> ? ORDER BY id"), skipClient)
	require.NoError(t, err)
	for rows.Next() {
		var a, b, c, d string
		var g int64
		require.NoError(t, rows.Scan(&a, &b, &c, &d, &g))
		out = append(out, fmt.Sprintf("request %s %s %s %s %d", a, b, c, d, g))
	}
	rows.Close()
	return out
}

// newRunner is another Runner (another process, as far as the database
// can tell) on e's database and tools, with cfg changed by mod. It is
// stopped when the test ends.
func (e *env) newRunner(t *testing.T, mod func(*Config)) *Runner {
	t.Helper()
	ttl := e.r.cfg.TTL
	cfg := Config{DB: e.db, TTL: ttl, HeartbeatInterval: ttl / 4, Tools: e.tools, ReleaseTimeout: 10 * time.Second,
		Session: sessionConfigAutoCreate(), Queue: QueueConfig{PollMin: 5 * time.Millisecond, PollMax: 50 * time.Millisecond}}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, r.Close(ctx))
	})
	return r
}

// recorder is an agent that records the order in which messages run and
// how many run at once.
type recorder struct {
	mu       sync.Mutex
	order    []string
	inflight atomic.Int64
	maxSeen  atomic.Int64
	runs     sync.Map // client request id → *atomic.Int64
}

func (rc *recorder) enter(run *Run) func() {
	n := rc.inflight.Add(1)
	for {
		m := rc.maxSeen.Load()
		if n <= m || rc.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	rc.mu.Lock()
	rc.order = append(rc.order, run.ClientRequestID())
	rc.mu.Unlock()
	c, _ := rc.runs.LoadOrStore(run.ClientRequestID(), new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	return func() { rc.inflight.Add(-1) }
}

func (rc *recorder) agent(ctx context.Context, run *Run) (Answer, error) {
	defer rc.enter(run)()
	return Answer{Reply: "ok " + run.Content()}, nil
}

func (rc *recorder) runsOf(id string) int64 {
	c, ok := rc.runs.Load(id)
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

func (rc *recorder) ordered() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.order...)
}

// blocker is an agent that holds its session until released.
type blocker struct {
	rc      *recorder
	started chan struct{}
	release chan struct{}
}

func newBlocker(rc *recorder) *blocker {
	return &blocker{rc: rc, started: make(chan struct{}), release: make(chan struct{})}
}

func (b *blocker) agent(ctx context.Context, run *Run) (Answer, error) {
	defer b.rc.enter(run)()
	close(b.started)
	select {
	case <-b.release:
	case <-ctx.Done():
		return Answer{}, context.Cause(ctx)
	}
	return Answer{Reply: "ok " + run.Content()}, nil
}

// rowsOf reads everything stored of one request: its row, its tool
// executions and its ledger entries.
func rowsOf(t *testing.T, e *env, sessionKey, client string) []string {
	t.Helper()
	var out []string
	var id string
	require.NoError(t, e.db.Get(&id, e.d.Rebind("SELECT id FROM rowlease_request WHERE session_key = ? AND client_request_id = ?"), sessionKey, client))
	for _, q := range []string{
		"SELECT status, COALESCE(holder, ''), COALESCE(token, ''), generation, COALESCE(reply, ''), COALESCE(interrupted_by, '') FROM rowlease_request WHERE id = ?",
		"SELECT tool_name, status, COALESCE(token, ''), generation, COALESCE(result, ''), COALESCE(holder, '') FROM rowlease_tool_execution WHERE request_id = ? ORDER BY id",
		"SELECT amount, '', '', 0, '', '' FROM ledger_entry WHERE request_id = ? ORDER BY amount",
	} {
		rows, err := e.db.Queryx(e.d.Rebind(q), id)
		require.NoError(t, err)
		for rows.Next() {
			var a, b, c, d, f string
			var g int64
			require.NoError(t, rows.Scan(&a, &b, &c, &g, &d, &f))
			out = append(out, fmt.Sprintf("%s|%s|%s|%d|%s|%s", a, b, c, g, d, f))
		}
		require.NoError(t, rows.Err())
		_ = rows.Close()
	}
	return out
}

func requestRows(t *testing.T, e *env) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.Get(&n, "SELECT COUNT(*) FROM rowlease_request"))
	return n
}

// sessionConfigAutoCreate is the session configuration of the tests'
// Runners: a session's first message creates its lock row.
func sessionConfigAutoCreate() session.Config { return session.Config{AutoCreate: true} }

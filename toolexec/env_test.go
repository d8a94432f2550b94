package toolexec_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// requestColumns are the lease columns of the shipped request table (as
// package request maps them).
var requestColumns = lease.Columns{
	Key: schema.ColID, Holder: schema.ColHolder, Token: schema.ColToken, ExpiresAt: schema.ColExpiresAt,
	Generation: schema.ColGeneration, State: schema.ColStatus, UpdatedAt: schema.ColUpdatedAt,
}

const ledgerDDL = "CREATE TABLE ledger (execution_id VARCHAR(36) NOT NULL, request_id VARCHAR(36) NOT NULL, amount VARCHAR(32) NOT NULL)"

// env is a fresh database with the lock tables, a ledger table, and the
// three levels' lock objects.
type env struct {
	db       *sqlx.DB
	d        lease.Dialect
	store    *toolexec.Store
	sessions *session.Locker
	req      *lease.Lease[string]
	calls    atomic.Int64 // invocations of the ledger side effect
}

func newEnv(t *testing.T, db *sqlx.DB) *env {
	t.Helper()
	ctx := bg(t)
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	require.NoError(t, schema.Apply(ctx, db, d))
	_, err = db.ExecContext(ctx, ledgerDDL)
	require.NoError(t, err)
	e := &env{db: db, d: d}
	e.store, err = toolexec.New(toolexec.Config{Dialect: d})
	require.NoError(t, err)
	e.sessions, err = session.New(session.Config{Dialect: d, AutoCreate: true})
	require.NoError(t, err)
	e.req, err = lease.New[string](d, engine.MustTable(schema.RequestTable, requestColumns), lease.Options{})
	require.NoError(t, err)
	return e
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// flow is one run of a request: it holds the session and the request.
type flow struct {
	sessionKey, requestID, holder string
	sess                          session.Grant
	req                           lease.Grant[string]
}

// newFlow creates a request row held by a new flow and takes the session
// for it, as request.Runner does for a new message.
func (e *env) newFlow(t *testing.T, sessionKey string, ttl time.Duration) *flow {
	t.Helper()
	ctx := bg(t)
	f := &flow{sessionKey: sessionKey, requestID: uuid.NewString(), holder: "flow-" + uuid.NewString()[:8]}
	var err error
	f.req, err = e.req.Create(ctx, e.db, f.requestID, f.holder, ttl, lease.CreateOptions{State: schema.StoredProcessing, Set: []lease.Assignment{
		lease.Set(schema.ColSessionKey, sessionKey), lease.Set(schema.ColClientRequestID, "client-"+f.requestID),
		lease.Set(schema.ColFingerprint, "fp"),
	}})
	require.NoError(t, err)
	f.sess, err = e.sessions.Acquire(ctx, e.db, sessionKey, f.requestID, ttl)
	require.NoError(t, err)
	return f
}

func (e *env) fences(f *flow) []lease.Fence {
	return []lease.Fence{e.sessions.Fence(f.sess), e.req.Fence("request", f.req)}
}

func (e *env) opts(f *flow, ttl time.Duration) toolexec.ExecOptions {
	return toolexec.ExecOptions{Holder: f.holder, TTL: ttl, Fences: e.fences(f)}
}

func (f *flow) call(args string) toolexec.Call {
	return toolexec.Call{SessionKey: f.sessionKey, RequestID: f.requestID, Tool: "create_transaction", Arguments: json.RawMessage(args)}
}

// ledger is the side effect: it writes one ledger row in x.Tx.
func (e *env) ledger(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
	e.calls.Add(1)
	var args struct {
		A json.Number `json:"a"`
	}
	if err := json.Unmarshal(x.Canonical, &args); err != nil {
		return nil, err
	}
	if _, err := x.Tx.ExecContext(ctx, e.d.Rebind("INSERT INTO ledger (execution_id, request_id, amount) VALUES (?, ?, ?)"),
		x.ExecutionID, x.Call.RequestID, args.A.String()); err != nil {
		return nil, err
	}
	return json.RawMessage(fmt.Sprintf(`{"amount":%q,"generation":%d}`, args.A, x.Generation)), nil
}

func (e *env) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.GetContext(bg(t), &n, "SELECT COUNT(*) FROM "+table))
	return n
}

func (e *env) ledgerRows(t *testing.T) int { return e.count(t, "ledger") }

// row reads a tool execution's lease snapshot and its result and error.
type toolRow struct {
	lease.Snapshot
	result, errText string
	resultNull      bool
	errNull         bool
}

func (e *env) toolRow(t *testing.T, id string) toolRow {
	t.Helper()
	ctx := bg(t)
	st, err := e.store.Lease().Inspect(ctx, e.db, id)
	require.NoError(t, err)
	r := toolRow{Snapshot: st}
	var res, msg *string
	require.NoError(t, e.db.QueryRowContext(ctx, e.d.Rebind("SELECT result, error FROM "+schema.ToolExecutionTable+" WHERE id = ?"), id).Scan(&res, &msg))
	r.resultNull, r.errNull = res == nil, msg == nil
	if res != nil {
		r.result = *res
	}
	if msg != nil {
		r.errText = *msg
	}
	return r
}

// onlyToolID returns the id of the single tool execution row.
func (e *env) onlyToolID(t *testing.T) string {
	t.Helper()
	var ids []string
	require.NoError(t, e.db.SelectContext(bg(t), &ids, "SELECT id FROM "+schema.ToolExecutionTable))
	require.Len(t, ids, 1)
	return ids[0]
}

// waitFor polls cond, bounded.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in 30s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const ttl = 10 * time.Second

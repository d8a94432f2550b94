package httpapi_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/internal/sqlitedsn"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// A tool on SQLite that writes through the pool instead of x.Tx: the
// message ends in a 500 without Retry-After that names the bug, not in a
// 503 that clients would resend forever.
func TestToolWriteOutsideTxOnSQLite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outside.db")
	db, err := sqlx.Open("sqlite", testdb.SQLiteDSN(path))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	// The tool's wrong pool: the same file, a short busy timeout.
	pool, err := sqlx.Open("sqlite", sqlitedsn.Modernc(path, sqlitedsn.Settings{BusyTimeout: 50 * time.Millisecond}))
	require.NoError(t, err)
	t.Cleanup(func() { pool.Close() })
	require.NoError(t, schema.Apply(ctx, db, lease.SQLite))
	_, err = db.ExecContext(ctx, "CREATE TABLE ledger (amount INTEGER NOT NULL)")
	require.NoError(t, err)

	tools := toolexec.NewRegistry()
	runs := 0
	require.NoError(t, tools.Register("book", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		runs++
		_, err := pool.ExecContext(ctx, "INSERT INTO ledger (amount) VALUES (35)") // should be x.Tx
		return json.RawMessage(`{"booked":35}`), err
	}))
	r, err := request.New(request.Config{DB: db, Dialect: lease.SQLite, TTL: 20 * time.Second, ReleaseTimeout: 3 * time.Second,
		Tools: tools, Session: session.Config{AutoCreate: true}})
	require.NoError(t, err)

	_, err = r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "m-1", Content: "lunch"},
		func(ctx context.Context, run *request.Run) (request.Answer, error) {
			_, err := run.CallTool(ctx, "book", json.RawMessage(`{"amount":35}`))
			return request.Answer{}, err
		})
	require.Error(t, err)
	assert.ErrorAs(t, err, new(*toolexec.OutsideTxError))
	assert.Contains(t, err.Error(), "write through x.Tx", "the logged error says what to fix")
	p := check(t, "a tool that wrote through the pool", err, want{500, httpapi.TypeToolWriteOutsideTx})
	assert.Zero(t, p.RetryAfter, "no Retry-After: a resend fails the same way")
	assert.Equal(t, 1, runs, "not run again")
	var n int
	require.NoError(t, db.GetContext(ctx, &n, "SELECT COUNT(*) FROM ledger"))
	assert.Zero(t, n, "nothing committed")
}

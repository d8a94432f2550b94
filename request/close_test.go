package request

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// TestRunnerCloseFreesServerStatements: with PrepareAlways on MySQL, the
// Runner's leases keep statements prepared on the server, on every
// connection they ran on. Close frees them all (the session, request and
// tool-execution leases), and the Runner keeps working, sending text.
func TestRunnerCloseFreesServerStatements(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, lease.MySQL)
	db.SetMaxOpenConns(1) // one session: its status counts every statement
	e := newEnvTB(t, db, 10*time.Second)
	r, err := New(Config{DB: db, TTL: 10 * time.Second, Tools: e.r.cfg.Tools, Session: sessionConfigAutoCreate(),
		Lease: lease.Options{Prepare: lease.PrepareAlways}})
	require.NoError(t, err)
	ctx := bg(t)
	live := func() int64 {
		var name string
		var prepared, closed int64
		require.NoError(t, db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &prepared))
		require.NoError(t, db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_close'").Scan(&name, &closed))
		return prepared - closed
	}
	handle := func(r *Runner, client string) {
		t.Helper()
		_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: client, Content: "x"},
			func(ctx context.Context, run *Run) (Answer, error) {
				if _, err := run.CallTool(ctx, "write", []byte(`{"amount":1}`)); err != nil {
					return Answer{}, err
				}
				return Answer{Reply: "ok"}, nil
			})
		require.NoError(t, err)
	}
	before := live()
	for i := range 3 {
		handle(r, fmt.Sprint("c", i))
	}
	kept := live() - before
	require.Positive(t, kept, "the leases kept statements on the server")
	require.NoError(t, r.Close(context.Background()))
	assert.Equal(t, before, live(), "Close freed all %d", kept)
	handle(r, "after-close")
	assert.Equal(t, before, live(), "a closed Runner sends text")
	require.NoError(t, r.Close(context.Background()), "Close twice")
}

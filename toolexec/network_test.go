package toolexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// closedPort returns the address of a local TCP port nobody listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// mailRefused is what a mail (or Redis, or gRPC) client gets from a server
// that is down: a *net.OpError, connection refused.
func mailRefused(t *testing.T) func(context.Context) error {
	addr := closedPort(t)
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
}

// mailHostUnknown is a *net.DNSError: the service's name does not resolve
// (here: its resolver is down).
func mailHostUnknown(t *testing.T) func(context.Context) error {
	addr := closedPort(t)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}
	return func(ctx context.Context) error {
		_, err := r.LookupHost(ctx, "smtp.example.com")
		return err
	}
}

// mailCutShort is io.ErrUnexpectedEOF: the service hangs up in the middle
// of its answer.
func mailCutShort(t *testing.T) func(context.Context) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("220 smtp"))
			c.Close()
		}
	}()
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", l.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = io.ReadFull(c, make([]byte, 64)) // the greeting line, cut short
		return err
	}
}

// Item: a side effect that also talks to another service (mail, Redis,
// gRPC) and fails on that service's network error — refused, a name that
// does not resolve, an answer cut short — fails as the tool: the call is
// marked error with the error's text, for the model, and nothing
// committed. Those errors look like a database's that went away, but the
// side effect's own transaction is fine, and only a broken transaction
// makes the error the database's (TestUnavailableInASideEffect).
func TestNetworkErrorsOfAnotherServiceInASideEffect(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		for i, tc := range []struct {
			name string
			send func(context.Context) error
			is   func(error) bool
		}{
			{"refused", mailRefused(t), func(err error) bool { var oe *net.OpError; return errors.As(err, &oe) }},
			{"name not resolved", mailHostUnknown(t), func(err error) bool { var de *net.DNSError; return errors.As(err, &de) }},
			{"answer cut short", mailCutShort(t), func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := e.newFlow(t, "s-mail-"+string(rune('a'+i)), ttl)
				var sendErr error
				_, err := e.store.Execute(ctx, db, f.call(`{"a":1}`), e.opts(f, ttl), func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
					if _, err := e.ledger(ctx, x); err != nil {
						return nil, err
					}
					sendErr = tc.send(ctx) // the receipt, by mail
					return nil, sendErr
				})
				require.Error(t, sendErr)
				require.True(t, lease.IsUnavailable(sendErr), "the kind of error that a database gone also gives: %v", sendErr)
				assert.True(t, tc.is(sendErr), "%T %v", sendErr, sendErr)

				require.ErrorAs(t, err, new(*toolexec.FailedError), "the tool's failure, for the model: %v", err)
				assert.ErrorIs(t, err, sendErr)
				assert.False(t, lease.IsUnavailable(err), "not the database's: %v", err)
				var id string
				require.NoError(t, db.GetContext(ctx, &id, e.d.Rebind("SELECT id FROM "+schema.ToolExecutionTable+" WHERE request_id = ?"), f.requestID))
				row := e.toolRow(t, id)
				assert.Equal(t, schema.StoredFailed, row.State, "marked error")
				assert.Contains(t, row.errText, sendErr.Error())
				var n int
				require.NoError(t, db.GetContext(ctx, &n, e.d.Rebind("SELECT COUNT(*) FROM ledger WHERE request_id = ?"), f.requestID))
				assert.Equal(t, 0, n, "nothing committed")
			})
		}

		if e.d == lease.SQLite {
			return // no server to end the transaction's connection
		}
		// The same network error, when the transaction's own connection
		// is gone too, is the database's.
		t.Run("the transaction's connection gone", func(t *testing.T) {
			f := e.newFlow(t, "s-mail-gone", ttl)
			_, err := e.store.Execute(ctx, db, f.call(`{"a":2}`), e.opts(f, ttl), func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
				if _, err := e.ledger(ctx, x); err != nil {
					return nil, err
				}
				endFromOutside(ctx, t, db, x, e.d)
				return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
			})
			require.Error(t, err)
			assert.True(t, lease.IsUnavailable(err), "%v", err)
			assert.NotErrorAs(t, err, new(*toolexec.FailedError))
			var id string
			require.NoError(t, db.GetContext(ctx, &id, e.d.Rebind("SELECT id FROM "+schema.ToolExecutionTable+" WHERE request_id = ?"), f.requestID))
			row := e.toolRow(t, id)
			assert.Equal(t, schema.StoredProcessing, row.State, "not marked error")
			assert.False(t, row.Held, "free for the resend")
		})
	})
}

// endFromOutside ends x.Tx's connection from another session of db, as
// a server restart or an administrator would.
func endFromOutside(ctx context.Context, t *testing.T, db *sqlx.DB, x toolexec.Exec, d lease.Dialect) {
	t.Helper()
	if d == lease.MySQL {
		var id int64
		require.NoError(t, x.Tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id))
		_, err := db.ExecContext(ctx, "KILL CONNECTION ?", id)
		require.NoError(t, err)
		return
	}
	var pid int64
	require.NoError(t, x.Tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	var ok bool
	require.NoError(t, db.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok))
	require.True(t, ok)
}

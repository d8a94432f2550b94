package request

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/toolexec"
)

func TestLossCancelsTheRun(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		ttl := 2 * time.Second
		e := newEnv(t, db, ttl)
		interval := ttl / 4
		ctx := bg(t)
		entered := make(chan *Run, 1)
		var cause error
		var lostAt time.Time
		cancelled := make(chan time.Time, 1)
		done := make(chan error, 1)
		go func() {
			_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"},
				func(ctx context.Context, run *Run) (Answer, error) {
					entered <- run
					<-ctx.Done()
					cancelled <- time.Now()
					cause = context.Cause(ctx)
					return Answer{}, ctx.Err()
				})
			done <- err
		}()
		run := <-entered
		// Someone frees the session behind the run's back and takes it.
		lostAt = time.Now()
		require.NoError(t, e.r.sessions.Release(ctx, db, run.sess))
		_, err := e.r.sessions.Acquire(ctx, db, "s", "intruder", time.Minute)
		require.NoError(t, err)
		at := <-cancelled
		err = <-done
		require.ErrorIs(t, err, ErrTakenOver)
		require.ErrorIs(t, cause, lease.ErrLost)
		assert.Less(t, at.Sub(lostAt), interval+interval/2, "cancelled within one heartbeat interval (plus slack)")
		st, held := e.status(t, "s", "c")
		assert.Equal(t, "processing", st)
		assert.False(t, held, "the run gave back the request it still held")
		ss, err := e.r.sessions.Inspect(ctx, db, "s")
		require.NoError(t, err)
		assert.Equal(t, "intruder", ss.Holder, "the new holder's session is untouched")
	})
}

func TestToolErrorsAndUnknownTool(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		out, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"},
			func(ctx context.Context, run *Run) (Answer, error) {
				_, err := run.CallTool(ctx, "nope", json.RawMessage(`{}`))
				assert.ErrorIs(t, err, toolexec.ErrUnknownTool)
				_, err = run.CallTool(ctx, "write", json.RawMessage(`[1]`))
				assert.ErrorAs(t, err, new(*toolexec.ArgumentsError))
				_, err = run.CallTool(ctx, "write", json.RawMessage(`{"amount":`))
				assert.ErrorAs(t, err, new(*toolexec.ArgumentsError))
				_, err = run.CallTool(ctx, "write", json.RawMessage(`{"note":"no amount"}`))
				var fe *toolexec.FailedError
				assert.ErrorAs(t, err, &fe)
				// Retried after an error: the same call runs again.
				_, err = run.CallTool(ctx, "write", json.RawMessage(`{"note":"no amount"}`))
				assert.ErrorAs(t, err, new(*toolexec.FailedError))
				res, err := run.CallTool(ctx, "read", json.RawMessage(`{"b":1,"a":{"y":2,"x":1}}`))
				require.NoError(t, err)
				// The same canonical arguments, asked again in the run: the
				// second identical call, an effect of its own.
				res2, err := run.CallTool(ctx, "read", json.RawMessage(`{"a":{"x":1,"y":2},"b":1.0}`))
				require.NoError(t, err)
				assert.False(t, res2.Reused)
				assert.NotEqual(t, res.ExecutionID, res2.ExecutionID)
				return Answer{Reply: "ok"}, nil
			})
		require.NoError(t, err)
		assert.Equal(t, "ok", out.Reply)
		assert.Equal(t, 0, e.ledgerRows(t))
		var n int
		require.NoError(t, db.Get(&n, "SELECT COUNT(*) FROM rowlease_tool_execution"))
		assert.Equal(t, 3, n, "unknown tools and invalid arguments write nothing; the failed call retried is one row")
	})
}

// TestDatabaseGoneInASideEffect: the database goes away inside a tool's
// side effect (the driver reports a broken connection). The agent is not
// shown a tool failure it could answer with a reply: the run ends with
// the database's error (lease.IsUnavailable: 503 in httpapi), nothing is
// booked, and the resend runs the call once and answers.
func TestDatabaseGoneInASideEffect(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		ctx := bg(t)
		var broken atomic.Bool
		broken.Store(true)
		require.NoError(t, e.tools.Register("book", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
			if _, err := x.Tx.ExecContext(ctx, e.d.Rebind("INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)"), x.Call.RequestID, "1"); err != nil {
				return nil, err
			}
			if broken.Load() {
				return nil, fmt.Errorf("insert: %w", driver.ErrBadConn)
			}
			return json.RawMessage(`{"ok":true}`), nil
		}))
		calls := 0
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			calls++
			_, err := run.CallTool(ctx, "book", json.RawMessage(`{"amount":1}`))
			if errors.As(err, new(*toolexec.FailedError)) {
				return Answer{Reply: "could not book it"}, nil // what an agent does with a tool's failure
			}
			if err != nil {
				return Answer{}, err
			}
			return Answer{Reply: "booked"}, nil
		}
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "book 1"}
		_, err := e.r.Handle(ctx, msg, agent)
		require.Error(t, err)
		assert.True(t, lease.IsUnavailable(err), "%v", err)
		assert.Equal(t, 0, e.ledgerRows(t))

		broken.Store(false)
		out, err := e.r.Handle(ctx, msg, agent)
		require.NoError(t, err)
		assert.Equal(t, "booked", out.Reply)
		assert.False(t, out.Replayed)
		assert.Equal(t, 2, calls)
		assert.Equal(t, 1, e.ledgerRows(t))
	})
}

// TestAnotherServiceDownInASideEffect: a tool books in its transaction and
// sends the receipt by mail; the mail server is down (connection refused,
// a *net.OpError, which a database gone also gives). The database is fine,
// so that is the tool's failure: the agent is shown it and answers, the
// booking rolled back, and the run ends with a reply, not an error (503
// in httpapi) that every resend would repeat.
func TestAnotherServiceDownInASideEffect(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		ctx := bg(t)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		mail := l.Addr().String()
		require.NoError(t, l.Close()) // the mail server is down
		require.NoError(t, e.tools.Register("book", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
			if _, err := x.Tx.ExecContext(ctx, e.d.Rebind("INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)"), x.Call.RequestID, "1"); err != nil {
				return nil, err
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", mail)
			if err != nil {
				return nil, fmt.Errorf("send the receipt: %w", err)
			}
			c.Close()
			return json.RawMessage(`{"ok":true}`), nil
		}))
		var shown error
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			_, err := run.CallTool(ctx, "book", json.RawMessage(`{"amount":1}`))
			if errors.As(err, new(*toolexec.FailedError)) {
				shown = err
				return Answer{Reply: "could not book it"}, nil // what an agent does with a tool's failure
			}
			if err != nil {
				return Answer{}, err
			}
			return Answer{Reply: "booked"}, nil
		}
		out, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "book 1"}, agent)
		require.NoError(t, err, "the run ends with the agent's reply")
		assert.Equal(t, "could not book it", out.Reply)
		require.Error(t, shown)
		assert.Contains(t, shown.Error(), "connection refused", "the model is shown what failed")
		assert.False(t, lease.IsUnavailable(shown), "not the database's: %v", shown)
		assert.Equal(t, 0, e.ledgerRows(t), "the booking rolled back with the failure")
	})
}

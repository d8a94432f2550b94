package engine_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"

	"github.com/rowlease/rowlease/internal/engine"
)

// askedTx is a transaction whose connection answers the check's
// statement with err (nil: it works), counting the statements.
type askedTx struct {
	engine.DB
	err   error
	asked int
}

func (tx *askedTx) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	tx.asked++
	return nil, tx.err
}

// foreign is a client's error marked as another service's.
type foreign struct{ err error }

func (e foreign) Error() string { return "mail: " + e.err.Error() }
func (e foreign) Unwrap() error { return e.err }
func (foreign) Foreign()        {}

// TestIsUnavailableIn: a driver's error of a broken connection is the
// database's without asking; a network error is the database's only when
// the transaction's connection does not answer either; an answer, even an
// error, says the connection works. (Real connections: toolexec's
// TestNetworkErrorsOfAnotherServiceInASideEffect.)
func TestIsUnavailableIn(t *testing.T) {
	ctx := context.Background()
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tc := range []struct {
		name  string
		err   error
		probe error // what the transaction's connection answers
		want  bool
		asked int
	}{
		{"a driver's broken connection", fmt.Errorf("insert: %w", driver.ErrBadConn), nil, true, 0},
		{"a server's shutdown", &mysql.MySQLError{Number: 1053}, nil, true, 0},
		{"a network error, the connection working", fmt.Errorf("send mail: %w", reset), nil, false, 1},
		{"a name not resolved, the connection working", &net.DNSError{Err: "no such host", Name: "smtp"}, nil, false, 1},
		{"an answer cut short, the connection working", io.ErrUnexpectedEOF, nil, false, 1},
		{"a network error, the connection answering with an error", reset, errors.New("current transaction is aborted"), false, 1},
		{"a network error, the connection gone", reset, driver.ErrBadConn, true, 1},
		{"a network error, the connection gone (pgx)", io.ErrUnexpectedEOF, errors.New("conn closed"), true, 1},
		{"another service's, marked", foreign{reset}, driver.ErrBadConn, false, 0},
		{"not unavailability", errors.New("boom"), driver.ErrBadConn, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx := &askedTx{err: tc.probe}
			assert.Equal(t, tc.want, engine.IsUnavailableIn(ctx, tx, tc.err))
			assert.Equal(t, tc.asked, tx.asked, "statements sent")
		})
	}
	t.Run("no answer before the deadline", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 0)
		defer cancel()
		<-dctx.Done()
		assert.True(t, engine.IsUnavailableIn(dctx, &askedTx{err: context.DeadlineExceeded}, reset))
	})
	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		assert.False(t, engine.IsUnavailableIn(cctx, &askedTx{err: context.Canceled}, reset), "the caller gave up: nothing decided")
	})
	t.Run("no transaction", func(t *testing.T) {
		assert.True(t, engine.IsUnavailableIn(ctx, nil, reset), "the kind decides")
	})
	assert.False(t, engine.IsUnavailable(foreign{reset}), "IsUnavailable does not look below a ForeignError")
	assert.True(t, engine.IsUnavailable(errors.Join(foreign{reset}, driver.ErrBadConn)), "but sees beside it")
}

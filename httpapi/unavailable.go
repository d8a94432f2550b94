package httpapi

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// ErrUnavailable marks an error as "the database cannot be reached" when
// nothing in the error itself says so (see Unavailable and Ping).
// IsUnavailable reports true for any error that matches it.
var ErrUnavailable = errors.New("httpapi: database unavailable")

type unavailableError struct{ err error }

func (e *unavailableError) Error() string        { return "database unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unavailable returns err marked so that it matches ErrUnavailable (and
// still unwraps to err); nil stays nil. Use it for what only the caller
// knows means an unreachable database, such as a health check that ran
// out of time.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

// Pinger is a database that can be pinged: *sql.DB, *sql.Conn, *sqlx.DB.
type Pinger interface {
	PingContext(ctx context.Context) error
}

// Ping pings db, waiting at most timeout (none when timeout ≤ 0). A
// failure is returned marked Unavailable, including a ping that ran out of
// time (context.DeadlineExceeded); if ctx itself is done, its error is
// returned unmarked: the caller gave up, the database did not fail.
func Ping(ctx context.Context, db Pinger, timeout time.Duration) error {
	pctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	err := db.PingContext(pctx)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	return Unavailable(err)
}

// IsUnavailable reports whether err says that the database cannot be
// reached or cannot serve for now, so that a retry later may succeed —
// HTTP 503 with Retry-After. It walks the whole error tree (Unwrap() error
// and Unwrap() []error) and is true when it finds:
//
//   - an error matching ErrUnavailable (Unavailable, Ping);
//   - driver.ErrBadConn, or go-sql-driver/mysql's ErrInvalidConn (a
//     connection that broke mid-statement; pgx's database/sql driver
//     reports some of those as driver.ErrBadConn);
//   - io.ErrUnexpectedEOF: the server closed the connection while the
//     client waited for its answer — what pgx returns, bare, for a
//     statement or a COMMIT when the server process dies (a primary
//     killed in a failover), and what it wraps when a server dies during
//     the connection's handshake;
//   - pgx's sentinels "conn closed" (pgconn.ErrConnClosed: a COMMIT or a
//     statement on a connection pgx closed when its socket went away) and
//     "read only connection" (pgconn.ErrReadOnlyConnection: with
//     target_session_attrs=read-write, every host is a standby, as
//     between a primary's death and a standby's promotion), matched by
//     their exact text since this package does not link pgx;
//   - a *net.OpError (refused, reset, broken pipe, unreachable, i/o
//     timeout; pgx wraps its dial errors, *pgconn.ConnectError, around
//     one) unless it is a cancellation by the caller's context, a
//     *net.DNSError, or one of the errnos ECONNREFUSED, ECONNRESET,
//     ECONNABORTED, EPIPE, ETIMEDOUT, EHOSTUNREACH, ENETUNREACH,
//     EHOSTDOWN, ENETDOWN;
//   - MySQL/MariaDB errors 1040 (too many connections), 1047
//     (ER_UNKNOWN_COM_ERROR: what a Galera node outside the primary
//     component — cut off from the others, or still joining — answers to
//     every statement, "WSREP has not yet prepared node for application
//     use"; nothing of the statement ran), 1053 (server shutdown in
//     progress), 1927 (connection killed);
//   - PostgreSQL SQLSTATE class 08 (connection exception), 25006 (a
//     write refused by a read-only server: a standby, or a primary
//     demoted in a failover, reached through an endpoint that still
//     names it), 53300 (too many connections), 57P01, 57P02 (the server
//     is shutting down or crashed), 57P03 (it cannot accept connections
//     yet);
//   - SQLite (errors with a Code() int method, as modernc.org/sqlite's)
//     SQLITE_BUSY (locked by another connection beyond the busy timeout),
//     SQLITE_IOERR and SQLITE_CANTOPEN (the file cannot be read or opened).
//
// PostgreSQL and SQLite errors are recognised through their methods
// (SQLState() string, Code() int), so this package links neither driver.
//
// An error in the middle of a COMMIT is among them: the transaction may or
// may not have committed, and 503 is still the answer, since the client
// resends with the same client request id and the library makes that
// safe (a committed tool call or reply is found and reused, one that did
// not commit runs once).
//
// It does not look below a *url.Error: that is an HTTP client's failure
// (a model's API, say), not the database's. An io.ErrUnexpectedEOF that
// an agent returns from a stream it read itself, outside a *url.Error (a
// response body cut short), is taken for the database's too: 503 rather
// than 500, and the client resends either way. A bare context.Canceled or
// context.DeadlineExceeded is not unavailability either: the caller's own
// deadline ran out, which says nothing about the database (Ping marks the
// timeout of a health check itself).
func IsUnavailable(err error) bool {
	return walk(err, unavailableNode)
}

// walk reports whether pred holds for err or any error it wraps, not
// descending below a *url.Error.
func walk(err error, pred func(error) bool) bool {
	for err != nil {
		if _, ok := err.(*url.Error); ok {
			return false
		}
		if pred(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walk(e, pred) {
					return true
				}
			}
			return false
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return false
		}
	}
	return false
}

// is reports whether err itself (not what it wraps) is target.
func is(err, target error) bool {
	if err == target {
		return true
	}
	x, ok := err.(interface{ Is(error) bool })
	return ok && x.Is(target)
}

// The texts of pgconn.ErrConnClosed and pgconn.ErrReadOnlyConnection
// (pinned by this package's tests against pgx's own values).
const (
	pgxConnClosed         = "conn closed"
	pgxReadOnlyConnection = "read only connection"
)

var unavailableErrnos = []syscall.Errno{
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE, syscall.ETIMEDOUT,
	syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EHOSTDOWN, syscall.ENETDOWN,
}

// unavailableNode checks one error of the tree.
func unavailableNode(err error) bool {
	if is(err, ErrUnavailable) || is(err, driver.ErrBadConn) || is(err, mysql.ErrInvalidConn) || is(err, io.ErrUnexpectedEOF) {
		return true
	}
	if _, wraps := err.(interface{ Unwrap() error }); !wraps {
		// pgx's sentinels, errors.New values: only a leaf with exactly
		// their text.
		switch err.Error() {
		case pgxConnClosed, pgxReadOnlyConnection:
			return true
		}
	}
	switch e := err.(type) {
	case *net.OpError:
		return !errors.Is(e.Err, context.Canceled) && !errors.Is(e.Err, context.DeadlineExceeded)
	case *net.DNSError:
		return true
	case syscall.Errno:
		for _, n := range unavailableErrnos {
			if e == n {
				return true
			}
		}
		return false
	case *mysql.MySQLError:
		return e.Number == 1040 || e.Number == 1047 || e.Number == 1053 || e.Number == 1927
	case interface{ SQLState() string }:
		s := e.SQLState()
		return strings.HasPrefix(s, "08") || s == "25006" || s == "53300" || s == "57P01" || s == "57P02" || s == "57P03"
	case interface{ Code() int }:
		switch e.Code() & 0xff {
		case 5, 10, 14: // SQLITE_BUSY, SQLITE_IOERR, SQLITE_CANTOPEN
			return true
		}
	}
	return false
}

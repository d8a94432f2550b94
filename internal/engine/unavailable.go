package engine

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"io"
	"net"
	"net/url"
	"syscall"
)

// IsUnavailable reports whether err says that the database cannot be
// reached or cannot serve for now — the connection broke, the server is
// down, shutting down, starting up, read-only or full — so that a retry
// later, on another connection, may succeed. It is not IsTransient: a
// transient error is an answer from a working database that rolled the
// transaction back; an unavailable one may have cut a statement or a
// COMMIT whose outcome is then unknown. It walks the whole error tree
// (Unwrap() error and Unwrap() []error) and is true when it finds:
//
//   - ErrPoolExhausted: no connection of the pool was free before a
//     deadline;
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
//     their exact text since lease does not link pgx;
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
// may not have committed. A caller that runs again what such an error
// ended must make that safe (the request and toolexec packages do: a
// committed tool call or reply is found and reused, one that did not
// commit runs once).
//
// It does not look below a *url.Error: that is an HTTP client's failure
// (a model's API, say), not the database's; nor below a ForeignError
// (toolexec's *FailedError and *UnknownOutcomeError: what a side effect or
// an external effect returned as its own failure, another service's).
// Other network errors — a *net.OpError, a *net.DNSError, an errno, an
// io.ErrUnexpectedEOF from a stream read (a response body cut short) — are
// taken for the database's: any client gives them, a mail, Redis or gRPC
// client as much as a database driver, and their kind alone cannot tell
// which; where the code that returned one ran on a transaction,
// IsUnavailableIn asks that transaction's connection. A bare
// context.Canceled or context.DeadlineExceeded is not unavailability
// either: the caller's own deadline ran out, which says nothing about the
// database. It errs on the side of "no": a way of failing it does not
// know is not unavailability.
//
// httpapi.IsUnavailable is this, plus its own marker for what only the
// caller knows (httpapi.Unavailable, httpapi.Ping): HTTP 503.
func IsUnavailable(err error) bool {
	return walkErrors(err, unavailableNode)
}

// IsUnavailableIn reports whether err, returned by code that ran
// statements on tx and may also have called other services (a side effect
// that sends mail, say), says that tx's database cannot be reached. It
// decides by where the error came from, not by its kind alone:
//
//   - an error that only a database driver or a pool gives
//     (ErrPoolExhausted, driver.ErrBadConn, mysql.ErrInvalidConn, pgx's
//     sentinels, the MySQL, PostgreSQL and SQLite codes IsUnavailable
//     lists) is the database's: true;
//   - a network error that any client gives (a *net.OpError, a
//     *net.DNSError, an errno, io.ErrUnexpectedEOF) is the database's only
//     if tx's own connection is broken too: it sends one statement,
//     SELECT 1, on tx, and is true if that fails as IsUnavailable says, or
//     does not answer before ctx's deadline. A connection that answers,
//     even with an error (a PostgreSQL transaction aborted by an earlier
//     statement), is working: the network error was another service's,
//     and the answer is false;
//   - anything else, a ForeignError included, is false, as IsUnavailable
//     says.
//
// With tx nil there is no connection to ask, and the kind decides, as in
// IsUnavailable.
//
// Bound ctx: a connection cut without a word (a peer gone from the
// network) answers nothing until the operating system gives up on it. A
// statement of tx cancelled by ctx may close tx's connection, and ctx
// cancelled (not past its deadline) decides nothing: false. Call it only
// with err non-nil, once the code is done with tx; tx is to be rolled
// back after it, whatever it says.
func IsUnavailableIn(ctx context.Context, tx DB, err error) bool {
	if walkErrors(err, driverUnavailableNode) {
		return true
	}
	if !walkErrors(err, networkUnavailableNode) {
		return false
	}
	if isNil(tx) {
		return true // no connection to ask: the kind decides
	}
	_, perr := tx.ExecContext(ctx, "SELECT 1")
	if perr == nil {
		return false
	}
	return IsUnavailable(perr) || errors.Is(ctx.Err(), context.DeadlineExceeded)
}

// ForeignError is implemented by an error that carries another service's
// failure, not the database's, so that IsUnavailable and IsUnavailableIn
// do not look below it, as they do not below a *url.Error: a refused
// connection or a cut stream inside is that service's. toolexec's
// *FailedError (a side effect's own failure) and *UnknownOutcomeError (an
// external effect's) implement it; an error of a client of your own may
// too. errors.Is and errors.As still see what it wraps.
type ForeignError interface {
	error
	// Foreign marks the error; it is never called.
	Foreign()
}

// walkErrors reports whether pred holds for err or any error it wraps, not
// descending below a *url.Error or a ForeignError.
func walkErrors(err error, pred func(error) bool) bool {
	for err != nil {
		if _, ok := err.(*url.Error); ok {
			return false
		}
		if _, ok := err.(ForeignError); ok {
			return false
		}
		if pred(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walkErrors(e, pred) {
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

var unavailableErrnos = []syscall.Errno{
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE, syscall.ETIMEDOUT,
	syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EHOSTDOWN, syscall.ENETDOWN,
}

// unavailableNode checks one error of the tree.
func unavailableNode(err error) bool {
	return driverUnavailableNode(err) || networkUnavailableNode(err)
}

// networkUnavailableNode checks one error of the tree for what any
// network client gives: a broken or refused connection, a name that does
// not resolve, an answer cut short.
func networkUnavailableNode(err error) bool {
	if is(err, io.ErrUnexpectedEOF) {
		return true
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
	}
	return false
}

// driverUnavailableNode checks one error of the tree for what only a
// database driver gives: driver.ErrBadConn, ErrPoolExhausted, or what the
// first dialect driver that recognises the error (MySQL's, PostgreSQL's,
// SQLite's: Driver.UnavailableNode) says of it.
func driverUnavailableNode(err error) bool {
	if is(err, sqldriver.ErrBadConn) || is(err, ErrPoolExhausted) {
		return true
	}
	for _, drv := range drivers {
		if drv == nil {
			continue
		}
		if u, ok := drv.UnavailableNode(err); ok {
			return u
		}
	}
	return false
}

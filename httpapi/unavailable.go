package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/rowlease/rowlease/lease"
)

// ErrUnavailable marks an error as "the database cannot be reached" when
// nothing in the error itself says so (see Unavailable and Ping).
// IsUnavailable reports true for any error that matches it. It marks
// lease's unavailable kind where only the caller knows it, since that
// kind has no sentinel of its own.
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

// IsUnavailable reports whether err says that the database cannot be
// reached or cannot serve for now, so that a retry later may succeed —
// HTTP 503 with Retry-After: an error matching ErrUnavailable (Unavailable,
// Ping), or one lease.IsUnavailable recognises (broken connections,
// network errors, servers shutting down, starting up, read-only or full,
// Galera nodes outside the primary component, SQLite files that cannot be
// opened or are locked; the list is in its documentation).
//
// An error in the middle of a COMMIT is among them: the transaction may or
// may not have committed, and 503 is still the answer, since the client
// resends with the same client request id and the library makes that
// safe (a committed tool call or reply is found and reused, one that did
// not commit runs once).
//
// Like lease.IsUnavailable, it does not look below a *url.Error: that is
// an HTTP client's failure (a model's API, say), not the database's; nor
// below a engine.ForeignError: a tool's failure (*toolexec.FailedError, a
// side effect's network error of another service that toolexec found was
// not its transaction's) or an external effect's unknown outcome
// (*toolexec.UnknownOutcomeError, 502 outcome-unknown even when a refused
// or reset connection left it unknown). An error beside one of those, in
// an errors.Join, is still looked at. An
// io.ErrUnexpectedEOF that an agent returns from a stream it read itself,
// outside a *url.Error (a response body cut short), is taken for the
// database's too: 503 rather than 500, and the client resends either way.
// A bare context.Canceled or context.DeadlineExceeded is not
// unavailability either: the caller's own deadline ran out, which says
// nothing about the database (Ping marks the timeout of a health check
// itself).
func IsUnavailable(err error) bool {
	return errors.Is(err, ErrUnavailable) || lease.IsUnavailable(err)
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

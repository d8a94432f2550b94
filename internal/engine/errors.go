package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/rowlease/rowlease/internal/driver"
)

// Sentinel errors. Test for them with errors.Is; the concrete errors returned
// carry more detail.
var (
	// ErrHeld means the lease is held by another holder and has not expired.
	// A web handler maps it to 409 Conflict. The concrete error is a
	// *ConflictError.
	ErrHeld = errors.New("lease: held by another holder")

	// ErrLost means the caller's token no longer matches the row: the lease
	// was taken over, released, or the row is in another state. The holder
	// must stop and write nothing more. The concrete error is a *LostError.
	ErrLost = errors.New("lease: lost")

	// ErrNotFound means no row has the key.
	ErrNotFound = errors.New("lease: not found")

	// ErrExists means a row with the key (or another unique key) already
	// exists. Driver duplicate-key errors of all three dialects translate to
	// it.
	ErrExists = errors.New("lease: already exists")

	// ErrState means the row exists but is in a state that the operation
	// does not accept (checked before who holds it). The concrete error is
	// a *StateError.
	ErrState = errors.New("lease: row in another state")

	// ErrInvalid means the input was rejected before any SQL was sent. The
	// concrete error is a *ValidationError.
	ErrInvalid = errors.New("lease: invalid input")

	// ErrNodeBehind is what RunFenced returns, on a multi-primary cluster
	// (Options.MultiPrimary), when a fence or the final mark found its grant
	// gone inside the transaction but a causal read outside it finds every
	// grant still held: the transaction ran on a node that had not yet applied
	// the holder's own earlier writes (inside a transaction, wsrep_sync_wait
	// does not wait). Nothing was committed; run the transaction again.
	// IsTransient reports it.
	ErrNodeBehind = errors.New("lease: the transaction's node had not applied the holder's own writes; nothing committed, run it again")

	// ErrPoolExhausted means that no connection could be had from a pool
	// before a deadline: every connection was in use (by the work that a
	// lease protects, say) and none was given back in time. Nothing was
	// sent to the database; the lease may still be held there, untaken.
	// The heartbeat reports it (a *heartbeat.LostError whose renewals
	// waited for a connection until the trust deadline passed); it is
	// also what a pool that cannot open a connection before the deadline
	// (a dial that hangs) looks like, which the wait alone cannot tell
	// apart. IsUnavailable reports it: the database cannot serve this
	// process for now, and a retry later may succeed. Size the pool as
	// README's "Sizing the pool" says.
	ErrPoolExhausted = errors.New("lease: no free connection in the pool")
)

// ConflictError reports a lease held by someone else. It matches ErrHeld.
type ConflictError struct {
	Key        string        // the row's key, as text
	Holder     string        // the current holder, as stored
	Generation int64         // the current holder's generation
	Remaining  time.Duration // time left before the lease expires, by the database clock
}

// Error describes the failure; it never contains a token.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("lease: held by another holder (key %q, holder %q, generation %d, %s left)",
		e.Key, e.Holder, e.Generation, e.Remaining.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *ConflictError) Is(target error) bool { return target == ErrHeld }

// LostError reports that a holder's token no longer matches. It matches
// ErrLost.
type LostError struct {
	Key string // the row's key, as text
	Op  string // the operation that found the loss: "renew", "release", "transition", "check"
}

// Error describes the failure; it never contains a token.
func (e *LostError) Error() string {
	return fmt.Sprintf("lease: lost (key %q, %s: token no longer matches: taken over, released or in another state)", e.Key, e.Op)
}

// Is makes errors.Is(err, ErrLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// StateError reports a row whose state the operation does not accept.
// It matches ErrState.
type StateError struct {
	Key   string
	State string   // the row's state
	Want  []string // the states the operation accepts
}

// Error describes the failure; it never contains a token.
func (e *StateError) Error() string {
	return fmt.Sprintf("lease: row in another state (key %q, state %q, want one of %q)", e.Key, e.State, e.Want)
}

// Is makes errors.Is(err, ErrState) true.
func (e *StateError) Is(target error) bool { return target == ErrState }

// ValidationError reports bad input, rejected before any SQL was sent. It
// matches ErrInvalid.
type ValidationError struct {
	// Package is the package that refused the input ("request",
	// "toolexec", …); "" means "lease". It prefixes the message.
	Package string
	Field   string
	Reason  string
}

// Error describes the failure, prefixed with the package that refused it
// ("request: invalid session key: …"); it never contains a token.
func (e *ValidationError) Error() string {
	pkg := e.Package
	if pkg == "" {
		pkg = "lease"
	}
	return fmt.Sprintf("%s: invalid %s: %s", pkg, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, reason string) error { return &ValidationError{Field: field, Reason: reason} }

// DuplicateKeyError wraps a driver's unique-key violation. It matches
// ErrExists and unwraps to the driver error.
type DuplicateKeyError struct {
	Key string
	Err error
}

// Error describes the failure; it never contains a token.
func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("lease: already exists (key %q): %v", e.Key, e.Err)
}

// Is makes errors.Is(err, ErrExists) true.
func (e *DuplicateKeyError) Is(target error) bool { return target == ErrExists }

// Unwrap returns the driver error.
func (e *DuplicateKeyError) Unwrap() error { return e.Err }

// IsDuplicateKey reports whether err is a unique-key violation from
// MySQL/MariaDB (error 1062), PostgreSQL (SQLSTATE 23505) or SQLite
// (SQLITE_CONSTRAINT_UNIQUE or _PRIMARYKEY). PostgreSQL and SQLite errors are
// recognised through the methods their error types expose (pgx, lib/pq,
// modernc.org/sqlite), or, for mattn/go-sqlite3, whose sqlite3.Error has
// Code and ExtendedCode fields but no method, through those fields; so this
// package links none of those drivers.
func IsDuplicateKey(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrExists) {
		return true
	}
	return classify(err) == driver.KindDuplicateKey
}

// IsRetryable reports whether err is a database's way of saying "this
// statement or transaction was rolled back to break a deadlock or a
// serialization conflict, or could not run for another writer; run it
// again": MySQL/MariaDB error 1213, PostgreSQL SQLSTATE 40001 or 40P01,
// SQLite SQLITE_BUSY and its extended codes (another connection held the
// lock past the busy timeout; from modernc.org/sqlite or
// mattn/go-sqlite3). Nothing of the failed statement took effect; inside a
// transaction, roll it back and run the whole transaction again.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	return classify(err) == driver.KindRetryable
}

// IsTransient reports whether err is a database error after which the
// transaction it ended took no effect and may be run again: a deadlock or
// serialization victim (IsRetryable), a MySQL lock wait timeout (1205),
// SQLite's busy or locked, or ErrNodeBehind. It is never a lease loss.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNodeBehind) {
		return true
	}
	k := classify(err)
	return k == driver.KindRetryable || k == driver.KindTransient
}

// classify asks each dialect's driver, MySQL's, PostgreSQL's, then
// SQLite's, whether err holds one of its errors, and returns what the
// first that does says it is; KindOther when none does.
func classify(err error) driver.ErrKind {
	_, k, _ := recognise(err)
	return k
}

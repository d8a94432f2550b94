package lease

import "github.com/rowlease/rowlease/internal/engine"

// The kinds of error. Test for them with errors.Is: every package of
// rowlease returns these kinds (session, toolexec and request with typed
// detail of their own that matches them), never a sentinel that must be
// matched beside them. Two more kinds are reported by functions, not
// sentinels: transient (IsTransient) and unavailable
// (IsUnavailable). A held lease carries a *ConflictError and a lost one a
// *LostError; the other kinds carry their detail in the error's text.
var (
	// ErrHeld: the lease is held by another holder and has not expired
	// (409 Conflict in a web handler). The concrete error is a
	// *ConflictError.
	ErrHeld = engine.ErrHeld
	// ErrLost: the caller's token no longer matches the row (taken over,
	// released, or the row is in another state). Stop and write nothing
	// more. The concrete error is a *LostError.
	ErrLost = engine.ErrLost
	// ErrNotFound: no row has the key.
	ErrNotFound = engine.ErrNotFound
	// ErrExists: a row with the key (or another unique key) already
	// exists; every dialect's duplicate-key error becomes it.
	ErrExists = engine.ErrExists
	// ErrState: the row is in a state the operation does not accept
	// (Inspect reads the state it is in).
	ErrState = engine.ErrState
	// ErrInvalid: the input was refused before any SQL was sent; nothing
	// was written. The error's text names the field and why.
	ErrInvalid = engine.ErrInvalid
	// ErrPoolExhausted: no connection could be had from the pool before a
	// deadline; nothing was sent. IsUnavailable reports it.
	ErrPoolExhausted = engine.ErrPoolExhausted
	// ErrNodeBehind: on a multi-primary cluster (Options.MultiPrimary), a
	// fenced transaction ran on a node that had not yet applied the
	// holder's own writes; nothing was committed, run it again.
	// IsTransient reports it.
	ErrNodeBehind = engine.ErrNodeBehind
)

// LostError is ErrLost's detail: Key (the row's key, as text) and Op (the
// operation that found the loss).
type LostError = engine.LostError

// ConflictError is ErrHeld's detail: Key, Holder, Generation and
// Remaining (time left before the holder's lease expires, by the
// database clock).
type ConflictError = engine.ConflictError

// IsTransient reports a database error after which the transaction it
// ended took no effect and may be run again: a deadlock or serialization
// victim (MySQL/MariaDB 1213, PostgreSQL 40001 or 40P01), a MySQL lock
// wait timeout, SQLite busy or locked, or ErrNodeBehind. The library's own
// single statements on a pool are already sent again. It is never a lease
// loss.
func IsTransient(err error) bool { return engine.IsTransient(err) }

// IsUnavailable reports a database that cannot be reached or cannot serve
// for now — the connection broke, the server is down, shutting down,
// starting up, read-only or full, ErrPoolExhausted — so that a retry
// later, on another connection, may succeed (503 in a web handler, not
// 500). Unlike a transient error, it may have cut a statement or a COMMIT
// whose outcome is then unknown.
func IsUnavailable(err error) bool { return engine.IsUnavailable(err) }

// IsDuplicateKey reports a unique-key violation from any dialect
// (MySQL/MariaDB 1062, PostgreSQL 23505, SQLite's UNIQUE or PRIMARY KEY
// constraint), for a statement of your own: a fenced side effect's INSERT
// refused by its unique key, say. The library's own such errors are
// already ErrExists.
func IsDuplicateKey(err error) bool { return engine.IsDuplicateKey(err) }

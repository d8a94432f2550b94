package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// BusyError is a session running another request: it matches
// lease.ErrHeld, and a web handler maps it to 409 Conflict ("session
// busy"). Err is the *lease.ConflictError that names the holder (the
// request id) and the time left, or, for a free session that messages
// queued before this one go first to (package request), why it is not
// taken.
type BusyError struct {
	Key string // the session key
	Err error
}

// Error names the session; it never contains a token.
func (e *BusyError) Error() string { return fmt.Sprintf("session %q busy: %v", e.Key, e.Err) }

// Is makes errors.Is(err, lease.ErrHeld) true.
func (e *BusyError) Is(target error) bool { return target == lease.ErrHeld }

// Unwrap returns Err.
func (e *BusyError) Unwrap() error { return e.Err }

// NotFoundError is a session without a lock row (and AutoCreate off): it
// matches lease.ErrNotFound, and a web handler maps it to 404 ("session
// not found"), not the 404 of another row.
type NotFoundError struct {
	Key string // the session key
}

// Error names the session.
func (e *NotFoundError) Error() string { return fmt.Sprintf("session %q not found", e.Key) }

// Is makes errors.Is(err, lease.ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == lease.ErrNotFound }

// Grant is a held session lock. Its Holder is the request id running in
// the session.
type Grant = lease.Grant[string]

// Columns returns the shipped table's lock columns: a copy, so that no
// package can change what New defaults to.
func Columns() lease.Columns {
	return lease.Columns{
		Key: schema.ColSessionKey, Holder: schema.ColHolder, Token: schema.ColToken,
		ExpiresAt: schema.ColExpiresAt, Generation: schema.ColGeneration, UpdatedAt: schema.ColUpdatedAt,
	}
}

// Config describes where the session lock lives.
type Config struct {
	Dialect lease.Dialect
	// Table is the lock table; empty means schema.SessionTable. To put the
	// lock on your own session table (the article's chat_session shape),
	// name it here and map its columns in Columns.
	Table string
	// Columns maps the lock columns; the zero value means the shipped
	// table's columns. Holder holds the current request id.
	Columns lease.Columns
	// AutoCreate inserts a missing lock row on Acquire (one extra statement,
	// only the first time). Leave it off for a user table whose rows are
	// created elsewhere. request.New turns it on for the shipped table
	// (Table empty) unless request.Config.RequireSession is set.
	AutoCreate bool
	// Lease are the lease options (safety margin, clock).
	Lease lease.Options
}

// Locker takes, touches and releases session locks. It is safe for
// concurrent use.
type Locker struct {
	l          *lease.Lease[string]
	autoCreate bool
}

// New validates cfg and returns a Locker.
func New(cfg Config) (*Locker, error) {
	name, cols := cfg.Table, cfg.Columns
	if name == "" {
		name = schema.SessionTable
	}
	if cols == (lease.Columns{}) {
		cols = Columns()
	}
	t, err := lease.NewTable(name, cols)
	if err != nil {
		return nil, err
	}
	l, err := lease.New[string](cfg.Dialect, t, cfg.Lease)
	if err != nil {
		return nil, err
	}
	return &Locker{l: l, autoCreate: cfg.AutoCreate}, nil
}

// Lease returns the underlying lease, for supervision and fencing.
func (s *Locker) Lease() *lease.Lease[string] { return s.l }

// Create inserts the session's lock row, free, unless it exists. One
// statement.
func (s *Locker) Create(ctx context.Context, db lease.DB, sessionKey string) error {
	return s.l.Ensure(ctx, db, sessionKey, lease.CreateOptions{})
}

// Acquire takes the session for requestID. It is one statement when the row
// exists. A session held by another request (live) gives a *BusyError
// (lease.ErrHeld). A missing row gives a *NotFoundError (lease.ErrNotFound)
// unless AutoCreate is set.
func (s *Locker) Acquire(ctx context.Context, db lease.DB, sessionKey, requestID string, ttl time.Duration) (Grant, error) {
	return s.acquire(ctx, db, sessionKey, requestID, ttl, lease.AcquireOptions{})
}

// AcquireExisting is Acquire without AutoCreate: a missing lock row gives
// a *NotFoundError whatever Config.AutoCreate says. It is for use inside a
// transaction, where inserting the row would keep the insert's locks until
// the commit (on MySQL, two first requests of one session could then
// deadlock on them); create the row with Create outside it.
func (s *Locker) AcquireExisting(ctx context.Context, db lease.DB, sessionKey, requestID string, ttl time.Duration) (Grant, error) {
	g, err := s.l.AcquireWith(ctx, db, sessionKey, requestID, ttl, lease.AcquireOptions{})
	return g, wrap(sessionKey, err)
}

// Reenter re-takes a session the caller already holds with g (same
// request, same token): the generation is kept and the expiry extended.
func (s *Locker) Reenter(ctx context.Context, db lease.DB, g Grant, ttl time.Duration) (Grant, error) {
	return s.acquire(ctx, db, g.Key, g.Holder, ttl, lease.AcquireOptions{Token: g.Token})
}

func (s *Locker) acquire(ctx context.Context, db lease.DB, key, holder string, ttl time.Duration, o lease.AcquireOptions) (Grant, error) {
	g, err := s.l.AcquireWith(ctx, db, key, holder, ttl, o)
	if errors.Is(err, lease.ErrNotFound) && s.autoCreate {
		if err = s.Create(ctx, db, key); err != nil {
			return Grant{}, err
		}
		g, err = s.l.AcquireWith(ctx, db, key, holder, ttl, o)
	}
	return g, wrap(key, err)
}

// wrap gives the lease's held and not-found errors the session's detail.
func wrap(key string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lease.ErrHeld):
		return &BusyError{Key: key, Err: err}
	case errors.Is(err, lease.ErrNotFound):
		return &NotFoundError{Key: key}
	}
	return err
}

// Touch renews the session lock (the article's heartbeat). One statement;
// a lost lock gives an error matching lease.ErrLost.
func (s *Locker) Touch(ctx context.Context, db lease.DB, g Grant, ttl time.Duration) (Grant, error) {
	return s.l.Renew(ctx, db, g, ttl)
}

// Release frees the session if g still holds it. One statement; when the
// lock was taken over it changes nothing and returns an error matching
// lease.ErrLost.
func (s *Locker) Release(ctx context.Context, db lease.DB, g Grant) error {
	return s.l.Release(ctx, db, g)
}

// Fence returns a check, for a side effect's transaction, that g still
// holds the session.
func (s *Locker) Fence(g Grant) lease.Fence { return s.l.Fence("session", g) }

// Inspect reads who holds the session and for how long.
func (s *Locker) Inspect(ctx context.Context, db lease.DB, sessionKey string) (lease.Snapshot, error) {
	st, err := s.l.Inspect(ctx, db, sessionKey)
	return st, wrap(sessionKey, err)
}

// Close closes the prepared statements the Locker's lease keeps (see
// lease.Lease.Close). It is safe to call while other goroutines use the
// Locker, and more than once; the Locker stays usable and sends text from
// then on. Close it before the pools it was used with.
func (s *Locker) Close() error { return s.l.Close() }

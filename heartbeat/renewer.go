package heartbeat

import (
	"context"
	"sync"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// Renewer is one supervised lease. Add calls Name and Deadline once; after
// that the supervisor calls Renew from its one goroutine only, never
// concurrently with itself.
type Renewer interface {
	// Name says which lease it is, for errors and logs: "session",
	// "request", "tool:create_transaction". It must not contain a token.
	Name() string
	// Deadline is the current local trust deadline (read on the monotonic
	// clock, as lease.Grant.Deadline is). The supervisor reads it once, when
	// the Renewer is added; later deadlines come from Renew.
	Deadline() time.Time
	// Renew renews the lease once and returns the new trust deadline. It
	// must return promptly once ctx is done. An error matching
	// lease.ErrLost means the lease is gone; one matching lease.ErrInvalid
	// means it can never be renewed; any other error is transient and is
	// retried until the trust deadline.
	Renew(ctx context.Context) (time.Time, error)
}

// LeaseRenewer is the Renewer for one lease grant, made by ForLease. It
// keeps its own copy of the grant, updated by each successful renewal: the
// caller's copy keeps the deadline it had, so read the renewed grant (its
// trust deadline) with Grant. It is safe for concurrent use.
//
// Through a engine.FlowDB that routes a renewal into the flow's open
// transaction (SQLite), the renewal counts only if that transaction
// commits: if it rolls back, the grant goes back to the last committed
// renewal's, and a Supervisor hears of it before the transaction releases
// the write lock (and loses the lease at once if that deadline has
// passed).
type LeaseRenewer[K lease.Key] struct {
	name string
	l    *lease.Lease[K]
	db   lease.DB

	mu        sync.Mutex
	g         lease.Grant[K]         // the latest renewal's, committed or not
	committed lease.Grant[K]         // the latest committed renewal's
	pending   map[any]lease.Grant[K] // the latest renewal inside each open transaction
	onRevert  func(deadline time.Time)
}

// ForLease adapts a lease grant to a Renewer named name: each renewal is
// l.Renew(ctx, db, g, g.TTL) on its own copy of g. Pass a *sql.DB (or
// another pool), not a transaction: renewals run outside the work's
// transactions.
//
// A lease is renewed for the TTL it was granted for (g.TTL). A grant
// whose TTL is not the Supervisor's Config.TTL is refused: Add loses the
// lease at once, ReasonInvalid, before any SQL.
//
// The caller's g is not updated by the renewals; Grant returns the
// renewed one.
func ForLease[K lease.Key](name string, l *lease.Lease[K], db lease.DB, g lease.Grant[K]) *LeaseRenewer[K] {
	return &LeaseRenewer[K]{name: name, l: l, db: db, g: g, committed: g}
}

// check reports a LeaseRenewer that cannot renew, before any SQL.
func (r *LeaseRenewer[K]) check() error {
	if r.l == nil {
		return &engine.ValidationError{Package: "heartbeat", Field: "lease", Reason: "nil"}
	}
	return nil
}

// leaseTTL is the TTL the lease is renewed for, or why it cannot be; Add
// checks it against Config.TTL.
func (r *LeaseRenewer[K]) leaseTTL() (time.Duration, error) { return r.Grant().TTL, r.check() }

// ttlRenewer is a Renewer that says which TTL it renews for.
type ttlRenewer interface {
	leaseTTL() (time.Duration, error)
}

// Name returns the name given to ForLease.
func (r *LeaseRenewer[K]) Name() string { return r.name }

// Deadline returns the trust deadline of the current grant.
func (r *LeaseRenewer[K]) Deadline() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.g.Deadline
}

// Grant returns the current grant: the one given to ForLease, with the
// deadline of the last successful renewal.
func (r *LeaseRenewer[K]) Grant() lease.Grant[K] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.g
}

// Renew renews the grant once with lease.Lease.Renew and keeps the renewed
// grant. It returns the new trust deadline, or the lease's error
// (*lease.LostError, matching lease.ErrLost, when the token is gone). On
// a ConnPool (a *sql.DB) it takes a connection for the statement
// explicitly: when none is free before ctx's deadline, the error matches
// lease.ErrPoolExhausted.
func (r *LeaseRenewer[K]) Renew(ctx context.Context) (time.Time, error) {
	g := r.Grant()
	if err := r.check(); err != nil {
		return g.Deadline, err
	}
	db := r.db
	var rt *engine.FlowRoute
	if f, ok := db.(*engine.FlowDB); ok && f != nil {
		rt = f.Route()
		defer rt.Done() // after renewed: the transaction cannot end unheard
		db = rt.DB()
	}
	if p, ok := db.(ConnPool); ok && !isNilDB(db) {
		// On the pool: take the connection explicitly, so that a wait for
		// one that outlasts the trust deadline says so.
		c, err := takeConn(ctx, p)
		if err != nil {
			return g.Deadline, err
		}
		defer c.Close()
		db = engine.OnConn(p, c)
	}
	ng, err := r.l.Renew(ctx, db, g, g.TTL)
	if err != nil {
		return g.Deadline, err
	}
	r.renewed(ng, rt)
	return ng.Deadline, nil
}

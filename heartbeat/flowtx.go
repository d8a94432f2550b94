package heartbeat

import (
	"context"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// renewed keeps ng, renewed through rt (nil: on a pool, committed).
func (r *LeaseRenewer[K]) renewed(ng lease.Grant[K], rt *engine.FlowRoute) {
	var tx any
	if rt != nil {
		tx = rt.Tx()
	}
	r.mu.Lock()
	r.g = ng
	if tx == nil {
		r.committed = ng
		r.mu.Unlock()
		return
	}
	_, seen := r.pending[tx]
	if r.pending == nil {
		r.pending = map[any]lease.Grant[K]{}
	}
	r.pending[tx] = ng
	r.mu.Unlock()
	if !seen {
		rt.OnEnd(func(committed bool) { r.txEnded(tx, committed) },
			func(ctx context.Context, db lease.DB) error { return r.redo(ctx, tx, db) })
	}
}

// txEnded applies the end of a transaction that renewals went into: they
// become committed, or the grant goes back to the last committed one (or
// a later renewal's inside another open transaction).
func (r *LeaseRenewer[K]) txEnded(tx any, committed bool) {
	r.mu.Lock()
	p, ok := r.pending[tx]
	delete(r.pending, tx)
	if !ok {
		r.mu.Unlock()
		return
	}
	if committed {
		if p.Deadline.After(r.committed.Deadline) {
			r.committed = p
		}
		r.mu.Unlock()
		return
	}
	prev := r.g.Deadline
	g := r.committed
	for _, q := range r.pending {
		if q.Deadline.After(g.Deadline) {
			g = q
		}
	}
	r.g = g
	hook := r.onRevert
	r.mu.Unlock()
	if hook != nil && g.Deadline.Before(prev) {
		hook(g.Deadline)
	}
}

// redo renews the grant again inside tx (on db), after tx rolled back to
// a savepoint that undid the renewals made in it.
func (r *LeaseRenewer[K]) redo(ctx context.Context, tx any, db lease.DB) error {
	g := r.Grant()
	ng, err := r.l.Renew(ctx, db, g, g.TTL)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if _, ok := r.pending[tx]; ok {
		r.pending[tx] = ng
	}
	if ng.Deadline.After(r.g.Deadline) {
		r.g = ng
	}
	r.mu.Unlock()
	return nil
}

// watchReverts sets the function told of a deadline moved back by a
// transaction that did not commit (the Supervisor's, set by Add).
func (r *LeaseRenewer[K]) watchReverts(fn func(deadline time.Time)) {
	r.mu.Lock()
	r.onRevert = fn
	r.mu.Unlock()
}

// revertible is a Renewer whose deadline can move back (*LeaseRenewer).
type revertible interface {
	watchReverts(fn func(deadline time.Time))
}

// revert moves e's trust deadline back to dl: renewals made inside a
// transaction of the flow were undone because it did not commit. It runs
// on the goroutine that ends the transaction, before the transaction
// releases SQLite's write lock: if dl has passed, the work context is
// cancelled here and now (ReasonDeadline, ErrRolledBack), so that no one
// can take the lease over while the work still runs. Otherwise e is
// renewed at once.
func (s *Supervisor) revert(e *entry, dl time.Time) {
	now := s.clock.Now()
	s.mu.Lock()
	if e.removed || !dl.Before(e.deadline) {
		s.mu.Unlock()
		return
	}
	e.deadline = dl
	if e.member == nil {
		e.due = now
	}
	m, work, cancel := e.member, s.work, s.cancel
	if now.Before(dl) || work == nil || work.Err() != nil {
		// Trust is left (renew at once), or the goroutine has not started
		// (it checks the deadline first) or has stopped.
		s.mu.Unlock()
		if m != nil && work != nil && work.Err() == nil {
			s.cfg.Batcher.hurry(m)
		}
		s.signal()
		return
	}
	le := &LostError{Lease: e.name, Reason: ReasonDeadline, Err: ErrRolledBack}
	if s.lost == nil {
		s.lost = le
	}
	s.lostEv = &Event{Kind: EventLost, Lease: e.name, Deadline: dl, Err: le}
	s.mu.Unlock()
	cancel(le)
	s.log.Error("heartbeat: lease lost, work cancelled", "lease", e.name, "reason", ReasonDeadline, "err", ErrRolledBack)
	s.signal()
}

package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rowlease/rowlease/lease"
)

// ErrStopped is the cause of the work context after Stop, and the error of
// a Start called after Stop.
var ErrStopped = errors.New("heartbeat: stopped")

// ErrStarted is the error of a second Start.
var ErrStarted = errors.New("heartbeat: already started")

// ErrRolledBack is the error in a *LostError (ReasonDeadline) when a
// lease's renewals made inside one of the flow's transactions (SQLite, see
// lease.FlowDB) were undone because that transaction did not commit, and
// the lease's last committed renewal was too old to trust any more.
var ErrRolledBack = errors.New("heartbeat: the renewals made inside the flow's transaction were rolled back with it")

// Reasons a lease is lost, as found in LostError.Reason.
const (
	// ReasonGone: a renewal reported lease.ErrLost — the token no longer
	// matches the row (taken over, released, or moved to another state).
	ReasonGone = "renewal found the token gone"
	// ReasonDeadline: the lease's local trust deadline passed before a
	// renewal succeeded (renewals kept failing, or one blocked).
	ReasonDeadline = "trust deadline passed with no successful renewal"
	// ReasonInvalid: a renewal was rejected as invalid input
	// (lease.ErrInvalid), or Add refused the lease (a LeaseRenewer whose
	// TTL disagrees). Retrying cannot help, so the lease cannot be kept.
	ReasonInvalid = "renewal rejected as invalid input"
)

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// wall converts t, read on the supervisor's clock, to the wall clock that
// context deadlines and timers go by.
func (s *Supervisor) wall(t time.Time) time.Time {
	if _, ok := s.clock.(systemClock); ok {
		return t
	}
	return time.Now().Add(t.Sub(s.clock.Now()))
}

// minRetry is the shortest wait before a failed renewal is retried.
const minRetry = 5 * time.Millisecond

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
// Through a lease.FlowDB that routes a renewal into the flow's open
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
		return &lease.ValidationError{Package: "heartbeat", Field: "lease", Reason: "nil"}
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
// (*lease.LostError, matching lease.ErrLost, when the token is gone).
func (r *LeaseRenewer[K]) Renew(ctx context.Context) (time.Time, error) {
	g := r.Grant()
	if err := r.check(); err != nil {
		return g.Deadline, err
	}
	db := r.db
	var rt *lease.FlowRoute
	if f, ok := db.(*lease.FlowDB); ok && f != nil {
		rt = f.Route()
		defer rt.Done() // after renewed: the transaction cannot end unheard
		db = rt.DB()
	}
	ng, err := r.l.Renew(ctx, db, g, g.TTL)
	if err != nil {
		return g.Deadline, err
	}
	r.renewed(ng, rt)
	return ng.Deadline, nil
}

// renewed keeps ng, renewed through rt (nil: on a pool, committed).
func (r *LeaseRenewer[K]) renewed(ng lease.Grant[K], rt *lease.FlowRoute) {
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

// EventKind says what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventRenewed: a renewal succeeded; Event.Deadline is the new deadline.
	EventRenewed EventKind = iota + 1
	// EventRetry: a renewal failed with a transient error (Event.Err) and
	// will be retried; Event.Attempt counts the failures in a row.
	EventRetry
	// EventLost: the lease was lost; Event.Err is the *LostError.
	EventLost
)

// String returns "renewed", "retry" or "lost".
func (k EventKind) String() string {
	switch k {
	case EventRenewed:
		return "renewed"
	case EventRetry:
		return "retry"
	case EventLost:
		return "lost"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is what Config.OnEvent receives.
type Event struct {
	Kind     EventKind
	Lease    string    // the Renewer's name
	Deadline time.Time // the lease's trust deadline after the event
	Attempt  int       // EventRetry: failed renewals in a row, from 1
	Err      error     // EventRetry: the renewal's error; EventLost: the *LostError
}

// Config configures a Supervisor.
type Config struct {
	// Interval is the time between renewals of a lease. Required: above
	// zero and at most TTL/3, so that two renewals can fail before the
	// trust deadline.
	Interval time.Duration
	// TTL is the TTL the leases are renewed for (lease.MinTTL to
	// lease.MaxTTL). Required; it bounds Interval. Add refuses a
	// LeaseRenewer whose TTL (its grant's) is another: the work context is
	// then cancelled at once with a *LostError, ReasonInvalid. (The
	// supervisor itself goes by the deadlines the Renewers report.)
	TTL time.Duration
	// Clock is the local clock the supervisor reads. It must be the clock
	// the supervised leases compute their trust deadlines with
	// (lease.Options.Clock), or the supervisor compares instants of two
	// clocks. Nil means time.Now, as for a lease. It must carry a
	// monotonic reading, as time.Now does. Timers still wait real
	// durations: the differences between this clock's readings.
	Clock lease.Clock
	// Logger receives renewals (Debug), retries (Warn) and losses (Error).
	// Nil means slog.Default(), as everywhere in rowlease. Tokens are never
	// logged.
	Logger *slog.Logger
	// OnEvent, when set, is called from the supervisor goroutine on every
	// renewal, retry and loss, for tests and metrics. It must return
	// quickly and must not call Stop.
	OnEvent func(Event)
	// Batcher, when set, renews the *LeaseRenewer leases (ForLease) of this
	// Supervisor together with those of every other Supervisor that uses
	// it, one statement per table per round (see Batcher); the Supervisor
	// renews other Renewers itself and keeps every other duty. Its
	// Interval must not exceed Interval. Stop and remove take the leases
	// back from the Batcher at once without waiting for a round in flight
	// (its result for them is ignored), as for a renewal of their own.
	Batcher *Batcher
}

// Validate reports a Config that New would reject, as a
// *lease.ValidationError.
func (c Config) Validate() error {
	if err := lease.ValidateTTL(c.TTL); err != nil {
		return err
	}
	switch {
	case c.Interval <= 0:
		return &lease.ValidationError{Package: "heartbeat", Field: "interval", Reason: "must be positive"}
	case c.Interval > c.TTL/3:
		return &lease.ValidationError{Package: "heartbeat", Field: "interval", Reason: "above TTL/3 (" + (c.TTL / 3).String() + ")"}
	case c.Batcher != nil && c.Batcher.Interval() > c.Interval:
		return &lease.ValidationError{Package: "heartbeat", Field: "batcher", Reason: "its interval " + c.Batcher.Interval().String() + " is above the supervisor's " + c.Interval.String()}
	}
	return nil
}

// LostError reports a lost lease. It is the cause of the work context and
// what Lost returns. It matches lease.ErrLost and unwraps to the renewal's
// error.
type LostError struct {
	Lease  string // the Renewer's name
	Reason string // ReasonGone, ReasonDeadline or ReasonInvalid
	// Err is the renewal's error: the *lease.LostError for ReasonGone, the
	// *lease.ValidationError for ReasonInvalid, the last failed renewal's
	// error (nil if none was tried) for ReasonDeadline.
	Err error
}

// Error describes the failure; it never contains a token.
func (e *LostError) Error() string {
	s := fmt.Sprintf("heartbeat: lease %q lost: %s", e.Lease, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes errors.Is(err, lease.ErrLost) true.
func (e *LostError) Is(target error) bool { return target == lease.ErrLost }

// Unwrap returns the renewal's error.
func (e *LostError) Unwrap() error { return e.Err }

// entry is one added Renewer. Its fields are guarded by Supervisor.mu.
type entry struct {
	r        Renewer
	name     string
	removed  bool
	deadline time.Time // trust deadline
	due      time.Time // next renewal
	failures int       // failed renewals in a row
	lastErr  error     // the last failed renewal's error
	invalid  error     // why Add refused it (a *lease.ValidationError), or nil
	member   *member   // kept by Config.Batcher, which renews it; nil: renewed here
	result   *result   // the Batcher's latest result, not yet applied
}

// Supervisor keeps every lease of one flow alive and cancels the flow's work
// context as soon as one is lost. Make it with New.
type Supervisor struct {
	cfg   Config
	log   *slog.Logger
	clock lease.Clock

	mu      sync.Mutex
	entries []*entry // in the order added
	started bool
	stopped bool
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed when the goroutine returns
	lost    error

	changed chan struct{} // capacity 1: an entry was added or removed, or a batched result came
	batchOn bool          // the goroutine runs: batched entries are with the Batcher
	work    context.Context
	lostEv  *Event // a loss found off the goroutine (revert), for OnEvent
}

// New validates cfg and returns a Supervisor that is not yet running. Bad
// input gives a *lease.ValidationError, matching lease.ErrInvalid.
func New(cfg Config) (*Supervisor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	clock := cfg.Clock
	if clock == nil {
		clock = systemClock{}
	}
	return &Supervisor{cfg: cfg, log: log, clock: clock, changed: make(chan struct{}, 1)}, nil
}

// Add supervises r from now on, after the leases already added (renewals
// run in the order added: session, request, tool). It is safe before or
// after Start and from any goroutine. Its first renewal is one Interval
// away, or sooner when less than two Intervals of trust are left.
//
// remove stops renewing r and stops checking its deadline; a renewal in
// flight is let finish and its result ignored. Call remove before releasing
// or transitioning the lease, or the next renewal finds the token gone and
// cancels the whole flow. remove is idempotent and safe from any goroutine.
//
// A LeaseRenewer that cannot renew — its ttl is not its grant's TTL, or
// that TTL is not Config.TTL — is refused before any SQL: the supervisor
// loses it at once (at Start, if added before), reason ReasonInvalid.
//
// Add panics if r is nil.
func (s *Supervisor) Add(r Renewer) (remove func()) {
	if r == nil {
		panic("heartbeat: Add(nil)")
	}
	now := s.clock.Now()
	e := &entry{r: r, name: r.Name(), deadline: r.Deadline()}
	if tr, ok := r.(ttlRenewer); ok {
		ttl, err := tr.leaseTTL()
		if err == nil && ttl != s.cfg.TTL {
			err = &lease.ValidationError{Package: "heartbeat", Field: "ttl",
				Reason: fmt.Sprintf("lease %q is renewed for %v, but the supervisor's TTL is %v", e.name, ttl, s.cfg.TTL)}
		}
		e.invalid = err
	}
	e.due = now.Add(s.nextRenewal(e.deadline.Sub(now)))
	if br, ok := r.(batchable); ok && s.cfg.Batcher != nil && e.invalid == nil {
		e.member = &member{sup: s, e: e, r: br}
	}
	if rv, ok := r.(revertible); ok {
		rv.watchReverts(func(dl time.Time) { s.revert(e, dl) })
	}
	// The Batcher is told under s.mu (it never takes s.mu while holding
	// its own lock), so that a lease added while the goroutine exits is
	// either taken back by batching(false) or never handed over.
	s.mu.Lock()
	s.entries = append(s.entries, e)
	if e.member != nil && s.batchOn {
		s.cfg.Batcher.add(e.member)
	}
	s.mu.Unlock()
	s.signal()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if e.removed {
			return
		}
		e.removed = true
		for i, x := range s.entries {
			if x == e {
				s.entries = append(s.entries[:i:i], s.entries[i+1:]...)
				break
			}
		}
		if e.member != nil {
			s.cfg.Batcher.remove(e.member)
		}
	}
}

// batching hands the batched entries to the Batcher when the goroutine
// starts (on is true) and takes them back when it returns.
func (s *Supervisor) batching(on bool) {
	if s.cfg.Batcher == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batchOn = on
	for _, e := range s.entries {
		if e.member == nil {
			continue
		}
		if on {
			s.cfg.Batcher.add(e.member)
		} else {
			s.cfg.Batcher.remove(e.member)
		}
	}
}

// deliver hands the Batcher's result for e to the supervisor goroutine.
func (s *Supervisor) deliver(e *entry, r result) {
	s.mu.Lock()
	if !e.removed {
		e.result = &r
	}
	s.mu.Unlock()
	s.signal()
}

// applyResults applies the Batcher's results, in the order the entries
// were added. It reports false when the goroutine must return.
func (s *Supervisor) applyResults(ctx context.Context) bool {
	for {
		s.mu.Lock()
		var e *entry
		for _, x := range s.entries {
			if x.result != nil {
				e = x
				break
			}
		}
		if e == nil {
			s.mu.Unlock()
			return true
		}
		r := *e.result
		e.result = nil
		prev := e.deadline
		s.mu.Unlock()
		if !s.settle(ctx, e, prev, r.at, r.deadline, r.err) {
			return false
		}
	}
}

func (s *Supervisor) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// nextRenewal is the wait after a success: one Interval, or half the trust
// left if that is sooner (a lease with a large safety margin).
func (s *Supervisor) nextRenewal(left time.Duration) time.Duration {
	return max(min(s.cfg.Interval, left/2), 0)
}

// retryDelay is the wait after a transient failure: a quarter of the trust
// left, at most one Interval, at least a few milliseconds.
func (s *Supervisor) retryDelay(left time.Duration) time.Duration {
	d := min(s.cfg.Interval, left/4)
	if floor := min(minRetry, s.cfg.Interval); d < floor {
		d = floor
	}
	return d
}

// Start starts the supervisor goroutine and returns the work context:
// context.WithCancelCause(parent), cancelled with a *LostError as soon as a
// lease is lost, and with ErrStopped by Stop. A second Start returns
// ErrStarted; a Start after Stop returns ErrStopped.
func (s *Supervisor) Start(parent context.Context) (context.Context, error) {
	if parent == nil {
		return nil, &lease.ValidationError{Package: "heartbeat", Field: "parent context", Reason: "nil"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return nil, ErrStarted
	}
	if s.stopped {
		return nil, ErrStopped
	}
	work, cancel := context.WithCancelCause(parent)
	s.started, s.cancel, s.done, s.work = true, cancel, make(chan struct{}), work
	go s.run(work)
	return work, nil
}

// Stop stops the supervisor goroutine and waits for it to return; a
// renewal in flight is cancelled. It then cancels the work context with
// cause ErrStopped, unless it was already cancelled (by a loss, or by the
// parent). It never cancels the parent. Stop is safe to call twice, from
// several goroutines, and without Start. It must not be called from
// OnEvent.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	s.stopped = true
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel(ErrStopped)
	<-done
}

// Lost returns nil, or the *LostError of the lease that was lost. It is set
// before the work context is cancelled, so once the work context is done
// with a *LostError cause, Lost returns it. (If Stop or the parent cancels
// the work context at the very moment a loss is found, Lost may report the
// loss while the cause is theirs.)
func (s *Supervisor) Lost() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// run is the supervisor goroutine. ctx is the work context: it is done on a
// loss, on Stop, and when the parent is done.
func (s *Supervisor) run(ctx context.Context) {
	defer close(s.done)
	defer s.flushLost()
	s.log.Debug("heartbeat: started", "interval", s.cfg.Interval, "ttl", s.cfg.TTL)
	defer s.log.Debug("heartbeat: stopped")
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	s.batching(true)
	defer s.batching(false)
	for {
		if ctx.Err() != nil || s.refused(ctx) || !s.applyResults(ctx) || s.expired(ctx, s.clock.Now()) {
			return
		}
		for _, e := range s.dueEntries(s.clock.Now()) {
			if ctx.Err() != nil || s.expired(ctx, s.clock.Now()) {
				return
			}
			if !s.renew(ctx, e) {
				return
			}
		}
		if ctx.Err() != nil || s.expired(ctx, s.clock.Now()) {
			return
		}
		if wake, ok := s.nextWake(); ok {
			// A real wait, measured on the supervisor's clock.
			timer.Reset(wake.Sub(s.clock.Now()))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		case <-timer.C:
		}
	}
}

// dueEntries returns, in the order added, the entries due by now, and with
// them those due within a quarter Interval, so that leases added together
// are renewed together, in order.
func (s *Supervisor) dueEntries(now time.Time) []*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var some bool
	for _, e := range s.entries {
		some = some || (e.member == nil && !now.Before(e.due))
	}
	if !some {
		return nil
	}
	horizon := now.Add(s.cfg.Interval / 4)
	var due []*entry
	for _, e := range s.entries {
		if e.member == nil && e.due.Before(horizon) {
			due = append(due, e)
		}
	}
	return due
}

// nextWake is the earliest due renewal or trust deadline.
func (s *Supervisor) nextWake() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var wake time.Time
	for i, e := range s.entries {
		t := e.due
		if e.member != nil || e.deadline.Before(t) {
			t = e.deadline // a batched entry: only its deadline
		}
		if i == 0 || t.Before(wake) {
			wake = t
		}
	}
	return wake, len(s.entries) > 0
}

// refused records a loss and reports true when an entry was refused by
// Add.
func (s *Supervisor) refused(ctx context.Context) bool {
	s.mu.Lock()
	var bad *entry
	for _, e := range s.entries {
		if e.invalid != nil {
			bad = e
			break
		}
	}
	s.mu.Unlock()
	if bad == nil {
		return false
	}
	s.lose(ctx, bad, ReasonInvalid, bad.invalid)
	return true
}

// earliestDeadline is the earliest trust deadline of the entries.
func (s *Supervisor) earliestDeadline() (*entry, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first *entry
	for _, e := range s.entries {
		if first == nil || e.deadline.Before(first.deadline) {
			first = e
		}
	}
	if first == nil {
		return nil, time.Time{}
	}
	return first, first.deadline
}

// expired records a loss and reports true when the earliest trust deadline
// is not after now.
func (s *Supervisor) expired(ctx context.Context, now time.Time) bool {
	e, dl := s.earliestDeadline()
	if e == nil || now.Before(dl) {
		return false
	}
	s.mu.Lock()
	err := e.lastErr
	s.mu.Unlock()
	s.lose(ctx, e, ReasonDeadline, err)
	return true
}

// renew renews e once. It reports false when the goroutine must return: the
// lease was lost, or ctx is done.
func (s *Supervisor) renew(ctx context.Context, e *entry) bool {
	s.mu.Lock()
	removed, prev, invalid := e.removed, e.deadline, e.invalid
	s.mu.Unlock()
	if removed {
		return true
	}
	if invalid != nil { // added since the loop last looked: never renewed
		s.lose(ctx, e, ReasonInvalid, invalid)
		return false
	}
	// The renewal may not outlive any lease's trust deadline: its own,
	// and — when renewing is slow — another's that comes first.
	_, dl := s.earliestDeadline()
	if dl.IsZero() || prev.Before(dl) {
		dl = prev
	}
	rctx, cancel := context.WithDeadline(ctx, s.wall(dl))
	nd, err := e.r.Renew(rctx)
	cancel()
	return s.settle(ctx, e, prev, s.clock.Now(), nd, err)
}

// settle applies the result of a renewal of e that returned at now, when
// its trust deadline was prev: the new deadline nd, or err. It reports
// false when the goroutine must return.
func (s *Supervisor) settle(ctx context.Context, e *entry, prev, now, nd time.Time, err error) bool {
	if ctx.Err() != nil {
		return false // stopped, or the parent is done: not a loss
	}
	s.mu.Lock()
	if e.removed {
		s.mu.Unlock()
		return true
	}
	if _, ok := e.r.(revertible); ok && err == nil {
		// A transaction that the renewal went into may have ended without
		// committing since it returned: the renewer's deadline is then the
		// earlier one.
		if d := e.r.Deadline(); d.Before(nd) {
			nd = d
		}
	}
	switch {
	case err == nil && now.Before(prev):
		e.deadline, e.due = nd, now.Add(s.nextRenewal(nd.Sub(now)))
		e.failures, e.lastErr = 0, nil
		s.mu.Unlock()
		s.log.Debug("heartbeat: renewed", "lease", e.name, "trust_left", nd.Sub(now))
		s.event(Event{Kind: EventRenewed, Lease: e.name, Deadline: nd})
		return true
	case err == nil:
		// The renewal went through, but only after the trust deadline: the
		// work ran untrusted in between.
		err = e.lastErr
		s.mu.Unlock()
		s.lose(ctx, e, ReasonDeadline, err)
		return false
	case errors.Is(err, lease.ErrLost):
		s.mu.Unlock()
		s.lose(ctx, e, ReasonGone, err)
		return false
	case errors.Is(err, lease.ErrInvalid):
		s.mu.Unlock()
		s.lose(ctx, e, ReasonInvalid, err)
		return false
	}
	e.failures++
	e.lastErr = err
	left := prev.Sub(now)
	wait := s.retryDelay(left)
	if e.member == nil {
		e.due = now.Add(wait)
	}
	n := e.failures
	s.mu.Unlock()
	s.log.Warn("heartbeat: renewal failed, retrying", "lease", e.name, "attempt", n,
		"err", err, "retry_in", wait, "trust_left", left)
	s.event(Event{Kind: EventRetry, Lease: e.name, Deadline: prev, Attempt: n, Err: err})
	return true
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

// flushLost hands a loss found by revert to OnEvent, on the goroutine.
func (s *Supervisor) flushLost() {
	s.mu.Lock()
	ev := s.lostEv
	s.lostEv = nil
	s.mu.Unlock()
	if ev != nil {
		s.event(*ev)
	}
}

// lose records the loss of e and cancels the work context, unless that is
// already done (Stop, or the parent).
func (s *Supervisor) lose(ctx context.Context, e *entry, reason string, err error) {
	if ctx.Err() != nil {
		return
	}
	le := &LostError{Lease: e.name, Reason: reason, Err: err}
	s.mu.Lock()
	if s.lost == nil {
		s.lost = le
	}
	cancel, dl := s.cancel, e.deadline
	s.mu.Unlock()
	cancel(le)
	s.log.Error("heartbeat: lease lost, work cancelled", "lease", e.name, "reason", reason, "err", err)
	s.event(Event{Kind: EventLost, Lease: e.name, Deadline: dl, Err: le})
}

func (s *Supervisor) event(ev Event) {
	if s.cfg.OnEvent != nil {
		s.cfg.OnEvent(ev)
	}
}

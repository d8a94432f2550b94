package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// ErrStopped is the cause of the work context after Stop, and the error of
// a Start called after Stop. It is none of lease's kinds: the caller's
// own stop, not a lease lost.
var ErrStopped = errors.New("heartbeat: stopped")

// ErrStarted is the error of a second Start: a misuse of the Supervisor,
// none of lease's kinds.
var ErrStarted = errors.New("heartbeat: already started")

// entry is one added Renewer. Its fields are guarded by Supervisor.mu.
type entry struct {
	r        Renewer
	name     string
	removed  bool
	deadline time.Time // trust deadline
	due      time.Time // next renewal
	failures int       // failed renewals in a row
	lastErr  error     // the last failed renewal's error
	invalid  error     // why Add refused it (a *engine.ValidationError), or nil
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
// input gives an error matching lease.ErrInvalid.
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
			err = &engine.ValidationError{Package: "heartbeat", Field: "ttl",
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
		e := s.firstEntry(func(e *entry) bool { return e.result != nil })
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

// firstEntry returns the first entry, in the order added, that has the
// property, or nil. s.mu must be held.
func (s *Supervisor) firstEntry(has func(*entry) bool) *entry {
	for _, e := range s.entries {
		if has(e) {
			return e
		}
	}
	return nil
}

func (s *Supervisor) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Start starts the supervisor goroutine and returns the work context:
// context.WithCancelCause(parent), cancelled with a *LostError as soon as a
// lease is lost, and with ErrStopped by Stop. A second Start returns
// ErrStarted; a Start after Stop returns ErrStopped.
func (s *Supervisor) Start(parent context.Context) (context.Context, error) {
	if parent == nil {
		return nil, &engine.ValidationError{Package: "heartbeat", Field: "parent context", Reason: "nil"}
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

package heartbeat

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/rowlease/rowlease/lease"
)

// run is the supervisor goroutine. ctx is the work context: it is done on a
// loss, on Stop, and when the parent is done.
func (s *Supervisor) run(ctx context.Context) {
	defer close(s.done)
	defer s.flushLost()
	if s.debug(ctx) { // the arguments are boxed before Debug looks at the level
		s.log.Debug("heartbeat: started", "interval", s.cfg.Interval, "ttl", s.cfg.TTL)
		defer s.log.Debug("heartbeat: stopped")
	}
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

// debug reports whether the logger records Debug messages.
func (s *Supervisor) debug(ctx context.Context) bool { return s.log.Enabled(ctx, slog.LevelDebug) }

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
	bad := s.firstEntry(func(e *entry) bool { return e.invalid != nil })
	s.mu.Unlock()
	if bad == nil {
		return false
	}
	s.lose(ctx, bad, ReasonInvalid, bad.invalid)
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
	rctx, cancel := context.WithDeadline(ctx, wallTime(s.clock, dl))
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
		if s.debug(ctx) {
			s.log.Debug("heartbeat: renewed", "lease", e.name, "trust_left", nd.Sub(now))
		}
		s.event(Event{Kind: EventRenewed, Lease: e.name, Deadline: nd})
		return true
	case err == nil:
		// The renewal went through, but only after the trust deadline: the
		// work ran untrusted in between.
		err = e.lastErr
		s.mu.Unlock()
		s.lose(ctx, e, deadlineReason(err), err)
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

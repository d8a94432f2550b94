package heartbeat

import (
	"context"
	"errors"
	"time"

	"github.com/rowlease/rowlease/lease"
)

// systemClock is time.Now: the clock of a Config or a BatchConfig that
// names none.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// wallTime converts t, read on clock (a Supervisor's or a Batcher's), to
// the wall clock that context deadlines and timers go by.
func wallTime(clock lease.Clock, t time.Time) time.Time {
	if _, ok := clock.(systemClock); ok {
		return t
	}
	return time.Now().Add(t.Sub(clock.Now()))
}

// minRetry is the shortest wait before a failed renewal is retried.
const minRetry = 5 * time.Millisecond

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
	err, batched := e.lastErr, e.member != nil
	s.mu.Unlock()
	if batched && !errors.Is(err, lease.ErrPoolExhausted) && s.cfg.Batcher.waitingForConn() {
		// The Batcher's round is still waiting for a connection: its
		// statement's deadline is this one, and its result would say so.
		err = errStillWaiting
	}
	s.lose(ctx, e, deadlineReason(err), err)
	return true
}

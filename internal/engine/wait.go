package engine

import (
	"context"
	"errors"
	"time"

	"github.com/rowlease/rowlease/internal/retry"
)

// WaitOptions bound how AcquireWait polls a held lease.
type WaitOptions struct {
	// MinDelay is the shortest wait between two attempts; zero means 50ms.
	// Each attempt on a held lease is two statements (the conditional
	// UPDATE and the read that says who holds it), so a waiter sends at
	// most 2 statements per MinDelay.
	MinDelay time.Duration
	// MaxDelay is the longest wait between two attempts; zero means 2s.
	// The wait grows from MinDelay (doubling, jittered), and is never
	// longer than the time the holder's lease has left plus a jitter.
	MaxDelay time.Duration
}

func (o WaitOptions) bounds() (lo, hi time.Duration, err error) {
	lo, hi = o.MinDelay, o.MaxDelay
	if lo == 0 {
		lo = 50 * time.Millisecond
	}
	if hi == 0 {
		hi = 2 * time.Second
	}
	switch {
	case lo < time.Millisecond:
		return 0, 0, invalid("wait", "MinDelay below 1ms")
	case hi < lo:
		return 0, 0, invalid("wait", "MaxDelay below MinDelay")
	}
	return lo, hi, nil
}

// AcquireWait is Acquire that waits while the lease is held by someone
// else: it tries again with a jittered backoff (see WaitOptions), sooner
// when the holder's lease is about to expire, until it wins or ctx ends.
// It returns at once, without waiting, on every error but ErrHeld
// (ErrNotFound, ErrState, ErrInvalid, a driver error). When ctx ends first
// it returns the last *ConflictError joined with ctx's cause, so both
// errors.Is(err, ErrHeld) and errors.Is(err, context.DeadlineExceeded)
// (or Canceled) hold. Acquire stays fail-fast; blocking is never the
// default.
func (l *Lease[K]) AcquireWait(ctx context.Context, db DB, key K, holder string, ttl time.Duration, o AcquireOptions, w WaitOptions) (Grant[K], error) {
	lo, hi, err := w.bounds()
	if err != nil {
		return Grant[K]{}, err
	}
	delay := lo
	for {
		g, err := l.AcquireWith(ctx, db, key, holder, ttl, o)
		if err == nil || !errors.Is(err, ErrHeld) {
			return g, err
		}
		wait := retry.Jitter(delay)
		var ce *ConflictError
		if errors.As(err, &ce) && ce.Remaining > 0 && ce.Remaining < wait {
			// The holder's lease ends sooner: try just after it.
			wait = ce.Remaining + retry.Jitter(lo)/2
		}
		if !retry.Sleep(ctx, max(wait, lo)) {
			return Grant[K]{}, errors.Join(err, context.Cause(ctx))
		}
		delay = min(delay*2, hi)
	}
}

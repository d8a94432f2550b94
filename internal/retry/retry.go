package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// MaxAttempts bounds the runs of one operation that failed transiently:
// the first run and three more.
const MaxAttempts = 4

// Base is the first back-off delay.
const Base = 5 * time.Millisecond

// Delay is the pause before run attempt+1 of an operation (attempt counts
// from 1): Base doubled attempt-1 times (at most 2^10 times), drawn
// uniformly between half and one and a half times that.
func Delay(attempt int) time.Duration {
	d := Base << min(max(attempt-1, 0), 10)
	return d/2 + time.Duration(rand.Int64N(int64(d)))
}

// Backoff waits Delay(attempt). It reports false, at once, when ctx ends
// first.
func Backoff(ctx context.Context, attempt int) bool {
	return Sleep(ctx, Delay(attempt))
}

// Sleep waits d, or until ctx ends; it reports whether the whole of d
// passed. A d of zero or less returns true at once unless ctx has ended.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Jitter returns a duration drawn uniformly from [d/2, d): the pause of a
// poll loop, spread so that pollers started together drift apart.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)))
}

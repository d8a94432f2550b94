package heartbeat_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

func TestKeepsAliveWellPastTTL(t *testing.T) {
	f := newFake("session", life, nil)
	first := f.Deadline()
	s, work, rec := start(t, heartbeat.Config{}, f)
	pause(time.Second) // more than three TTLs
	assert.NoError(t, work.Err())
	assert.NoError(t, s.Lost())
	assert.True(t, f.Deadline().After(first.Add(2*ttl)), "deadline moved on")
	assert.GreaterOrEqual(t, f.Calls(), 5)
	for len(rec.ch) > 0 {
		ev := <-rec.ch
		assert.Equal(t, heartbeat.EventRenewed, ev.Kind)
	}
}

func TestRenewsInOrderAdded(t *testing.T) {
	var mu sync.Mutex
	var order []string
	var rs []heartbeat.Renewer
	for _, name := range []string{"session", "request", "tool:x"} {
		f := newFake(name, life, nil)
		f.order, f.orderMu = &order, &mu
		rs = append(rs, f)
	}
	_, _, rec := start(t, heartbeat.Config{}, rs...)
	for range 3 {
		rec.wait(t, "tool renewal", is(heartbeat.EventRenewed, "tool:x"))
	}
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(order), 9)
	for i := range 9 {
		assert.Equal(t, []string{"session", "request", "tool:x"}[i%3], order[i], "call %d: %v", i, order[:9])
	}
}

func TestLossMidway(t *testing.T) {
	flip := make(chan struct{})
	f := newFake("request", life, func(ctx context.Context, n int) error {
		select {
		case <-flip:
			return &lease.LostError{Key: "k", Op: "renew"}
		default:
			return nil
		}
	})
	other := newFake("session", life, nil)
	s, work, rec := start(t, heartbeat.Config{}, other, f)
	rec.wait(t, "a renewal", is(heartbeat.EventRenewed, "request"))
	callsAtFlip := f.Calls()
	close(flip) // the lease is taken over
	waitDone(t, work)

	le := lostError(t, context.Cause(work))
	assert.Equal(t, "request", le.Lease)
	assert.Equal(t, heartbeat.ReasonGone, le.Reason)
	var inner *lease.LostError
	assert.ErrorAs(t, le, &inner)
	assert.Contains(t, le.Error(), `"request"`)
	assert.Contains(t, le.Error(), heartbeat.ReasonGone)
	assert.Same(t, le, lostError(t, s.Lost()))
	ev := rec.wait(t, "the lost event", is(heartbeat.EventLost, "request"))
	assert.Same(t, le, ev.Err)
	// The first renewal after the takeover found it: one interval at most.
	assert.Equal(t, callsAtFlip+1, f.Calls())

	// Nothing is renewed after the loss.
	before, beforeOther := f.Calls(), other.Calls()
	pause(3 * interval)
	assert.Equal(t, before, f.Calls())
	assert.Equal(t, beforeOther, other.Calls())
	s.Stop()
	assert.Same(t, le, context.Cause(work), "Stop keeps the loss as the cause")
}

func TestTransientErrorsRetried(t *testing.T) {
	// Interval 100ms: a first renewal at ~100ms that fails leaves ~170ms of
	// trust; three failures and a success fit before the deadline only if
	// the retries come sooner than the interval.
	f := newFake("session", life, func(ctx context.Context, n int) error {
		if n <= 3 {
			return fmt.Errorf("attempt %d: %w", n, errFlaky)
		}
		return nil
	})
	first := f.Deadline()
	s, work, rec := start(t, heartbeat.Config{Interval: 100 * time.Millisecond}, f)
	for i := 1; i <= 3; i++ {
		ev := rec.wait(t, "a retry", is(heartbeat.EventRetry, "session"))
		assert.Equal(t, i, ev.Attempt)
		assert.ErrorIs(t, ev.Err, errFlaky)
	}
	ev := rec.wait(t, "the renewal", is(heartbeat.EventRenewed, "session"))
	assert.True(t, ev.At.Before(first), "renewed before the first deadline")
	assert.Equal(t, 4, f.Calls())
	assert.NoError(t, work.Err())
	assert.NoError(t, s.Lost())
}

func TestTransientErrorsUntilDeadline(t *testing.T) {
	f := newFake("session", life, func(ctx context.Context, n int) error { return errFlaky })
	deadline := f.Deadline()
	s, work, rec := start(t, heartbeat.Config{}, f)
	done := waitDone(t, work)

	assert.False(t, done.Before(deadline), "not cancelled before the deadline")
	le := lostError(t, context.Cause(work))
	assert.Equal(t, "session", le.Lease)
	assert.Equal(t, heartbeat.ReasonDeadline, le.Reason)
	assert.ErrorIs(t, le, errFlaky, "carries the last renewal error")
	assert.Contains(t, le.Error(), heartbeat.ReasonDeadline)
	assert.GreaterOrEqual(t, f.Calls(), 2)
	ev := rec.wait(t, "the lost event", is(heartbeat.EventLost, "session"))
	assert.False(t, ev.At.Before(deadline))
	// Generous bound: the deadline timer fires, then the cancel; this
	// catches a supervisor that waits for the next interval or hangs.
	assert.Less(t, ev.At.Sub(deadline), 500*time.Millisecond)
	assert.NotNil(t, s.Lost())
}

func TestBlockedRenewalCancelledAtDeadline(t *testing.T) {
	f := newFake("session", life, blockOnCtx)
	deadline := f.Deadline()
	_, work, _ := start(t, heartbeat.Config{}, f)
	done := waitDone(t, work)

	assert.False(t, done.Before(deadline))
	le := lostError(t, context.Cause(work))
	assert.Equal(t, heartbeat.ReasonDeadline, le.Reason)
	assert.ErrorIs(t, le, context.DeadlineExceeded)
	dls := f.CtxDeadlines()
	require.Len(t, dls, 1, "one renewal, blocked until the deadline")
	assert.True(t, dls[0].Equal(deadline), "the renewal's context ends at the trust deadline")
}

func TestSlowRenewalOfAnotherLease(t *testing.T) {
	// The session renews first and blocks; its own deadline is far away,
	// but the request's comes first: the session's renewal must give up at
	// the request's deadline, and the request is lost then.
	slow := newFake("session", 10*time.Second, blockOnCtx)
	req := newFake("request", life, nil)
	reqDeadline, slowDeadline := req.Deadline(), slow.Deadline()
	_, work, _ := start(t, heartbeat.Config{}, slow, req)
	done := waitDone(t, work)

	le := lostError(t, context.Cause(work))
	assert.Equal(t, "request", le.Lease)
	assert.Equal(t, heartbeat.ReasonDeadline, le.Reason)
	assert.False(t, done.Before(reqDeadline))
	assert.True(t, done.Before(slowDeadline))
	dls := slow.CtxDeadlines()
	require.NotEmpty(t, dls)
	assert.True(t, dls[0].Equal(reqDeadline), "bounded by the earliest deadline")
	assert.Zero(t, req.Calls(), "never reached")
}

func TestRenewalSucceedingAfterDeadlineIsLoss(t *testing.T) {
	// A Renewer that ignores its context and succeeds too late.
	f := newFake("session", life, func(ctx context.Context, n int) error {
		<-ctx.Done()
		pause(20 * time.Millisecond)
		return nil
	})
	_, work, _ := start(t, heartbeat.Config{}, f)
	waitDone(t, work)
	le := lostError(t, context.Cause(work))
	assert.Equal(t, heartbeat.ReasonDeadline, le.Reason)
	assert.NoError(t, le.Err, "no renewal failed")
}

func TestExpiredAtStart(t *testing.T) {
	f := newFake("tool:x", life, nil)
	f.deadline = time.Now().Add(-time.Millisecond)
	s, work, _ := start(t, heartbeat.Config{}, f)
	waitDone(t, work)
	le := lostError(t, s.Lost())
	assert.Equal(t, heartbeat.ReasonDeadline, le.Reason)
	assert.Nil(t, le.Err)
	assert.Zero(t, f.Calls())
}

func TestInvalidRenewalIsLoss(t *testing.T) {
	f := newFake("request", life, func(ctx context.Context, n int) error {
		return &engine.ValidationError{Field: "ttl", Reason: "must be positive"}
	})
	_, work, _ := start(t, heartbeat.Config{}, f)
	waitDone(t, work)
	cause := context.Cause(work)
	le := lostError(t, cause)
	assert.Equal(t, heartbeat.ReasonInvalid, le.Reason)
	assert.ErrorIs(t, cause, lease.ErrInvalid)
	assert.Equal(t, 1, f.Calls(), "not retried")
}

func TestShortTrustRenewedEarly(t *testing.T) {
	// A lease added with less trust left than the interval is renewed
	// before its deadline, not at the next interval.
	// Seconds, not milliseconds: the renewal is due at half the trust left
	// (1s) and must come before the deadline (2s), on a loaded machine too.
	f := newFake("request", life, nil)
	f.deadline = time.Now().Add(2 * time.Second)
	s, _, rec := start(t, heartbeat.Config{Interval: 5 * time.Second, TTL: 15 * time.Second}, f)
	rec.wait(t, "renewed", is(heartbeat.EventRenewed, "request"))
	assert.NoError(t, s.Lost())
}

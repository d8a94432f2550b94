package heartbeat_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/lease"
)

// Timing used by the fake-renewer tests: a 300ms TTL whose trust deadline,
// with the default TTL/10 margin, is 270ms after a renewal is sent.
const (
	ttl      = 300 * time.Millisecond
	life     = 270 * time.Millisecond
	interval = 50 * time.Millisecond
)

var errFlaky = errors.New("flaky: connection reset")

// start makes and starts a supervisor with the test timing, recording its
// events, and stops it at cleanup.
func start(t *testing.T, cfg heartbeat.Config, rs ...heartbeat.Renewer) (*heartbeat.Supervisor, context.Context, *recorder) {
	t.Helper()
	if cfg.Interval == 0 {
		cfg.Interval = interval
	}
	if cfg.TTL == 0 {
		cfg.TTL = ttl
	}
	rec := newRecorder()
	cfg.OnEvent = rec.on
	s, err := heartbeat.New(cfg)
	require.NoError(t, err)
	for _, r := range rs {
		s.Add(r)
	}
	work, err := s.Start(context.Background())
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	return s, work, rec
}

func lostError(t *testing.T, err error) *heartbeat.LostError {
	t.Helper()
	require.ErrorIs(t, err, lease.ErrLost)
	var le *heartbeat.LostError
	require.ErrorAs(t, err, &le)
	return le
}

func TestNewValidates(t *testing.T) {
	bad := map[string]heartbeat.Config{
		"zero config":        {},
		"zero interval":      {TTL: time.Second},
		"negative interval":  {TTL: time.Second, Interval: -time.Millisecond},
		"interval above 1/3": {TTL: time.Second, Interval: time.Second/3 + time.Nanosecond},
		"interval = ttl":     {TTL: time.Second, Interval: time.Second},
		"zero ttl":           {Interval: time.Millisecond},
		"negative ttl":       {TTL: -time.Second, Interval: time.Millisecond},
		"ttl below min":      {TTL: lease.MinTTL - 1, Interval: time.Nanosecond},
		"ttl above max":      {TTL: lease.MaxTTL + 1, Interval: time.Second},
	}
	for name, cfg := range bad {
		s, err := heartbeat.New(cfg)
		assert.Nil(t, s, name)
		assert.ErrorIs(t, err, lease.ErrInvalid, name)
		var ve *lease.ValidationError
		assert.ErrorAs(t, err, &ve, name)
	}
	for _, cfg := range []heartbeat.Config{
		{TTL: time.Second, Interval: time.Second / 3},
		{TTL: lease.MinTTL, Interval: lease.MinTTL / 3},
		{TTL: lease.MaxTTL, Interval: time.Hour},
	} {
		_, err := heartbeat.New(cfg)
		assert.NoError(t, err, "%+v", cfg)
	}
}

func TestStartStopLifecycle(t *testing.T) {
	cfg := heartbeat.Config{Interval: interval, TTL: ttl}

	t.Run("StopWithoutStart", func(t *testing.T) {
		s, err := heartbeat.New(cfg)
		require.NoError(t, err)
		s.Stop()
		s.Stop()
		_, err = s.Start(context.Background())
		assert.ErrorIs(t, err, heartbeat.ErrStopped, "no start after stop")
		assert.NoError(t, s.Lost())
	})

	t.Run("StartTwiceStopTwice", func(t *testing.T) {
		s, err := heartbeat.New(cfg)
		require.NoError(t, err)
		parent, cancelParent := context.WithCancel(context.Background())
		defer cancelParent()
		work, err := s.Start(parent)
		require.NoError(t, err)
		_, err = s.Start(parent)
		assert.ErrorIs(t, err, heartbeat.ErrStarted)
		s.Stop()
		s.Stop()
		assert.ErrorIs(t, context.Cause(work), heartbeat.ErrStopped)
		assert.NoError(t, parent.Err(), "Stop does not cancel the parent")
		assert.NoError(t, s.Lost())
		_, err = s.Start(parent)
		assert.ErrorIs(t, err, heartbeat.ErrStarted)
	})

	t.Run("StopConcurrently", func(t *testing.T) {
		s, err := heartbeat.New(cfg)
		require.NoError(t, err)
		s.Add(newFake("a", life, nil))
		_, err = s.Start(context.Background())
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(s.Stop)
		}
		wg.Wait()
	})

	t.Run("NilParent", func(t *testing.T) {
		s, err := heartbeat.New(cfg)
		require.NoError(t, err)
		var nilCtx context.Context
		_, err = s.Start(nilCtx)
		assert.ErrorIs(t, err, lease.ErrInvalid)
	})

	t.Run("AddNilPanics", func(t *testing.T) {
		s, err := heartbeat.New(cfg)
		require.NoError(t, err)
		assert.Panics(t, func() { s.Add(nil) })
	})
}

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
		return &lease.ValidationError{Field: "ttl", Reason: "must be positive"}
	})
	_, work, _ := start(t, heartbeat.Config{}, f)
	waitDone(t, work)
	cause := context.Cause(work)
	le := lostError(t, cause)
	assert.Equal(t, heartbeat.ReasonInvalid, le.Reason)
	assert.ErrorIs(t, cause, lease.ErrInvalid)
	assert.Equal(t, 1, f.Calls(), "not retried")
}

func TestParentCancelled(t *testing.T) {
	s, err := heartbeat.New(heartbeat.Config{Interval: interval, TTL: ttl})
	require.NoError(t, err)
	inFlight := make(chan struct{})
	f := newFake("session", 10*time.Second, func(ctx context.Context, n int) error {
		close(inFlight)
		return blockOnCtx(ctx, n)
	})
	s.Add(f)
	parent, cancel := context.WithCancel(context.Background())
	work, err := s.Start(parent)
	require.NoError(t, err)
	<-inFlight
	cancel()
	waitDone(t, work)
	s.Stop() // joins: the goroutine has returned (goleak checks the rest)
	assert.NoError(t, s.Lost(), "no loss recorded")
	assert.ErrorIs(t, context.Cause(work), context.Canceled)
	assert.Equal(t, 1, f.Calls())
}

func TestStopCancelsBlockedRenewal(t *testing.T) {
	s, err := heartbeat.New(heartbeat.Config{Interval: interval, TTL: ttl})
	require.NoError(t, err)
	inFlight := make(chan struct{})
	s.Add(newFake("session", 10*time.Second, func(ctx context.Context, n int) error {
		close(inFlight)
		return blockOnCtx(ctx, n)
	}))
	work, err := s.Start(context.Background())
	require.NoError(t, err)
	<-inFlight
	s.Stop()
	assert.ErrorIs(t, context.Cause(work), heartbeat.ErrStopped)
	assert.NoError(t, s.Lost())
}

func TestRemove(t *testing.T) {
	keep := newFake("session", life, nil)
	gone := newFake("tool:a", life, nil)

	// A tool whose renewal is in flight when it is removed, and then finds
	// the token gone (the tool released it after removing it).
	inFlight, release := make(chan struct{}), make(chan struct{})
	racing := newFake("tool:b", life, func(ctx context.Context, n int) error {
		if n == 2 {
			close(inFlight)
			<-release
			return &lease.LostError{Key: "b", Op: "renew"}
		}
		return nil
	})

	rec := newRecorder()
	s, err := heartbeat.New(heartbeat.Config{Interval: interval, TTL: ttl, OnEvent: rec.on})
	require.NoError(t, err)
	s.Add(keep)
	removeGone := s.Add(gone)
	work, err := s.Start(context.Background())
	require.NoError(t, err)
	defer s.Stop()
	removeRacing := s.Add(racing)

	rec.wait(t, "tool:a renewed", is(heartbeat.EventRenewed, "tool:a"))
	removeGone()
	removeGone() // idempotent
	callsGone, deadlineGone := gone.Calls(), gone.Deadline()

	<-inFlight
	removeRacing()
	close(release)

	// Keep the session alive until well past tool:a's deadline.
	for {
		ev := rec.wait(t, "session renewed", is(heartbeat.EventRenewed, "session"))
		if ev.At.After(deadlineGone.Add(2 * interval)) {
			break
		}
	}
	assert.LessOrEqual(t, gone.Calls(), callsGone+1, "at most the renewal in flight at remove")
	assert.Equal(t, 2, racing.Calls())
	assert.NoError(t, work.Err(), "a removed lease's deadline and loss are ignored")
	assert.NoError(t, s.Lost())
	removeRacing()
}

func TestAddRemoveConcurrently(t *testing.T) {
	rec := newRecorder()
	s, err := heartbeat.New(heartbeat.Config{Interval: 10 * time.Millisecond, TTL: ttl, OnEvent: func(ev heartbeat.Event) {
		if ev.Lease == "session" || ev.Kind == heartbeat.EventLost {
			rec.on(ev)
		}
	}})
	require.NoError(t, err)
	s.Add(newFake("session", life, nil))
	var wg sync.WaitGroup
	for g := range 4 { // before Start too
		wg.Go(func() {
			for i := range 50 {
				s.Add(newFake(fmt.Sprintf("pre:%d:%d", g, i), life, nil))()
			}
		})
	}
	work, err := s.Start(context.Background())
	require.NoError(t, err)
	defer s.Stop()
	stop := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			var prev func()
			for i := 0; ; i++ {
				select {
				case <-stop:
					if prev != nil {
						prev()
						prev()
					}
					return
				default:
				}
				rm := s.Add(newFake(fmt.Sprintf("tool:%d:%d", g, i), life, nil))
				if prev != nil {
					prev()
				}
				prev = rm
				if i%4 == 0 {
					// Let renewals of live ones happen: eight goroutines that
					// never block can starve the supervisor on two cores
					// under -race.
					pause(time.Millisecond)
				}
			}
		})
	}
	for range 10 {
		rec.wait(t, "session renewed", is(heartbeat.EventRenewed, "session"))
	}
	close(stop)
	wg.Wait()
	assert.NoError(t, work.Err())
	assert.NoError(t, s.Lost())
}

func TestAddAfterStartIsRenewed(t *testing.T) {
	s, _, rec := start(t, heartbeat.Config{}, newFake("session", life, nil))
	rec.wait(t, "session renewed", is(heartbeat.EventRenewed, "session"))
	tool := newFake("tool:x", life, nil)
	s.Add(tool)
	rec.wait(t, "tool renewed", is(heartbeat.EventRenewed, "tool:x"))
	assert.NoError(t, s.Lost())
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

func TestLogs(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := newFake("request", life, func(ctx context.Context, n int) error {
		switch n {
		case 1:
			return errFlaky
		case 2:
			return nil
		}
		return &lease.LostError{Key: "k", Op: "renew"}
	})
	s, work, _ := start(t, heartbeat.Config{Logger: log}, f)
	waitDone(t, work)
	s.Stop() // the loss is logged after the cancel; Stop joins
	out := buf.String()
	assert.Contains(t, out, "level=WARN msg=\"heartbeat: renewal failed, retrying\" lease=request attempt=1")
	assert.Contains(t, out, "level=DEBUG msg=\"heartbeat: renewed\" lease=request")
	assert.Contains(t, out, "level=ERROR msg=\"heartbeat: lease lost, work cancelled\" lease=request")
}

func TestEventKindString(t *testing.T) {
	assert.Equal(t, "renewed", heartbeat.EventRenewed.String())
	assert.Equal(t, "retry", heartbeat.EventRetry.String())
	assert.Equal(t, "lost", heartbeat.EventLost.String())
	assert.Equal(t, "EventKind(9)", heartbeat.EventKind(9).String())
}

// syncBuffer is a bytes.Buffer safe for the supervisor goroutine to write
// while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

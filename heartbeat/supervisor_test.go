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
	"github.com/rowlease/rowlease/internal/engine"
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
		var ve *engine.ValidationError
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

// TestObserverNames: the names under which a flow reports heartbeat
// events to a lease.Observer are part of what traces and dashboards match
// on; they keep the strings they had.
func TestObserverNames(t *testing.T) {
	assert.Equal(t, "rowlease.heartbeat.retry", heartbeat.EventRenewRetry)
	assert.Equal(t, "rowlease.heartbeat.lost", heartbeat.EventLeaseLost)
	assert.Equal(t, "rowlease.reason", heartbeat.AttrReason)
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

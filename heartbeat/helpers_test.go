package heartbeat_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestMain fails the run if the supervisor (or anything else) leaves a
// goroutine behind.
func TestMain(m *testing.M) { testdb.Main(m) }

// limit bounds every wait on a signal, so that a bug fails the test
// instead of hanging it. It is not a timing assertion.
const limit = 10 * time.Second

// stamped is an event with the time the supervisor reported it.
type stamped struct {
	heartbeat.Event
	At time.Time
}

// recorder collects OnEvent calls on a channel.
type recorder struct{ ch chan stamped }

func newRecorder() *recorder { return &recorder{ch: make(chan stamped, 1<<14)} }

func (r *recorder) on(ev heartbeat.Event) {
	select {
	case r.ch <- stamped{Event: ev, At: time.Now()}:
	default:
		panic("recorder full")
	}
}

// wait returns the first event that matches, failing after limit.
func (r *recorder) wait(t *testing.T, what string, match func(stamped) bool) stamped {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case ev := <-r.ch:
			if match(ev) {
				return ev
			}
		case <-timer.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func is(kind heartbeat.EventKind, name string) func(stamped) bool {
	return func(ev stamped) bool { return ev.Kind == kind && ev.Lease == name }
}

// waitDone waits for ctx to be done, failing after limit, and returns when
// it saw it.
func waitDone(t *testing.T, ctx context.Context) time.Time {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return time.Now()
	case <-timer.C:
		t.Fatal("work context not cancelled")
	}
	return time.Time{}
}

// pause waits d on a timer (not a sleep loop).
func pause(d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	<-timer.C
}

// call is one Renew call as a spy saw it.
type call struct {
	Start, End  time.Time
	CtxDeadline time.Time
	Err         error
}

// spy wraps a Renewer and records every Renew call.
type spy struct {
	heartbeat.Renewer
	mu    sync.Mutex
	calls []call
}

func (s *spy) Renew(ctx context.Context) (time.Time, error) {
	c := call{Start: time.Now()}
	c.CtxDeadline, _ = ctx.Deadline()
	dl, err := s.Renewer.Renew(ctx)
	c.End, c.Err = time.Now(), err
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	return dl, err
}

func (s *spy) Calls() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

// fake is a Renewer whose renewals succeed, each giving a trust deadline
// life after it started, unless step returns an error.
type fake struct {
	name string
	life time.Duration
	step func(ctx context.Context, n int) error // nil: succeed

	mu       sync.Mutex
	deadline time.Time
	calls    int
	ctxDLs   []time.Time
	order    *[]string // shared log of names, in call order
	orderMu  *sync.Mutex
}

func newFake(name string, life time.Duration, step func(ctx context.Context, n int) error) *fake {
	return &fake{name: name, life: life, step: step, deadline: time.Now().Add(life)}
}

func (f *fake) Name() string { return f.name }

func (f *fake) Deadline() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deadline
}

func (f *fake) Renew(ctx context.Context) (time.Time, error) {
	sent := time.Now()
	f.mu.Lock()
	f.calls++
	n := f.calls
	dl, _ := ctx.Deadline()
	f.ctxDLs = append(f.ctxDLs, dl)
	f.mu.Unlock()
	if f.order != nil {
		f.orderMu.Lock()
		*f.order = append(*f.order, f.name)
		f.orderMu.Unlock()
	}
	var err error
	if f.step != nil {
		err = f.step(ctx, n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		return f.deadline, err
	}
	f.deadline = sent.Add(f.life)
	return f.deadline, nil
}

func (f *fake) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fake) CtxDeadlines() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.ctxDLs...)
}

// blockOnCtx is a step that blocks until the renewal's context is done.
func blockOnCtx(ctx context.Context, _ int) error {
	<-ctx.Done()
	return ctx.Err()
}

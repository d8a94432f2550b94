package request

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// TestQueuedMessagesRunInOrder: 20 messages queued behind a slow one run
// in arrival order, each once, one at a time, started by the runs that
// free the session; the 21st is refused with *QueueFullError and writes
// nothing; a resend of a queued message answers its position again.
func TestQueuedMessagesRunInOrder(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		rc := &recorder{}
		r := e.newRunner(t, func(c *Config) { c.Agent = rc.agent })
		slow := newBlocker(rc)
		slowDone := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "slow", Content: "slow"}, slow.agent)
			slowDone <- err
		}()
		<-slow.started

		const n = 20
		var want []string
		for i := range n {
			id := fmt.Sprintf("q-%02d", i)
			want = append(want, id)
			out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: id, Content: id, OnBusy: Queue}, nil)
			require.NoError(t, err)
			require.True(t, out.Queued, id)
			assert.Equal(t, i, out.Position, id)
			assert.Empty(t, out.Reply)
		}
		rows := requestRows(t, e)
		_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "q-full", Content: "x", OnBusy: Queue}, nil)
		require.ErrorAs(t, err, new(*QueueFullError))
		var full *QueueFullError
		require.ErrorAs(t, err, &full)
		assert.Equal(t, DefaultQueueMax, full.Max)
		assert.Equal(t, rows, requestRows(t, e), "a refused message writes nothing")
		_, err = r.Status(ctx, "s", "q-full")
		require.ErrorIs(t, err, lease.ErrNotFound)
		require.ErrorIs(t, err, lease.ErrNotFound)

		// A resend of a queued message, whatever its policy, answers its
		// position and adds nothing.
		for _, p := range []Policy{Reject, Queue, Interrupt} {
			out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "q-05", Content: "q-05", OnBusy: p}, nil)
			require.NoError(t, err)
			assert.True(t, out.Queued)
			assert.Equal(t, 5, out.Position)
		}
		st, err := r.Status(ctx, "s", "q-05")
		require.NoError(t, err)
		assert.Equal(t, StateQueued, st.State)
		assert.Equal(t, 5, st.Position)
		assert.Zero(t, st.Attempt)
		assert.Equal(t, rows, requestRows(t, e))

		close(slow.release)
		require.NoError(t, <-slowDone)
		st, err = r.Wait(ctx, "s", want[n-1])
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State)
		assert.Equal(t, "ok "+want[n-1], st.Reply)

		assert.Equal(t, append([]string{"slow"}, want...), rc.ordered(), "arrival order")
		assert.Equal(t, int64(1), rc.maxSeen.Load(), "one run at a time")
		for _, id := range want {
			assert.Equal(t, int64(1), rc.runsOf(id), "%s runs once", id)
			st, err := r.Status(ctx, "s", id)
			require.NoError(t, err)
			assert.Equal(t, StateSucceeded, st.State, id)
			assert.Equal(t, int64(1), st.Attempt, id)
			out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: id, Content: id}, nil)
			require.NoError(t, err)
			assert.True(t, out.Replayed)
			assert.Equal(t, "ok "+id, out.Reply)
		}
		ss, err := r.Sessions().Inspect(ctx, db, "s")
		require.NoError(t, err)
		assert.False(t, ss.Held, "the last run frees the session")
	})
}

// TestQueueDrainsAfterACrash: the process that holds the session crashes
// while messages are queued behind it, and so does every other process;
// a process started afterwards resumes the crashed message (accepted at
// once, its content stored) once its lease has expired and its grace
// passed, and then drains the queue, in order.
func TestQueueDrainsAfterACrash(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 600*time.Millisecond)
		ctx := bg(t)
		rcA := &recorder{}
		a := e.newRunner(t, func(c *Config) { c.Agent = rcA.agent })
		crash := newBlocker(rcA)
		done := make(chan error, 1)
		go func() {
			_, err := a.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "crash", Content: "x"},
				func(ctx context.Context, run *Run) (Answer, error) {
					_, err := crash.agent(ctx, run)
					run.abandon() // the process dies here, holding its leases
					return Answer{}, err
				})
			done <- err
		}()
		<-crash.started
		var want []string
		for i := range 5 {
			id := fmt.Sprintf("q-%d", i)
			want = append(want, id)
			out, err := a.Handle(ctx, Message{SessionKey: "s", ClientRequestID: id, Content: id, OnBusy: Queue}, nil)
			require.NoError(t, err)
			require.True(t, out.Queued)
		}
		close(crash.release)
		require.ErrorIs(t, <-done, context.Canceled)
		require.NoError(t, a.Close(ctx)) // every process is gone

		// A new process, with its dispatcher.
		rcB := &recorder{}
		b := e.newRunner(t, func(c *Config) {
			c.Agent = rcB.agent
			c.Queue.DispatchInterval = 20 * time.Millisecond
		})
		require.NoError(t, b.Start(ctx))
		st, err := b.Wait(ctx, "s", want[len(want)-1])
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State)
		assert.Equal(t, append([]string{"crash"}, want...), rcB.ordered(), "the crashed one first, then arrival order, all in the new process")
		assert.Equal(t, int64(1), rcB.maxSeen.Load())
		assert.Equal(t, []string{"crash"}, rcA.ordered(), "nothing ran in the crashed process")
		for _, id := range want {
			st, err := b.Status(ctx, "s", id)
			require.NoError(t, err)
			assert.Equal(t, StateSucceeded, st.State, id)
			assert.Equal(t, "ok "+id, st.Reply)
		}
		// The crashed message itself was resumed by the service.
		st, err = b.Status(ctx, "s", "crash")
		require.NoError(t, err)
		assert.Equal(t, StateSucceeded, st.State)
		assert.Equal(t, "ok x", st.Reply)
		assert.Equal(t, int64(2), st.Attempt)
	})
}

// TestQueuedRunThatDiesIsResumed: a message started from the queue whose
// run dies is resumed by a dispatcher, its committed tool call reused,
// before the messages queued after it.
func TestQueuedRunThatDiesIsResumed(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 600*time.Millisecond)
		ctx := bg(t)
		rc := &recorder{}
		var died atomic.Bool
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			defer rc.enter(run)()
			res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":7}`))
			if err != nil {
				return Answer{}, err
			}
			if run.ClientRequestID() == "q-0" && died.CompareAndSwap(false, true) {
				run.abandon()
				return Answer{}, errors.New("died")
			}
			return Answer{Reply: fmt.Sprintf("ok reused=%v", res.Reused)}, nil
		}
		a := e.newRunner(t, func(c *Config) { c.Agent = agent })
		first := newBlocker(&recorder{})
		done := make(chan error, 1)
		go func() {
			_, err := a.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "first", Content: "x"}, first.agent)
			done <- err
		}()
		<-first.started
		for _, id := range []string{"q-0", "q-1"} {
			out, err := a.Handle(ctx, Message{SessionKey: "s", ClientRequestID: id, Content: id, OnBusy: Queue}, nil)
			require.NoError(t, err)
			require.True(t, out.Queued)
		}
		close(first.release)
		require.NoError(t, <-done)
		waitFor(t, func() bool { return rc.runsOf("q-0") == 1 && died.Load() })
		require.NoError(t, a.Close(ctx))

		b := e.newRunner(t, func(c *Config) {
			c.Agent = agent
			c.Queue.DispatchInterval = 20 * time.Millisecond
		})
		require.NoError(t, b.Start(ctx))
		st, err := b.Wait(ctx, "s", "q-1")
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State)
		st, err = b.Status(ctx, "s", "q-0")
		require.NoError(t, err)
		assert.Equal(t, StateSucceeded, st.State)
		assert.Equal(t, "ok reused=true", st.Reply, "the resumed run reuses the committed tool call")
		assert.Equal(t, int64(2), st.Attempt)
		assert.Equal(t, []string{"q-0", "q-0", "q-1"}, rc.ordered())
		assert.Equal(t, 2, e.ledgerRows(t), "one write for q-0, one for q-1")
	})
}

// TestTwoWaitersInTwoProcesses: a duplicate of a message in flight, and a
// waiter in each of two processes, all get the same stored reply.
func TestTwoWaitersInTwoProcesses(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		a := e.newRunner(t, nil)
		b := e.newRunner(t, nil)
		owner := newBlocker(&recorder{})
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "pay 35"}
		ownerDone := make(chan Outcome, 1)
		go func() {
			out, err := a.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
				if _, err := owner.agent(ctx, run); err != nil {
					return Answer{}, err
				}
				res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":35}`))
				if err != nil {
					return Answer{}, err
				}
				return Answer{Reply: "paid", Result: res.Output}, nil
			})
			assert.NoError(t, err)
			ownerDone <- out
		}()
		<-owner.started
		_, err := b.Handle(ctx, msg, owner.agent)
		require.ErrorIs(t, err, ErrInFlight, "a duplicate in another process")

		got := make(chan Status, 2)
		for _, w := range []*Runner{a, b} {
			go func() {
				st, err := w.Wait(ctx, "s", "c")
				assert.NoError(t, err)
				got <- st
			}()
		}
		// A waiter with a deadline that passes first reports the state.
		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		st, err := b.Wait(short, "s", "c")
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, StateProcessing, st.State)
		assert.True(t, st.Live)

		close(owner.release)
		out := <-ownerDone
		s1, s2 := <-got, <-got
		for _, s := range []Status{s1, s2} {
			assert.Equal(t, StateSucceeded, s.State)
			assert.Equal(t, "paid", s.Reply)
			assert.JSONEq(t, string(out.Result), string(s.Result))
			assert.Equal(t, out.RequestID, s.RequestID)
			o, err := s.Outcome()
			require.NoError(t, err)
			assert.True(t, o.Replayed)
		}
		assert.Equal(t, 1, e.ledgerRows(t))
		_, err = a.Wait(ctx, "s", "unknown")
		require.ErrorIs(t, err, lease.ErrNotFound)
	})
}

// TestPolicyValidation: bad policies and missing agents are refused before
// anything is written.
func TestPolicyValidation(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		for _, msg := range []Message{
			{SessionKey: "s", ClientRequestID: "c", Content: "x", OnBusy: Policy(7)},
			{SessionKey: "s", ClientRequestID: "c", Content: "x", OnBusy: Queue},     // e.r has no Config.Agent
			{SessionKey: "s", ClientRequestID: "c", Content: "x", OnBusy: Interrupt}, // nor here
		} {
			_, err := e.r.Handle(ctx, msg, answerOK)
			var ve *engine.ValidationError
			require.ErrorAs(t, err, &ve, "%v", msg.OnBusy)
		}
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, nil)
		require.ErrorIs(t, err, lease.ErrInvalid, "no agent at all")
		assert.Zero(t, requestRows(t, e))
		_, err = e.r.Status(ctx, "", "c")
		require.ErrorIs(t, err, lease.ErrInvalid)
		for _, s := range []string{"reject", "queue", "interrupt", ""} {
			p, err := ParsePolicy(s)
			require.NoError(t, err)
			if s != "" {
				assert.Equal(t, s, p.String())
			}
		}
		_, err = ParsePolicy("later")
		require.ErrorIs(t, err, lease.ErrInvalid)
		for _, cfg := range []Config{
			{DB: db, Queue: QueueConfig{Max: -1}},
			{DB: db, Queue: QueueConfig{PollMin: time.Second, PollMax: time.Millisecond}},
			{DB: db, Retention: RetentionConfig{After: -time.Hour}},
		} {
			_, err := New(cfg)
			require.ErrorIs(t, err, lease.ErrInvalid)
		}
	})
}

// TestConcurrentQueueing: 30 messages queued at once, from as many
// goroutines, behind a running one, with room for 12: exactly 12 are
// queued, with the positions 0 to 11, the rest get *QueueFullError and write
// nothing; the 12 then run once each, one at a time, in the order of
// their positions.
func TestConcurrentQueueing(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second) // on SQLite the slow run's renewals wait behind 30 writers
		ctx := bg(t)
		rc := &recorder{}
		r := e.newRunner(t, func(c *Config) {
			c.Agent = rc.agent
			c.Queue.Max = 12
		})
		slow := newBlocker(rc)
		slowDone := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "slow", Content: "slow"}, slow.agent)
			slowDone <- err
		}()
		<-slow.started

		const n = 30
		type res struct {
			id  string
			out Outcome
			err error
		}
		results := make(chan res, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				id := fmt.Sprintf("q-%02d", i)
				out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: id, Content: id, OnBusy: Queue}, nil)
				results <- res{id, out, err}
			})
		}
		close(start)
		wg.Wait()
		close(results)
		byPos := map[int]string{}
		full := 0
		for x := range results {
			switch {
			case x.err == nil:
				require.True(t, x.out.Queued, x.id)
				_, dup := byPos[x.out.Position]
				require.False(t, dup, "position %d given twice", x.out.Position)
				byPos[x.out.Position] = x.id
			case errors.As(x.err, new(*QueueFullError)):
				full++
				_, err := r.Status(ctx, "s", x.id)
				require.ErrorIs(t, err, lease.ErrNotFound, "a refused message writes nothing")
			default:
				t.Fatalf("%s: %v", x.id, x.err)
			}
		}
		require.Len(t, byPos, 12, "exactly as many as the queue takes")
		assert.Equal(t, n-12, full)
		var want []string
		for p := range 12 {
			id, ok := byPos[p]
			require.True(t, ok, "position %d", p)
			want = append(want, id)
		}

		close(slow.release)
		require.NoError(t, <-slowDone)
		st, err := r.Wait(ctx, "s", want[11])
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State)
		assert.Equal(t, append([]string{"slow"}, want...), rc.ordered(), "the order of the positions")
		assert.Equal(t, int64(1), rc.maxSeen.Load(), "one run at a time")
	})
}

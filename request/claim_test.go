package request

import (
	"context"
	"database/sql"
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

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/session"
)

func TestSameClientRequestIDRunsOnce(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		var runs atomic.Int64
		release := make(chan struct{})
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			runs.Add(1)
			<-release // hold the request while the duplicates arrive
			if _, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":35}`)); err != nil {
				return Answer{}, err
			}
			return Answer{Reply: "ok " + run.Content()}, nil
		}
		const n = 50
		var wg sync.WaitGroup
		var mu sync.Mutex
		var wins, replays, conflicts int
		var others []error
		var arrived sync.WaitGroup
		arrived.Add(n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				arrived.Done()
				out, err := e.r.Handle(ctx, Message{SessionKey: "s1", ClientRequestID: "c1", Content: "lunch 35"}, agent)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && out.Replayed:
					replays++
					assert.Equal(t, "ok lunch 35", out.Reply)
				case err == nil:
					wins++
				case isConflict(err):
					conflicts++
				default:
					others = append(others, err)
				}
			}()
		}
		arrived.Wait()
		// Let every duplicate reach the database before the owner finishes:
		// wait until n-1 of them have been answered.
		waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return conflicts+len(others) >= n-1 || runs.Load() > 1 })
		close(release)
		wg.Wait()
		require.Empty(t, others)
		assert.Equal(t, int64(1), runs.Load(), "the agent runs once")
		assert.Equal(t, 1, wins)
		assert.Equal(t, n-1, conflicts+replays)
		assert.Equal(t, 1, e.ledgerRows(t))
		// A later send replays.
		out, err := e.r.Handle(ctx, Message{SessionKey: "s1", ClientRequestID: "c1", Content: "lunch 35"}, agent)
		require.NoError(t, err)
		assert.True(t, out.Replayed)
		assert.Equal(t, int64(1), runs.Load())
	})
}

func TestOneSessionNeverRunsTwoAtOnce(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		var inside, maxInside, runs atomic.Int64
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			now := inside.Add(1)
			defer inside.Add(-1)
			for {
				m := maxInside.Load()
				if now <= m || maxInside.CompareAndSwap(m, now) {
					break
				}
			}
			runs.Add(1)
			timer := time.NewTimer(5 * time.Millisecond) // a model round
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				return Answer{}, ctx.Err()
			}
			return Answer{Reply: "done"}, nil
		}
		const n = 50
		var wg sync.WaitGroup
		var ok, busy atomic.Int64
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: fmt.Sprintf("c%d", i), Content: "x"}, agent)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.As(err, new(*session.BusyError)):
					busy.Add(1)
				default:
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("unexpected: %v", err)
		}
		assert.Equal(t, int64(1), maxInside.Load(), "never two requests of one session at once")
		assert.Equal(t, int64(n), ok.Load()+busy.Load())
		assert.Equal(t, ok.Load(), runs.Load())
		assert.GreaterOrEqual(t, ok.Load(), int64(1))
	})
}

func TestSessionsRunInParallel(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 10*time.Second)
		ctx := bg(t)
		const n = 20
		var barrier sync.WaitGroup
		barrier.Add(n)
		allIn := make(chan struct{})
		go func() { barrier.Wait(); close(allIn) }()
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			barrier.Done()
			select { // every session's agent must be inside at once
			case <-allIn:
				return Answer{Reply: "ok"}, nil
			case <-ctx.Done():
				return Answer{}, ctx.Err()
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.r.Handle(ctx, Message{SessionKey: fmt.Sprintf("s%d", i), ClientRequestID: "c", Content: "x"}, agent)
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	})
}

func TestDuplicateLeavesOwnerToFinish(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		entered, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "pay 10"},
				func(ctx context.Context, run *Run) (Answer, error) {
					close(entered)
					<-release
					_, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":10}`))
					return Answer{Reply: "paid"}, err
				})
			done <- err
		}()
		<-entered
		before := snapshot(t, e)
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "pay 10"},
			func(context.Context, *Run) (Answer, error) { t.Error("duplicate ran"); return Answer{}, nil })
		require.ErrorIs(t, err, ErrInFlight)
		require.ErrorIs(t, err, lease.ErrHeld)
		// A different request in the same session: busy, and it changes nothing of the owner's.
		_, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "other", Content: "x"},
			func(context.Context, *Run) (Answer, error) { t.Error("ran while busy"); return Answer{}, nil })
		require.ErrorAs(t, err, new(*session.BusyError))
		assert.Equal(t, before, snapshotExcept(t, e, "other"), "the owner's rows are untouched")
		close(release)
		require.NoError(t, <-done)
		st, held := e.status(t, "s", "c")
		assert.Equal(t, "success", st)
		assert.False(t, held)
		assert.Equal(t, 1, e.ledgerRows(t))
	})
}

func TestFingerprintMismatch(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		agent := func(ctx context.Context, run *Run) (Answer, error) { return Answer{Reply: run.Content()}, nil }
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "lunch 35"}, agent)
		require.NoError(t, err)
		before := snapshot(t, e)
		_, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "lunch 36"}, agent)
		require.ErrorIs(t, err, ErrFingerprintMismatch)
		assert.Equal(t, before, snapshot(t, e))
	})
}

func TestErrorThenRetryAndSessionFreedAtOnce(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second) // a stuck session would block for 30s
		ctx := bg(t)
		var calls atomic.Int64
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			if calls.Add(1) == 1 {
				return Answer{}, errors.New("model unavailable")
			}
			return Answer{Reply: "ok"}, nil
		}
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, agent)
		require.ErrorIs(t, err, ErrAgentFailed)
		st, held := e.status(t, "s", "c")
		assert.Equal(t, "error", st)
		assert.False(t, held)
		// The session is free at once: another request runs now, not after the TTL.
		_, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c2", Content: "y"}, agent)
		require.NoError(t, err)
		out, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, agent)
		require.NoError(t, err)
		assert.True(t, out.Resumed)
		assert.Equal(t, int64(2), out.Attempt)
		assert.Equal(t, "ok", out.Reply)
	})
}

func TestBusyRequestIsFreeForRetry(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		ctx := bg(t)
		entered, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "a", Content: "x"},
				func(ctx context.Context, run *Run) (Answer, error) {
					close(entered)
					<-release
					return Answer{Reply: "a"}, nil
				})
			done <- err
		}()
		<-entered
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "b", Content: "y"},
			func(context.Context, *Run) (Answer, error) { return Answer{Reply: "b"}, nil })
		require.ErrorAs(t, err, new(*session.BusyError))
		_, err = e.r.find(ctx, Message{SessionKey: "s", ClientRequestID: "b"})
		require.ErrorIs(t, err, sql.ErrNoRows, "the busy request left no row")
		close(release)
		require.NoError(t, <-done)
		out, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "b", Content: "y"},
			func(context.Context, *Run) (Answer, error) { return Answer{Reply: "b"}, nil })
		require.NoError(t, err)
		assert.Equal(t, "b", out.Reply)
		assert.False(t, out.Resumed, "nothing had run before")
		assert.Equal(t, int64(1), out.Attempt)
	})
}

func TestCrashTakeoverDoesNotRepeatSideEffect(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		ttl := 400 * time.Millisecond
		e := newEnv(t, db, ttl)
		ctx := bg(t)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "pay 35"}
		var crashed *Run
		_, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":35.0}`))
			require.NoError(t, err)
			require.False(t, res.Reused)
			crashed = run
			run.abandon() // the process dies here, holding its leases
			return Answer{}, errors.New("crashed")
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 1, e.ledgerRows(t))

		// While the dead holder's lease is live, the request is in flight.
		_, err = e.r.Handle(ctx, msg, func(context.Context, *Run) (Answer, error) { return Answer{}, nil })
		require.ErrorIs(t, err, ErrInFlight)

		// After the TTL, a new run takes over; the same tool call returns
		// the stored result instead of writing again.
		// (The session was taken a moment after the request, so it expires
		// a moment later: wait for both.)
		waitFor(t, func() bool {
			_, held := e.status(t, "s", "c")
			ss, err := e.r.sessions.Inspect(ctx, db, "s")
			require.NoError(t, err)
			return !held && !ss.Held
		})
		var reused bool
		var prior []ToolRecord
		out, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			prior = run.Prior()
			res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":3.5e1}`))
			if err != nil {
				return Answer{}, err
			}
			reused = res.Reused
			return Answer{Reply: "paid"}, nil
		})
		require.NoError(t, err)
		assert.True(t, out.Resumed)
		assert.True(t, reused, "35.0 and 3.5e1 are one call, already committed")
		require.Len(t, prior, 1)
		assert.Equal(t, "write", prior[0].Tool)
		assert.Equal(t, 1, e.ledgerRows(t), "the side effect is not repeated")
		assert.Equal(t, int64(1), e.writes.Load())

		// The dead run's late writes are refused.
		_, err = crashed.CallTool(ctx, "write", json.RawMessage(`{"amount":99}`))
		require.ErrorIs(t, err, lease.ErrLost)
		_, err = e.r.req.Transition(ctx, db, crashed.req, lease.ChangeOptions{From: []string{"success", "processing"}, To: "error"})
		require.ErrorIs(t, err, lease.ErrLost)
		require.ErrorIs(t, e.r.sessions.Release(ctx, db, crashed.sess), lease.ErrLost)
		assert.Equal(t, 1, e.ledgerRows(t))
		st, _ := e.status(t, "s", "c")
		assert.Equal(t, "success", st)
	})
}

func TestBadInput(t *testing.T) {
	db := testdb.Open(t, lease.SQLite)
	e := newEnv(t, db, 5*time.Second)
	agent := func(context.Context, *Run) (Answer, error) { return Answer{}, nil }
	for name, m := range map[string]Message{
		"no session": {ClientRequestID: "c"},
		"no client":  {SessionKey: "s"},
		"long":       {SessionKey: string(make([]byte, 300)), ClientRequestID: "c"},
		"bad utf8":   {SessionKey: "s", ClientRequestID: "c", Content: "\xff"},
	} {
		_, err := e.r.Handle(context.Background(), m, agent)
		assert.ErrorIs(t, err, lease.ErrInvalid, name)
	}
	_, err := e.r.Handle(context.Background(), Message{SessionKey: "s", ClientRequestID: "c"}, nil)
	assert.ErrorIs(t, err, lease.ErrInvalid)
	var n int
	require.NoError(t, db.Get(&n, "SELECT COUNT(*) FROM rowlease_request"))
	assert.Zero(t, n)
	_, err = New(Config{DB: db, TTL: time.Second, HeartbeatInterval: time.Second})
	assert.ErrorIs(t, err, lease.ErrInvalid, "interval not well inside the TTL")
	_, err = New(Config{})
	assert.ErrorIs(t, err, lease.ErrInvalid)
}

// TestDuplicatesOfARefusedRequest: while the session is busy, a request's
// fresh row is created and deleted again by each refused send; duplicates
// of it racing with that deletion must still get a conflict, never an
// error about a row that vanished.
func TestDuplicatesOfARefusedRequest(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		ctx := bg(t)
		entered, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "owner", Content: "x"},
				func(ctx context.Context, run *Run) (Answer, error) {
					close(entered)
					<-release
					return Answer{Reply: "ok"}, nil
				})
			done <- err
		}()
		<-entered
		const n = 16
		var wg sync.WaitGroup
		errs := make(chan error, n*20)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "dup", Content: "y"},
						func(context.Context, *Run) (Answer, error) { return Answer{}, errors.New("ran while busy") })
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if !errors.As(err, new(*session.BusyError)) && !errors.Is(err, ErrInFlight) {
				t.Errorf("want a conflict, got %v", err)
			}
		}
		close(release)
		require.NoError(t, <-done)
	})
}

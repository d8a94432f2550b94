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

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// approval is the answer the agents of these tests wait for.
type approval struct {
	Approved bool `json:"approved"`
}

// approver is an agent that books 1 at once, asks the model (a counted
// step), then asks a person whether to book 4800, and books it if
// approved. models counts the model's calls, runs the agent's calls.
type approver struct {
	models, runs atomic.Int64
	within       time.Duration
}

func (a *approver) agent(ctx context.Context, run *Run) (Answer, error) {
	a.runs.Add(1)
	if _, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":1}`)); err != nil {
		return Answer{}, err
	}
	amount, err := Step(ctx, run, "model", func(context.Context) (int, error) {
		a.models.Add(1)
		return 4800, nil
	})
	if err != nil {
		return Answer{}, err
	}
	var opts []AwaitOption
	if a.within > 0 {
		opts = append(opts, Within(a.within))
	}
	ok, err := Await[approval](ctx, run, "approve", map[string]any{"text": fmt.Sprintf("Book %d?", amount), "amount": amount}, opts...)
	var expired *WaitExpiredError
	switch {
	case errors.As(err, &expired):
		return Answer{Reply: "expired"}, nil
	case err != nil:
		return Answer{}, err
	case !ok.Approved:
		return Answer{Reply: "denied"}, nil
	}
	if _, err := run.CallTool(ctx, "write", json.RawMessage(fmt.Sprintf(`{"amount":%d}`, amount))); err != nil {
		return Answer{}, err
	}
	return Answer{Reply: "booked"}, nil
}

// TestAwaitAnswerRunsOnOnce: a run that asks stops as waiting, holding no
// lease, with its question shown; the answer runs it on with the step
// replayed and the call before the wait not repeated; the same answer
// again replays the outcome; another answer, another name, an unknown
// message and bad input are refused, and change nothing.
func TestAwaitAnswerRunsOnOnce(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second)
		ctx := bg(t)
		a := &approver{}
		r := e.newRunner(t, func(c *Config) { c.Agent = a.agent })
		msg := Message{SessionKey: "s", ClientRequestID: "m", Content: "rent"}

		out, err := r.Handle(ctx, msg, nil)
		require.NoError(t, err)
		require.NotNil(t, out.Waiting, "the run stopped to wait")
		assert.Equal(t, "approve", out.Waiting.Name)
		assert.JSONEq(t, `{"text":"Book 4800?","amount":4800}`, string(out.Waiting.Question))
		assert.Nil(t, out.Waiting.Deadline)
		assert.Empty(t, out.Reply)
		assert.Equal(t, 1, e.ledgerRows(t))

		st, err := r.Status(ctx, "s", "m")
		require.NoError(t, err)
		assert.Equal(t, StateWaiting, st.State)
		assert.False(t, st.State.Final())
		assert.False(t, st.Live)
		require.NotNil(t, st.Waiting)
		assert.Equal(t, "approve", st.Waiting.Name)
		status, held := e.status(t, "s", "m")
		assert.Equal(t, schema.StoredWaiting, status)
		assert.False(t, held, "no request lease while it waits")
		sess, err := r.sessions.Inspect(ctx, db, "s")
		require.NoError(t, err)
		assert.False(t, sess.Held, "no session lease while it waits")
		w, err := r.Wait(ctx, "s", "m")
		require.NoError(t, err, "Wait returns on waiting")
		assert.Equal(t, StateWaiting, w.State)

		// A resend answers with the question, and runs nothing.
		again, err := r.Handle(ctx, msg, nil)
		require.NoError(t, err)
		require.NotNil(t, again.Waiting)
		assert.Equal(t, int64(1), a.runs.Load())

		// Refused before any change: another name, bad input, unknown.
		_, err = r.Answer(ctx, "s", "m", "other", approval{Approved: true})
		var nw *NotWaitingError
		require.ErrorAs(t, err, &nw)
		assert.Equal(t, "approve", nw.Waiting)
		require.ErrorIs(t, err, lease.ErrState)
		_, err = r.Answer(ctx, "s", "m", "", true)
		require.ErrorIs(t, err, lease.ErrInvalid)
		_, err = r.Answer(ctx, "s", "m", "approve", func() {})
		require.ErrorIs(t, err, lease.ErrInvalid)
		_, err = r.Answer(ctx, "s", "nobody", "approve", true)
		require.ErrorIs(t, err, lease.ErrNotFound)
		st, err = r.Status(ctx, "s", "m")
		require.NoError(t, err)
		assert.Equal(t, StateWaiting, st.State)

		out, err = r.Answer(ctx, "s", "m", "approve", approval{Approved: true})
		require.NoError(t, err)
		assert.Equal(t, "booked", out.Reply)
		assert.Nil(t, out.Waiting)
		assert.Equal(t, 2, e.ledgerRows(t), "the call before the wait ran once, the approved one once")
		assert.Equal(t, int64(1), a.models.Load(), "the model step was replayed")
		assert.Equal(t, int64(2), e.writes.Load())

		// The same answer, written otherwise: the stored outcome.
		out, err = r.Answer(ctx, "s", "m", "approve", json.RawMessage(` { "approved" : true } `))
		require.NoError(t, err)
		assert.Equal(t, "booked", out.Reply)
		assert.True(t, out.Replayed)
		// Another answer: refused, nothing changes.
		_, err = r.Answer(ctx, "s", "m", "approve", approval{Approved: false})
		var ae *AnsweredError
		require.ErrorAs(t, err, &ae)
		require.ErrorIs(t, err, lease.ErrExists)
		// A name never asked, on a finished request.
		_, err = r.Answer(ctx, "s", "m", "other", true)
		require.ErrorAs(t, err, &nw)
		assert.Equal(t, StateSucceeded, nw.State)
		assert.Equal(t, 2, e.ledgerRows(t))
		assert.Equal(t, int64(2), a.runs.Load())
	})
}

// TestAwaitDeniedBooksNothing: a denial runs the rest, which books
// nothing after the wait.
func TestAwaitDeniedBooksNothing(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second)
		ctx := bg(t)
		a := &approver{}
		r := e.newRunner(t, func(c *Config) { c.Agent = a.agent })
		out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "m", Content: "rent"}, nil)
		require.NoError(t, err)
		require.NotNil(t, out.Waiting)
		out, err = r.Answer(ctx, "s", "m", "approve", approval{Approved: false})
		require.NoError(t, err)
		assert.Equal(t, "denied", out.Reply)
		assert.Equal(t, 1, e.ledgerRows(t), "only the call before the wait")
	})
}

// TestAnswerTwiceAtOnce: the same answer from many devices at once (two
// processes) runs the rest once, and every one gets its outcome.
func TestAnswerTwiceAtOnce(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second)
		ctx := bg(t)
		a := &approver{}
		r1 := e.newRunner(t, func(c *Config) { c.Agent = a.agent })
		r2 := e.newRunner(t, func(c *Config) { c.Agent = a.agent })
		out, err := r1.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "m", Content: "rent"}, nil)
		require.NoError(t, err)
		require.NotNil(t, out.Waiting)
		const n = 8
		var wg sync.WaitGroup
		replies := make(chan string, n)
		errs := make(chan error, n)
		for i := range n {
			r := r1
			if i%2 == 1 {
				r = r2
			}
			wg.Go(func() {
				out, err := r.Answer(ctx, "s", "m", "approve", approval{Approved: true})
				if err != nil {
					errs <- err
					return
				}
				replies <- out.Reply
			})
		}
		wg.Wait()
		close(errs)
		close(replies)
		for err := range errs {
			require.NoError(t, err)
		}
		for reply := range replies {
			assert.Equal(t, "booked", reply)
		}
		assert.Equal(t, 2, e.ledgerRows(t), "the rest ran once")
		assert.Equal(t, int64(2), a.runs.Load())
	})
}

// TestAwaitAndTheSession: what a new message of a session whose request
// waits gets, by its policy. Reject: it runs at once (the session is
// free), and the wait stays open. Queue: it is queued behind the wait and
// runs once the waiting request has finished. Interrupt: the wait ends
// interrupted, and the message runs in its place; an answer after it is
// refused. Cancel of a waiting request cancels it at once.
func TestAwaitAndTheSession(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second)
		ctx := bg(t)
		a := &approver{}
		rc := &recorder{}
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			if run.Content() == "rent" {
				return a.agent(ctx, run)
			}
			return rc.agent(ctx, run)
		}
		r := e.newRunner(t, func(c *Config) { c.Agent = agent })
		require.NoError(t, r.Start(ctx))
		wait := func(session, id string) {
			out, err := r.Handle(ctx, Message{SessionKey: session, ClientRequestID: id, Content: "rent"}, nil)
			require.NoError(t, err)
			require.NotNil(t, out.Waiting)
		}

		t.Run("reject", func(t *testing.T) {
			wait("reject", "w")
			out, err := r.Handle(ctx, Message{SessionKey: "reject", ClientRequestID: "next", Content: "hello"}, nil)
			require.NoError(t, err)
			assert.Equal(t, "ok hello", out.Reply)
			st, err := r.Status(ctx, "reject", "w")
			require.NoError(t, err)
			assert.Equal(t, StateWaiting, st.State, "the wait stays open")
			out, err = r.Answer(ctx, "reject", "w", "approve", approval{Approved: true})
			require.NoError(t, err)
			assert.Equal(t, "booked", out.Reply)
		})
		t.Run("queue", func(t *testing.T) {
			wait("queue", "w")
			out, err := r.Handle(ctx, Message{SessionKey: "queue", ClientRequestID: "next", Content: "hello", OnBusy: Queue}, nil)
			require.NoError(t, err)
			require.True(t, out.Queued, "queued behind the wait")
			assert.Equal(t, 0, out.Position)
			// The dispatcher does not start it while the wait is open.
			st, err := r.Status(ctx, "queue", "next")
			require.NoError(t, err)
			assert.Equal(t, StateQueued, st.State)
			out, err = r.Answer(ctx, "queue", "w", "approve", approval{Approved: false})
			require.NoError(t, err)
			assert.Equal(t, "denied", out.Reply)
			st, err = r.Wait(ctx, "queue", "next")
			require.NoError(t, err)
			assert.Equal(t, StateSucceeded, st.State, "it ran after the wait was answered")
		})
		t.Run("interrupt", func(t *testing.T) {
			wait("interrupt", "w")
			out, err := r.Handle(ctx, Message{SessionKey: "interrupt", ClientRequestID: "next", Content: "hello", OnBusy: Interrupt}, nil)
			require.NoError(t, err)
			assert.Equal(t, "ok hello", out.Reply)
			st, err := r.Status(ctx, "interrupt", "w")
			require.NoError(t, err)
			assert.Equal(t, StateInterrupted, st.State)
			assert.Equal(t, "next", st.InterruptedBy)
			_, err = r.Answer(ctx, "interrupt", "w", "approve", approval{Approved: true})
			var nw *NotWaitingError
			require.ErrorAs(t, err, &nw)
			_, err = r.Handle(ctx, Message{SessionKey: "interrupt", ClientRequestID: "w", Content: "rent"}, nil)
			require.ErrorAs(t, err, new(*InterruptedError))
		})
		t.Run("cancel", func(t *testing.T) {
			wait("cancel", "w")
			out, err := r.Handle(ctx, Message{SessionKey: "cancel", ClientRequestID: "next", Content: "hello", OnBusy: Queue}, nil)
			require.NoError(t, err)
			require.True(t, out.Queued)
			st, err := r.Cancel(ctx, "cancel", "w")
			require.NoError(t, err)
			assert.Equal(t, StateCancelled, st.State)
			_, err = r.Answer(ctx, "cancel", "w", "approve", approval{Approved: true})
			require.ErrorAs(t, err, new(*NotWaitingError))
			st, err = r.Wait(ctx, "cancel", "next")
			require.NoError(t, err)
			assert.Equal(t, StateSucceeded, st.State, "the queue behind the cancelled wait went on")
		})
		assert.Equal(t, 5, e.ledgerRows(t), "one booking before each of the four waits, and the one approved")
	})
}

// TestAwaitDeadline: a wait whose deadline passes is run on by a Started
// Runner: Await returns *WaitExpiredError, the agent replies so, and
// nothing after the wait is booked; an answer after the deadline is
// refused.
func TestAwaitDeadline(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second)
		ctx := bg(t)
		// A deadline that has passed by the time Handle returns: no answer
		// can come before it.
		a := &approver{within: time.Millisecond}
		r := e.newRunner(t, func(c *Config) { c.Agent = a.agent })
		out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "m", Content: "rent"}, nil)
		require.NoError(t, err)
		require.NotNil(t, out.Waiting)
		require.NotNil(t, out.Waiting.Deadline)
		st, err := r.Status(ctx, "s", "m")
		require.NoError(t, err)
		require.NotNil(t, st.Waiting.Deadline)
		assert.WithinDuration(t, time.Now(), *st.Waiting.Deadline, 2*time.Second)
		// A millisecond is not always gone by now (SQLite runs in this
		// process): let the deadline pass, by the clock it is judged by.
		require.Eventually(t, func() bool {
			var passed bool
			require.NoError(t, db.Get(&passed, db.Rebind("SELECT COUNT(*) FROM "+schema.RequestTable+" WHERE "+
				schema.ColClientRequestID+" = ? AND wait_until < "+map[lease.Dialect]string{
				lease.MySQL: "UTC_TIMESTAMP(6)", lease.Postgres: "statement_timestamp()",
				lease.SQLite: "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)",
			}[e.d]), "m"))
			return passed
		}, 5*time.Second, time.Millisecond)

		// Not started: nothing runs it on; an answer after the deadline
		// is refused, and writes nothing.
		_, err = r.Answer(ctx, "s", "m", "approve", approval{Approved: true})
		require.ErrorAs(t, err, new(*WaitExpiredError))
		st, err = r.Status(ctx, "s", "m")
		require.NoError(t, err)
		assert.Equal(t, StateWaiting, st.State)

		require.NoError(t, r.Start(ctx))
		require.Eventually(t, func() bool {
			st, err = r.Status(ctx, "s", "m")
			return err == nil && st.State == StateSucceeded
		}, 20*time.Second, 20*time.Millisecond)
		assert.Equal(t, "expired", st.Reply)
		assert.Equal(t, 1, e.ledgerRows(t))
		assert.Equal(t, int64(1), a.models.Load())
		_, err = r.Answer(ctx, "s", "m", "approve", approval{Approved: true})
		require.ErrorAs(t, err, new(*WaitExpiredError), "the wait was settled by its expiry")
	})
}

// TestAwaitNames: a name is asked once per request; Step may not take a
// wait's name; bad names and deadlines are refused.
func TestAwaitNames(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second)
		ctx := bg(t)
		var errs []error
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			_, err := run.Step(ctx, "await:x", func(context.Context) (json.RawMessage, error) { return nil, nil })
			errs = append(errs, err)
			_, err = run.Await(ctx, "", nil)
			errs = append(errs, err)
			_, err = run.Await(ctx, "x", nil, Within(-time.Second))
			errs = append(errs, err)
			if _, err := Await[bool](ctx, run, "x", "first?"); err != nil {
				return Answer{}, err
			}
			_, err = run.Await(ctx, "x", "again?")
			errs = append(errs, err)
			return Answer{Reply: "done"}, nil
		}
		r := e.newRunner(t, func(c *Config) { c.Agent = agent })
		out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "m", Content: "x"}, nil)
		require.NoError(t, err)
		require.NotNil(t, out.Waiting)
		require.Len(t, errs, 3)
		for _, err := range errs {
			require.ErrorIs(t, err, lease.ErrInvalid)
		}
		errs = nil
		out, err = r.Answer(ctx, "s", "m", "x", true)
		require.NoError(t, err)
		assert.Equal(t, "done", out.Reply)
		require.Len(t, errs, 4)
		require.ErrorIs(t, errs[3], lease.ErrInvalid, "a name is asked once per request")
	})
}

// TestAwaitAfterWaitingRefusesWork: once Await said ErrWaiting, the run's
// later steps and tool calls are refused, and the request waits even if
// the agent goes on and returns an answer.
func TestAwaitAfterWaitingRefusesWork(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second)
		ctx := bg(t)
		var stepErr, toolErr error
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			_, err := run.Await(ctx, "ok", nil)
			require.ErrorIs(t, err, ErrWaiting)
			_, stepErr = run.Step(ctx, "after", func(context.Context) (json.RawMessage, error) { return nil, nil })
			_, toolErr = run.CallTool(ctx, "write", json.RawMessage(`{"amount":9}`))
			return Answer{Reply: "ignored the wait"}, nil
		}
		r := e.newRunner(t, func(c *Config) { c.Agent = agent })
		out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "m", Content: "x"}, nil)
		require.NoError(t, err)
		require.NotNil(t, out.Waiting)
		assert.Empty(t, out.Reply)
		require.ErrorIs(t, stepErr, ErrWaiting)
		require.ErrorIs(t, toolErr, ErrWaiting)
		assert.Equal(t, 0, e.ledgerRows(t))
	})
}

// TestSweepWaiting: a request that waits longer than the retention is
// swept (expired), and the queue behind it goes on.
func TestSweepWaiting(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second)
		ctx := bg(t)
		a := &approver{}
		r := e.newRunner(t, func(c *Config) { c.Agent = a.agent })
		out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "m", Content: "rent"}, nil)
		require.NoError(t, err)
		require.NotNil(t, out.Waiting)
		require.Eventually(t, func() bool {
			n, err := r.Sweep(ctx, time.Millisecond)
			return err == nil && n == 1
		}, 10*time.Second, 20*time.Millisecond)
		st, err := r.Status(ctx, "s", "m")
		require.NoError(t, err)
		assert.Equal(t, StateExpired, st.State)
		assert.Nil(t, st.Waiting)
		_, err = r.Answer(ctx, "s", "m", "approve", true)
		require.ErrorAs(t, err, new(*NotWaitingError))
	})
}

// TestThousandWaitsCostNothing: 1,000 requests waiting for an answer at
// once cost no statement at all per heartbeat interval: no lease is held,
// so nothing is renewed and nothing is read while nobody answers.
func TestThousandWaitsCostNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("parks 1,000 runs per dialect")
	}
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			c := &countdb.Counter{}
			db := testdb.OpenWith(t, d, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
			ctx := context.Background()
			require.NoError(t, schema.Apply(ctx, db, d))
			const interval = 100 * time.Millisecond
			agent := func(ctx context.Context, run *Run) (Answer, error) {
				_, err := run.Await(ctx, "approve", map[string]string{"text": "ok?"})
				return Answer{}, err
			}
			r, err := New(Config{DB: db, TTL: 10 * time.Second, HeartbeatInterval: interval, Agent: agent,
				Session: session.Config{AutoCreate: true}, ReleaseTimeout: time.Minute})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, r.Close(context.Background())) })
			var wg sync.WaitGroup
			sem := make(chan struct{}, 8)
			errs := make(chan error, 1000)
			for i := range 1000 {
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					out, err := r.Handle(ctx, Message{SessionKey: fmt.Sprintf("s%d", i), ClientRequestID: "c", Content: "x"}, nil)
					if err == nil && out.Waiting == nil {
						err = errors.New("not waiting")
					}
					if err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			var waiting int
			require.NoError(t, db.Get(&waiting, "SELECT COUNT(*) FROM "+schema.RequestTable+" WHERE status = 'waiting'"))
			require.Equal(t, 1000, waiting)
			c.Reset()
			time.Sleep(5 * interval) // a window of five heartbeat intervals: what is counted is statements, not time
			st := c.Stats()
			t.Logf("1,000 waiting requests, 5 heartbeat intervals: %d statements, %d round trips", st.Statements,
				st.Statements+st.Begins+st.Commits+st.Rollbacks+st.Prepares)
			assert.Zero(t, st.Statements+st.Begins+st.Commits+st.Rollbacks+st.Prepares)
		})
	}
}

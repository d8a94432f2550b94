package request

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// bookTwice is the agent of "two coffees, 5 each": it books
// {"amount":5} twice, and records what CallTool returned.
type bookTwice struct {
	mu      sync.Mutex
	results []toolexec.Result
}

func (b *bookTwice) call(ctx context.Context, run *Run) (toolexec.Result, error) {
	res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":5}`))
	if err == nil {
		b.mu.Lock()
		b.results = append(b.results, res)
		b.mu.Unlock()
	}
	return res, err
}

func (b *bookTwice) got() []toolexec.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]toolexec.Result(nil), b.results...)
}

// ledgerRowsOf counts the ledger entries of one request.
func (e *env) ledgerRowsOf(t *testing.T, requestID string) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.Get(&n, e.d.Rebind("SELECT COUNT(*) FROM ledger_entry WHERE request_id = ?"), requestID))
	return n
}

// occurrencesOf reads the occurrences of a request's tool executions, by
// execution id.
func (e *env) occurrencesOf(t *testing.T, requestID string) map[string]int {
	t.Helper()
	rows, err := e.db.Queryx(e.d.Rebind("SELECT "+schema.ColID+", "+schema.ColOccurrence+" FROM "+schema.ToolExecutionTable+
		" WHERE "+schema.ColRequestID+" = ?"), requestID)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// TestTwoIdenticalCallsInOneRunAreTwoEffects (issue 31, item 3): "two
// coffees, 5 each". The model calls book({"amount":5}) twice in one run:
// two ledger rows, the second call not answered from the first. A resend
// of the finished request books nothing more.
func TestTwoIdenticalCallsInOneRunAreTwoEffects(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 10*time.Second)
		ctx := bg(t)
		b := &bookTwice{}
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			for i := 0; i < 2; i++ {
				if _, err := b.call(ctx, run); err != nil {
					return Answer{}, err
				}
			}
			return Answer{Reply: "two coffees booked"}, nil
		}
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "two coffees, 5 each"}
		out, err := e.r.Handle(ctx, msg, agent)
		require.NoError(t, err)
		res := b.got()
		require.Len(t, res, 2)
		assert.False(t, res[0].Reused)
		assert.False(t, res[1].Reused, "the second coffee is booked, not answered from the first")
		assert.NotEqual(t, res[0].ExecutionID, res[1].ExecutionID)
		assert.Equal(t, 2, e.ledgerRowsOf(t, out.RequestID), "two effects")
		assert.Equal(t, map[string]int{res[0].ExecutionID: 0, res[1].ExecutionID: 1}, e.occurrencesOf(t, out.RequestID))

		again, err := e.r.Handle(ctx, msg, agent)
		require.NoError(t, err)
		assert.True(t, again.Replayed)
		assert.Equal(t, "two coffees booked", again.Reply)
		assert.Len(t, b.got(), 2, "the agent did not run again")
		assert.Equal(t, 2, e.ledgerRowsOf(t, out.RequestID), "the resend books nothing more")
		assert.Equal(t, int64(2), e.writes.Load())
	})
}

// TestResumedRunMeetsEachIdenticalCall: a run books {"amount":5} twice
// and dies after the first or the second call committed; the run that
// resumes the request makes the same two calls and meets the same two
// occurrences: the committed ones come back Reused, the other runs. Two
// effects in all, never one, three or four.
func TestResumedRunMeetsEachIdenticalCall(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second) // the dead run's leases expire after it
		ctx := bg(t)
		for _, committed := range []int{1, 2} {
			t.Run(fmt.Sprintf("dies after %d", committed), func(t *testing.T) {
				writes := e.writes.Load()
				msg := Message{SessionKey: fmt.Sprintf("s-%d", committed), ClientRequestID: "c", Content: "two coffees, 5 each"}
				first := &bookTwice{}
				var requestID string
				_, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
					requestID = run.RequestID()
					for i := 0; i < committed; i++ {
						if _, err := first.call(ctx, run); err != nil {
							return Answer{}, err
						}
					}
					run.abandon() // the process dies here, holding its leases
					return Answer{}, errors.New("crashed")
				})
				require.Error(t, err)
				require.Len(t, first.got(), committed)
				require.Equal(t, committed, e.ledgerRowsOf(t, requestID))

				waitFor(t, func() bool {
					_, held := e.status(t, msg.SessionKey, msg.ClientRequestID)
					ss, err := e.r.sessions.Inspect(ctx, db, msg.SessionKey)
					require.NoError(t, err)
					return !held && !ss.Held
				})
				resumed := &bookTwice{}
				var prior []ToolRecord
				out, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
					prior = run.Prior()
					for i := 0; i < 2; i++ {
						if _, err := resumed.call(ctx, run); err != nil {
							return Answer{}, err
						}
					}
					return Answer{Reply: "two coffees booked"}, nil
				})
				require.NoError(t, err)
				assert.True(t, out.Resumed)
				assert.Equal(t, requestID, out.RequestID)
				res := resumed.got()
				require.Len(t, res, 2)
				for i, r := range res {
					if i < committed {
						assert.True(t, r.Reused, "call %d committed before the death", i)
						assert.Equal(t, first.got()[i].ExecutionID, r.ExecutionID, "call %d meets its own row", i)
					} else {
						assert.False(t, r.Reused, "call %d never committed: it runs", i)
					}
				}
				assert.NotEqual(t, res[0].ExecutionID, res[1].ExecutionID)
				assert.Equal(t, 2, e.ledgerRowsOf(t, requestID), "two effects in all")
				assert.Equal(t, int64(2), e.writes.Load()-writes)
				assert.Equal(t, map[string]int{res[0].ExecutionID: 0, res[1].ExecutionID: 1}, e.occurrencesOf(t, requestID))

				require.Len(t, prior, committed)
				for i, p := range prior {
					assert.Equal(t, i, p.Occurrence)
					assert.Equal(t, first.got()[i].ExecutionID, p.ExecutionID)
				}
			})
		}
	})
}

// TestRetryOfAnIdenticalCallIsTheSameOccurrence: a call that did not
// succeed gives its occurrence back, so the agent's retry of it is the
// same call, not an effect beside it. Here the database went away inside
// the side effect (nothing committed, the call left free); the agent
// retries, the retry commits, and the run dies. The resumed run, which
// never saw the failure, makes the call once and gets the stored result:
// one effect, where an occurrence of its own for the retry would have
// left the first occurrence to run again.
func TestRetryOfAnIdenticalCallIsTheSameOccurrence(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 2*time.Second) // the dead run's leases expire after it
		ctx := bg(t)
		var broken atomic.Bool
		broken.Store(true)
		var books atomic.Int64
		require.NoError(t, e.tools.Register("book", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
			if broken.CompareAndSwap(true, false) {
				return nil, fmt.Errorf("insert: %w", driver.ErrBadConn)
			}
			if _, err := x.Tx.ExecContext(ctx, e.d.Rebind("INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)"), x.Call.RequestID, "5"); err != nil {
				return nil, err
			}
			books.Add(1)
			return json.RawMessage(`{"ok":true}`), nil
		}))
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "one coffee"}
		var requestID, executionID string
		_, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			requestID = run.RequestID()
			_, err := run.CallTool(ctx, "book", json.RawMessage(`{"amount":5}`))
			require.True(t, lease.IsUnavailable(err), "%v", err)
			res, err := run.CallTool(ctx, "book", json.RawMessage(`{"amount":5}`)) // the agent's retry
			require.NoError(t, err)
			executionID = res.ExecutionID
			run.abandon()
			return Answer{}, errors.New("crashed")
		})
		require.Error(t, err)
		assert.Equal(t, map[string]int{executionID: 0}, e.occurrencesOf(t, requestID), "the retry is the same row")

		waitFor(t, func() bool {
			_, held := e.status(t, msg.SessionKey, msg.ClientRequestID)
			ss, err := e.r.sessions.Inspect(ctx, db, msg.SessionKey)
			require.NoError(t, err)
			return !held && !ss.Held
		})
		var reused bool
		out, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			res, err := run.CallTool(ctx, "book", json.RawMessage(`{"amount":5}`))
			if err != nil {
				return Answer{}, err
			}
			reused = res.Reused
			return Answer{Reply: "booked"}, nil
		})
		require.NoError(t, err)
		assert.True(t, out.Resumed)
		assert.True(t, reused)
		assert.Equal(t, 1, e.ledgerRowsOf(t, requestID), "one effect")
		assert.Equal(t, int64(1), books.Load())
	})
}

// TestParallelIdenticalCallsAreNumberedByArrival: identical calls made at
// once by one run each get an occurrence of their own, in the order they
// entered CallTool: four calls, four effects, occurrences 0 to 3.
func TestParallelIdenticalCallsAreNumberedByArrival(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 10*time.Second)
		ctx := bg(t)
		const n = 4
		b := &bookTwice{}
		out, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "four coffees"},
			func(ctx context.Context, run *Run) (Answer, error) {
				errs := make(chan error, n)
				for i := 0; i < n; i++ {
					go func() {
						for {
							_, err := b.call(ctx, run)
							if !errors.As(err, new(*toolexec.TransientError)) {
								errs <- err // a transient error gave its occurrence back: retry it
								return
							}
						}
					}()
				}
				for i := 0; i < n; i++ {
					if err := <-errs; err != nil {
						return Answer{}, err
					}
				}
				return Answer{Reply: "booked"}, nil
			})
		require.NoError(t, err)
		res := b.got()
		require.Len(t, res, n)
		rows := e.occurrencesOf(t, out.RequestID)
		var occ []int
		for _, r := range res {
			assert.False(t, r.Reused)
			o, ok := rows[r.ExecutionID]
			require.True(t, ok, "a row of its own")
			occ = append(occ, o)
		}
		sort.Ints(occ)
		assert.Equal(t, []int{0, 1, 2, 3}, occ)
		assert.Equal(t, n, e.ledgerRowsOf(t, out.RequestID))
	})
}

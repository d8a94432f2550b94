package request

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
)

// waitFree waits until the request's lease and its session's lease have
// both expired (a crashed run's leases).
func (e *env) waitFree(t *testing.T, session, client string) {
	t.Helper()
	waitFor(t, func() bool {
		_, held := e.status(t, session, client)
		ss, err := e.r.sessions.Inspect(context.Background(), e.db, session)
		require.NoError(t, err)
		return !held && !ss.Held
	})
}

// modelStep is a step that stands for a model round: it counts its calls
// and answers something new every time it is asked (as a real model may).
func modelStep(calls *atomic.Int64, amount string) func(context.Context) (json.RawMessage, error) {
	return func(context.Context) (json.RawMessage, error) {
		n := calls.Add(1)
		return json.RawMessage(fmt.Sprintf(`{"tool":"write","amount":%s,"note":"asked %d"}`, amount, n)), nil
	}
}

// TestStepReplayedAfterTakeover: a run records two steps and a tool call
// and dies; the run that takes the request over gets both steps back
// without calling their functions, so the tool call it makes from them is
// the same call, and the side effect is written once, even though the
// "model" would answer differently if asked again.
func TestStepReplayedAfterTakeover(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		ttl := 500 * time.Millisecond
		e := newEnv(t, db, ttl)
		ctx := bg(t)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "lunch 35"}
		var calls atomic.Int64
		amounts := []string{"35", "36", "37", "38"} // what the model says, differently every time
		agent := func(crash bool) Agent {
			return func(ctx context.Context, run *Run) (Answer, error) {
				out, err := run.Step(ctx, "model-1", modelStep(&calls, amounts[calls.Load()]))
				if err != nil {
					return Answer{}, err
				}
				var call struct {
					Amount json.Number `json:"amount"`
				}
				require.NoError(t, json.Unmarshal(out, &call))
				if _, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":`+call.Amount.String()+`}`)); err != nil {
					return Answer{}, err
				}
				note, err := run.Step(ctx, "model-2", func(context.Context) (json.RawMessage, error) {
					calls.Add(1)
					return json.RawMessage(`"noted"`), nil
				})
				if err != nil {
					return Answer{}, err
				}
				if crash {
					run.abandon()
					return Answer{}, errors.New("crashed")
				}
				return Answer{Reply: "paid " + call.Amount.String() + " " + string(note)}, nil
			}
		}
		_, err := e.r.Handle(ctx, msg, agent(true))
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, int64(2), calls.Load())
		e.waitFree(t, "s", "c")

		var replayed, recorded int
		out, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			ans, err := agent(false)(ctx, run)
			replayed, recorded = run.StepsReplayed(), run.StepsRecorded()
			return ans, err
		})
		require.NoError(t, err)
		assert.True(t, out.Resumed)
		assert.Equal(t, `paid 35 "noted"`, out.Reply)
		assert.Equal(t, int64(2), calls.Load(), "no step function ran again")
		assert.Equal(t, 2, replayed)
		assert.Equal(t, 2, recorded)
		assert.Equal(t, 1, e.ledgerRows(t), "the same tool call: written once")
	})
}

// TestStepUnrecordedRunsAgain: a step whose run died before its output
// was recorded runs again (steps are at-least-once); the steps recorded
// before it are replayed.
func TestStepUnrecordedRunsAgain(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		ttl := 500 * time.Millisecond
		e := newEnv(t, db, ttl)
		ctx := bg(t)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
		var first, second atomic.Int64
		_, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			if _, err := run.Step(ctx, "a", modelStep(&first, "1")); err != nil {
				return Answer{}, err
			}
			_, err := run.Step(ctx, "b", func(context.Context) (json.RawMessage, error) {
				second.Add(1)
				run.abandon() // dies inside the step, before its output is recorded
				return nil, errors.New("crashed")
			})
			return Answer{}, err
		})
		require.ErrorIs(t, err, context.Canceled)
		e.waitFree(t, "s", "c")
		out, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			a, err := run.Step(ctx, "a", modelStep(&first, "1"))
			if err != nil {
				return Answer{}, err
			}
			b, err := Step(ctx, run, "b", func(context.Context) (int, error) { second.Add(1); return 7, nil })
			if err != nil {
				return Answer{}, err
			}
			return Answer{Reply: fmt.Sprintf("%s %d", a, b)}, nil
		})
		require.NoError(t, err)
		assert.Equal(t, `{"tool":"write","amount":1,"note":"asked 1"} 7`, out.Reply)
		assert.Equal(t, int64(1), first.Load())
		assert.Equal(t, int64(2), second.Load(), "the unrecorded step ran again")
	})
}

// TestStepStaleRunCannotRecord: a run whose request was taken over records
// nothing; its Step fails with ErrTakenOver (and lease.ErrLost), and the
// new run's steps stand.
func TestStepStaleRunCannotRecord(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		ttl := 500 * time.Millisecond
		e := newEnv(t, db, ttl)
		ctx := bg(t)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
		var stale *Run
		_, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			if _, err := run.Step(ctx, "a", func(context.Context) (json.RawMessage, error) { return json.RawMessage(`"old a"`), nil }); err != nil {
				return Answer{}, err
			}
			stale = run
			run.abandon()
			return Answer{}, errors.New("crashed")
		})
		require.ErrorIs(t, err, context.Canceled)
		e.waitFree(t, "s", "c")

		takenOver := make(chan struct{})
		staleDone := make(chan error, 1)
		go func() {
			<-takenOver
			// The stale run carries on with a context of its own.
			_, err := stale.Step(context.Background(), "b", func(context.Context) (json.RawMessage, error) {
				return json.RawMessage(`"stale b"`), nil
			})
			staleDone <- err
		}()
		out, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			a, err := run.Step(ctx, "a", func(context.Context) (json.RawMessage, error) { return json.RawMessage(`"new a"`), nil })
			if err != nil {
				return Answer{}, err
			}
			close(takenOver)
			serr := <-staleDone
			assert.ErrorIs(t, serr, ErrTakenOver)
			assert.ErrorIs(t, serr, lease.ErrLost)
			b, err := run.Step(ctx, "b", func(context.Context) (json.RawMessage, error) { return json.RawMessage(`"new b"`), nil })
			if err != nil {
				return Answer{}, err
			}
			return Answer{Reply: string(a) + string(b)}, nil
		})
		require.NoError(t, err)
		assert.Equal(t, `"old a""new b"`, out.Reply)
		assert.Equal(t, []string{`a="old a"`, `b="new b"`}, storedSteps(t, db, "s", "c"))
	})
}

// TestStepDivergence: a resumed run that asks for a recorded position
// under another name gets a *StepDivergedError, and the run fails with it
// even if the agent carries on; a resend then starts the steps afresh.
func TestStepDivergence(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		ttl := 500 * time.Millisecond
		e := newEnv(t, db, ttl)
		ctx := bg(t)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
		one := func(context.Context) (json.RawMessage, error) { return json.RawMessage(`1`), nil }
		_, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			if _, err := run.Step(ctx, "plan", one); err != nil {
				return Answer{}, err
			}
			run.abandon()
			return Answer{}, errors.New("crashed")
		})
		require.ErrorIs(t, err, context.Canceled)
		e.waitFree(t, "s", "c")

		var stepErr error
		_, err = e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			_, stepErr = run.Step(ctx, "classify", one)
			return Answer{Reply: "carried on regardless"}, nil
		})
		var de *StepDivergedError
		require.ErrorAs(t, stepErr, &de)
		assert.Equal(t, StepDivergedError{Position: 0, Recorded: "plan", Asked: "classify"}, *de)
		require.ErrorAs(t, err, new(*StepDivergedError))
		require.ErrorIs(t, err, ErrAgentFailed)
		st, err := e.r.Status(ctx, "s", "c")
		require.NoError(t, err)
		assert.Equal(t, StateFailed, st.State)
		assert.Contains(t, st.Error, "diverged")

		out, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			v, err := Step(ctx, run, "classify", func(context.Context) (string, error) { return "food", nil })
			return Answer{Reply: v}, err
		})
		require.NoError(t, err)
		assert.Equal(t, "food", out.Reply)
	})
}

// TestStepTyped: Step[T] marshals T when it records and unmarshals it on
// replay; a fresh run gets the value through the same JSON.
func TestStepTyped(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		ttl := 500 * time.Millisecond
		e := newEnv(t, db, ttl)
		ctx := bg(t)
		type decision struct {
			Tool   string            `json:"tool"`
			Args   map[string]string `json:"args"`
			Amount float64           `json:"amount"`
		}
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
		var calls atomic.Int64
		decide := func(context.Context) (decision, error) {
			calls.Add(1)
			return decision{Tool: "write", Args: map[string]string{"category": "food"}, Amount: 12.5}, nil
		}
		var first decision
		_, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			var err error
			if first, err = Step(ctx, run, "decide", decide); err != nil {
				return Answer{}, err
			}
			run.abandon()
			return Answer{}, errors.New("crashed")
		})
		require.ErrorIs(t, err, context.Canceled)
		e.waitFree(t, "s", "c")
		var again decision
		_, err = e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			var err error
			again, err = Step(ctx, run, "decide", decide)
			return Answer{Reply: "ok"}, err
		})
		require.NoError(t, err)
		assert.Equal(t, first, again)
		assert.Equal(t, int64(1), calls.Load())

		// Bad input: nothing recorded, a clear error.
		_, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "bad"}, func(ctx context.Context, run *Run) (Answer, error) {
			_, err := run.Step(ctx, "", func(context.Context) (json.RawMessage, error) { return nil, nil })
			require.ErrorIs(t, err, lease.ErrInvalid)
			_, err = run.Step(ctx, "x", func(context.Context) (json.RawMessage, error) { return json.RawMessage(`{`), nil })
			require.ErrorIs(t, err, lease.ErrInvalid)
			_, err = Step(ctx, run, "y", func(context.Context) (func(), error) { return func() {}, nil })
			require.Error(t, err)
			_, err = run.Step(ctx, "outer", func(ctx context.Context) (json.RawMessage, error) {
				_, err := run.Step(ctx, "inner", func(context.Context) (json.RawMessage, error) { return nil, nil })
				return nil, err
			})
			require.ErrorIs(t, err, lease.ErrInvalid, "a step inside a step is refused, not a deadlock")
			assert.Zero(t, run.StepsRecorded())
			return Answer{Reply: "ok"}, nil
		})
		require.NoError(t, err)
	})
}

// storedSteps reads the steps the step table holds for a message, in
// order, as name=output.
func storedSteps(t testing.TB, db *sqlx.DB, sessionKey, clientRequestID string) []string {
	t.Helper()
	var rows []struct {
		Name   string `db:"name"`
		Output string `db:"output"`
	}
	require.NoError(t, db.Select(&rows, db.Rebind("SELECT s.name, s.output FROM rowlease_step s JOIN rowlease_request r ON r.id = s.request_id "+
		"WHERE r.session_key = ? AND r.client_request_id = ? ORDER BY s.seq"), sessionKey, clientRequestID))
	out := []string{}
	for _, r := range rows {
		out = append(out, r.Name+"="+r.Output)
	}
	return out
}

package request

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStepDivergedWrappedWithoutW: the agent reports a divergent replay
// with an error that does not wrap it (%v, not %w). The run still fails as
// diverged, and the steps from the diverged position are dropped, so the
// next resend replays what matched and asks for the rest afresh instead
// of diverging again.
func TestStepDivergedWrappedWithoutW(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 500*time.Millisecond)
		ctx := bg(t)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
		var asked atomic.Int64
		model := func(context.Context) (json.RawMessage, error) {
			return json.RawMessage(fmt.Sprintf(`%d`, asked.Add(1))), nil
		}
		_, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			for _, name := range []string{"plan", "draft"} {
				if _, err := run.Step(ctx, name, model); err != nil {
					return Answer{}, err
				}
			}
			run.abandon()
			return Answer{}, errors.New("crashed")
		})
		require.ErrorIs(t, err, context.Canceled)
		e.waitFree(t, "s", "c")

		// New code: the second step is now called "review".
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			var got []string
			for _, name := range []string{"plan", "review"} {
				out, err := run.Step(ctx, name, model)
				if err != nil {
					return Answer{}, fmt.Errorf("agent: step %s: %v", name, err) // no %w
				}
				got = append(got, string(out))
			}
			return Answer{Reply: strings.Join(got, ",")}, nil
		}
		_, err = e.r.Handle(ctx, msg, agent)
		require.ErrorIs(t, err, ErrAgentFailed)
		st, err := e.r.Status(ctx, "s", "c")
		require.NoError(t, err)
		assert.Equal(t, StateFailed, st.State)
		assert.Equal(t, []string{"plan=1"}, storedSteps(t, db, "s", "c"), "the steps from the diverged position are dropped")

		out, err := e.r.Handle(ctx, msg, agent)
		require.NoError(t, err, "the resend does not diverge again")
		assert.Equal(t, "1,3", out.Reply, "plan replayed, review asked")
	})
}

// TestFailedRequestKeepsDecidingSteps: a failed request's resend asks again
// for the steps after its last committed tool call, and replays those
// before it. A malformed model output that made the run fail is asked for
// again; a booking decided by a step is not repeated, though the model
// answers differently each time it is asked.
func TestFailedRequestKeepsDecidingSteps(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 500*time.Millisecond)
		ctx := bg(t)
		var asked atomic.Int64
		var malformed atomic.Bool
		// decide answers an amount, different on every call; reply answers
		// a text, or, while malformed is set, something the agent cannot
		// use.
		decide := func(context.Context) (json.RawMessage, error) {
			return json.RawMessage(fmt.Sprintf(`{"amount":%d}`, 10+asked.Add(1))), nil
		}
		reply := func(context.Context) (json.RawMessage, error) {
			asked.Add(1)
			if malformed.Load() {
				return json.RawMessage(`{"oops":true}`), nil
			}
			return json.RawMessage(`{"text":"booked"}`), nil
		}
		var decideAsked atomic.Int64
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			raw, err := run.Step(ctx, "decide", func(ctx context.Context) (json.RawMessage, error) {
				decideAsked.Add(1)
				return decide(ctx)
			})
			if err != nil {
				return Answer{}, err
			}
			if _, err := run.CallTool(ctx, "write", raw); err != nil {
				return Answer{}, err
			}
			out, err := Step(ctx, run, "reply", func(ctx context.Context) (map[string]any, error) {
				raw, err := reply(ctx)
				var v map[string]any
				if err == nil {
					err = json.Unmarshal(raw, &v)
				}
				return v, err
			})
			if err != nil {
				return Answer{}, err
			}
			text, ok := out["text"].(string)
			if !ok {
				return Answer{}, errors.New("the model's reply has no text")
			}
			return Answer{Reply: text}, nil
		}

		// Half one: the booking's decision is kept, the malformed reply is
		// asked for again.
		malformed.Store(true)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "lunch"}
		_, err := e.r.Handle(ctx, msg, agent)
		require.ErrorIs(t, err, ErrAgentFailed)
		assert.Equal(t, []string{`decide={"amount":11}`}, storedSteps(t, db, "s", "c"), "the reply step is dropped, the decision kept")
		malformed.Store(false)
		out, err := e.r.Handle(ctx, msg, agent)
		require.NoError(t, err)
		assert.Equal(t, "booked", out.Reply)
		assert.Equal(t, int64(1), decideAsked.Load(), "the decision that booked was replayed")
		assert.Equal(t, 1, e.ledgerRows(t), "booked once")

		// Half two: a malformed decision, before any tool call, is asked
		// for again.
		var bad atomic.Bool
		bad.Store(true)
		msg2 := Message{SessionKey: "s", ClientRequestID: "c2", Content: "coffee"}
		agent2 := func(ctx context.Context, run *Run) (Answer, error) {
			raw, err := run.Step(ctx, "decide", func(ctx context.Context) (json.RawMessage, error) {
				if bad.Load() {
					return json.RawMessage(`"not a call"`), nil
				}
				return decide(ctx)
			})
			if err != nil {
				return Answer{}, err
			}
			if _, err := run.CallTool(ctx, "write", raw); err != nil {
				return Answer{}, err // the string is no amount: the tool refuses it
			}
			return Answer{Reply: "ok"}, nil
		}
		_, err = e.r.Handle(ctx, msg2, agent2)
		require.ErrorIs(t, err, ErrAgentFailed)
		assert.Empty(t, storedSteps(t, db, "s", "c2"), "no tool call followed the decision: it is dropped")
		bad.Store(false)
		out, err = e.r.Handle(ctx, msg2, agent2)
		require.NoError(t, err, "the decision is asked for again")
		assert.Equal(t, "ok", out.Reply)
		assert.Equal(t, 2, e.ledgerRows(t))
	})
}

// TestStepTooLarge: an output over Config.MaxStepOutput is refused with a
// *StepTooLargeError that names the limit, and nothing is recorded.
func TestStepTooLarge(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 500*time.Millisecond)
		r := e.newRunner(t, func(c *Config) { c.MaxStepOutput = 1000 })
		ctx := bg(t)
		var stepErr error
		_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, func(ctx context.Context, run *Run) (Answer, error) {
			if _, err := run.Step(ctx, "ok", func(context.Context) (json.RawMessage, error) {
				return json.RawMessage(`"` + strings.Repeat("a", 998) + `"`), nil
			}); err != nil {
				return Answer{}, err
			}
			_, stepErr = run.Step(ctx, "big", func(context.Context) (json.RawMessage, error) {
				return json.RawMessage(`"` + strings.Repeat("a", 999) + `"`), nil
			})
			return Answer{}, stepErr
		})
		require.ErrorIs(t, err, ErrAgentFailed)
		var tl *StepTooLargeError
		require.ErrorAs(t, stepErr, &tl)
		assert.Equal(t, StepTooLargeError{Name: "big", Size: 1001, Limit: 1000}, *tl)
		assert.ErrorAs(t, stepErr, new(*StepTooLargeError))
		assert.Contains(t, stepErr.Error(), "1000")
		assert.Contains(t, stepErr.Error(), "MaxStepOutput")

		_, err = New(Config{DB: db, MaxStepOutput: 64<<20 + 1})
		assert.Error(t, err)
	})
}

// TestGiveBacksAreNotDeaths: runs that give their leases back — a caller
// that gave up, as Close makes every run do — are not deaths: after more
// of them than ResumeConfig.MaxAttempts, a started Runner still resumes
// the request and it succeeds. The deaths column counts only a lease
// taken over after it expired held.
func TestGiveBacksAreNotDeaths(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 400*time.Millisecond)
		ctx := bg(t)
		ag := newDurableAgent()
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
		for range 4 {
			gctx, giveUp := context.WithCancel(ctx)
			_, err := e.r.Handle(gctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
				giveUp()
				return Answer{}, ctx.Err()
			})
			require.ErrorIs(t, err, context.Canceled)
		}
		var deaths int
		require.NoError(t, db.Get(&deaths, db.Rebind("SELECT deaths FROM rowlease_request WHERE client_request_id = ?"), "c"))
		assert.Zero(t, deaths)

		b := e.newRunner(t, func(c *Config) {
			c.Agent = ag.run
			c.Queue.DispatchInterval = 20 * time.Millisecond
			c.Resume = ResumeConfig{Grace: 50 * time.Millisecond, Backoff: 50 * time.Millisecond, MaxAttempts: 2}
		})
		require.NoError(t, b.Start(ctx))
		st, err := b.Wait(ctx, "s", "c")
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State, st.Error)
		assert.Equal(t, 1, e.ledgerRows(t))
	})
}

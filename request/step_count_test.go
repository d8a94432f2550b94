package request

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/countdb"
	"github.com/rowlease/rowlease/internal/testdb"
)

// stepsPerRun is how many steps the counted agents take.
const stepsPerRun = 4

// countedSteps is an agent that takes stepsPerRun steps, counting the
// statements of the steps alone (the counter is paused outside them),
// then fails when fail is set (so that a resend takes the request over
// at once and replays the steps).
func countedSteps(c *countdb.Counter, fail bool) Agent {
	return func(ctx context.Context, run *Run) (Answer, error) {
		c.Resume()
		for i := range stepsPerRun {
			if _, err := run.Step(ctx, fmt.Sprintf("round-%d", i), func(context.Context) (json.RawMessage, error) {
				return json.RawMessage(fmt.Sprintf(`{"tool":"write","arguments":{"amount":%d},"note":"lunch at noon"}`, i)), nil
			}); err != nil {
				c.Pause()
				return Answer{}, err
			}
		}
		c.Pause()
		if fail {
			return Answer{}, errors.New("the model service went away")
		}
		return Answer{Reply: "ok"}, nil
	}
}

// TestStepStatements pins the cost of steps: one statement per recorded
// step (a token-checked UPDATE of the request row, no transaction), none
// per replayed step; a takeover reads the recorded steps with one more
// statement inside the transaction it already has.
func TestStepStatements(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			e, c := countedEnv(t, d)
			ctx := bg(t)
			require.NoError(t, e.r.Sessions().Create(ctx, e.db, "s"))
			c.Pause()
			// A first request prepares the statements (once per pool).
			_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "warm-up", Content: "x"}, countedSteps(c, false))
			require.NoError(t, err)

			c.Reset()
			c.Record(true)
			_, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, countedSteps(c, true))
			require.ErrorIs(t, err, ErrAgentFailed)
			st := c.Stats()
			for i, q := range c.Log() {
				t.Logf("%d: %.120s", i+1, q)
				assert.True(t, strings.HasPrefix(q, "UPDATE "), "a step is an UPDATE of the request row: %s", q)
			}
			assert.Equal(t, int64(stepsPerRun), st.Statements, "1 statement per recorded step")
			assert.Zero(t, st.Begins, "no transaction")
			assert.Zero(t, st.Prepares)

			// The resend takes the request over and replays every step.
			c.Reset()
			var replayed int
			agent := countedSteps(c, false)
			out, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, func(ctx context.Context, run *Run) (Answer, error) {
				ans, err := agent(ctx, run)
				replayed = run.StepsReplayed()
				return ans, err
			})
			require.NoError(t, err)
			assert.True(t, out.Resumed)
			assert.Equal(t, stepsPerRun, replayed)
			assert.Zero(t, c.Stats().Statements, "0 statements per replayed step")
		})
	}
}

// BenchmarkStep reports the statements per recorded step and per replayed
// step: each op is a request whose run takes stepsPerRun steps and fails,
// and its resend, which replays them.
func BenchmarkStep(b *testing.B) {
	for _, d := range testdb.Dialects() {
		b.Run(d.String(), func(b *testing.B) {
			e, c := countedEnv(b, d)
			ctx := context.Background()
			require.NoError(b, e.r.Sessions().Create(ctx, e.db, "s"))
			c.Pause()
			record, replay := countedSteps(c, true), countedSteps(c, false)
			var recorded, replayed int64
			b.ResetTimer()
			for i := range b.N {
				msg := Message{SessionKey: "s", ClientRequestID: fmt.Sprintf("c%d", i), Content: "x"}
				c.Reset()
				if _, err := e.r.Handle(ctx, msg, record); !errors.Is(err, ErrAgentFailed) {
					b.Fatal(err)
				}
				recorded += c.Stats().Statements
				c.Reset()
				if _, err := e.r.Handle(ctx, msg, replay); err != nil {
					b.Fatal(err)
				}
				replayed += c.Stats().Statements
			}
			b.StopTimer()
			steps := float64(b.N * stepsPerRun)
			b.ReportMetric(float64(recorded)/steps, "stmts/recorded-step")
			b.ReportMetric(float64(replayed)/steps, "stmts/replayed-step")
		})
	}
}

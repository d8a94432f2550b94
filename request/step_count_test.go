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

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// stepsPerRun is how many steps the counted agents take.
const stepsPerRun = 4

// countedSteps is an agent that takes stepsPerRun steps, counting the
// statements of the steps alone (the counter is paused outside them),
// then, when giveUp is set, cancels its caller's context and returns its
// error: the caller gave up, the request stays processing and free, and
// a resend takes it over at once and replays every step. (A run that
// fails keeps only the steps its tool calls followed: see trimSteps.)
func countedSteps(c *countdb.Counter, giveUp context.CancelFunc) Agent {
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
		if giveUp != nil {
			giveUp()
			return Answer{}, ctx.Err()
		}
		return Answer{Reply: "ok"}, nil
	}
}

// TestStepStatements pins the cost of steps: one statement per recorded
// step on PostgreSQL and SQLite (engine.ConfirmPut: the confirmation of
// the request lease and the insert of the step's row, no transaction), a
// transaction of the two statements on MySQL; none per replayed step; a
// takeover reads the recorded steps with one more statement inside the
// transaction it already has. The statements are the same at every
// position: each carries its own step's output, not the ones before.
func TestStepStatements(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			e, c := countedEnv(t, d)
			ctx := bg(t)
			require.NoError(t, e.r.Sessions().Create(ctx, e.db, "s"))
			c.Pause()
			// A first request prepares the statements (once per pool).
			_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "warm-up", Content: "x"}, countedSteps(c, nil))
			require.NoError(t, err)

			c.Reset()
			c.Record(true)
			gctx, giveUp := context.WithCancel(ctx)
			defer giveUp()
			_, err = e.r.Handle(gctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, countedSteps(c, giveUp))
			require.ErrorIs(t, err, context.Canceled)
			st := c.Stats()
			log := c.Log()
			perStep, begins := 1, 0
			if d == lease.MySQL {
				perStep, begins = 2, 1
			}
			require.Len(t, log, perStep*stepsPerRun)
			for i, q := range log {
				t.Logf("%d: %.120s", i+1, q)
				want := "INSERT INTO"
				switch {
				case d == lease.Postgres:
					want = "WITH rowlease_confirm AS (UPDATE"
				case d == lease.MySQL && i%2 == 0:
					want = "UPDATE"
				}
				assert.True(t, strings.HasPrefix(q, want), "statement %d of the steps: %s", i+1, q)
				// Every statement has the same length, but for the
				// output's digit: nothing of the steps before it.
				assert.Equal(t, len(log[i%perStep]), len(q), "statement %d is as long as the first step's", i+1)
			}
			assert.Equal(t, int64(perStep*stepsPerRun), st.Statements, "statements per recorded step")
			assert.Equal(t, int64(begins*stepsPerRun), st.Begins, "transactions per recorded step")
			assertNoPrepares(t, d, st.Prepares)

			// The resend takes the request over and replays every step.
			c.Reset()
			var replayed int
			agent := countedSteps(c, nil)
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
// step: each op is a request whose run takes stepsPerRun steps and whose
// caller gives up, and its resend, which replays them.
func BenchmarkStep(b *testing.B) {
	for _, d := range testdb.Dialects() {
		b.Run(d.String(), func(b *testing.B) {
			e, c := countedEnv(b, d)
			ctx := context.Background()
			require.NoError(b, e.r.Sessions().Create(ctx, e.db, "s"))
			c.Pause()
			replay := countedSteps(c, nil)
			var recorded, replayed int64
			b.ResetTimer()
			for i := range b.N {
				msg := Message{SessionKey: "s", ClientRequestID: fmt.Sprintf("c%d", i), Content: "x"}
				c.Reset()
				gctx, giveUp := context.WithCancel(ctx)
				if _, err := e.r.Handle(gctx, msg, countedSteps(c, giveUp)); !errors.Is(err, context.Canceled) {
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

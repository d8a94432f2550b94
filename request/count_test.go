package request

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// countedEnv is an env whose database counts every round trip.
func countedEnv(t testing.TB, d lease.Dialect) (*env, *countdb.Counter) {
	c := &countdb.Counter{}
	db := testdb.OpenWith(t, d, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
	return newEnvTB(t, db, 30*time.Second), c
}

// twoRoundsOneTool is the agent of the statement count: two model rounds
// (no database work) and one side-effecting tool call between them. The
// side effect's own insert is not counted.
func twoRoundsOneTool(c *countdb.Counter) Agent {
	return func(ctx context.Context, run *Run) (Answer, error) {
		// model round 1 → a tool call
		res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":35}`))
		if err != nil {
			return Answer{}, err
		}
		// model round 2 → the final reply
		return Answer{Reply: "recorded", Result: res.Output}, nil
	}
}

// TestLockPathStatements pins the round trips of one new request with two
// model rounds and one tool call, against about 29 statements in the
// article's design. The claim, which takes the session and inserts the
// request; the tool lease's insert; the tool's side effect in a
// transaction (BEGIN and COMMIT); the end of the run.
// PostgreSQL: 4 statements, 6 round trips, one transaction: the read and
// the claim are one autocommit statement (engine.AcquireCreateUnless),
// the end of the tool's transaction confirms both fences and marks the
// call in one statement, and the end of the run marks the request and
// frees the session in one (engine.Joint). MySQL: 8 statements, 10 round
// trips, one transaction: the claim is two autocommit statements, the
// request's insert (which also refuses a duplicate, so no read comes
// first) and then the session (requestFirstClaimer); the two ends are sent
// one write at a time, as MariaDB's multi-table UPDATE costs the server
// more CPU than the writes alone (see lease.RunFenced). SQLite: 9
// statements, 13 round trips: the read, then the claim's transaction of
// two statements (SQLite has no statement that writes two tables, and
// there a commit, not a round trip, is what costs), and the ends one by
// one. SQLite's tool transaction also sets a savepoint
// (lease.RunFenced): a call into the embedded engine, not a round trip,
// counted apart.
func TestLockPathStatements(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			e, c := countedEnv(t, d)
			e.pauseSideEffect = c
			ctx := bg(t)
			require.NoError(t, e.r.Sessions().Create(ctx, e.db, "s"))
			// The first requests prepare the lease statements on SQLite and
			// MySQL (once per connection of the pool, which may hand the
			// next request a connection the first did not use): warm up
			// until a request prepares nothing, and count the steady state
			// after it.
			for i := 0; ; i++ {
				c.Reset()
				_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: fmt.Sprintf("warm-up-%d", i), Content: "x"}, twoRoundsOneTool(c))
				require.NoError(t, err)
				if c.Stats().Prepares == 0 || i == 4 {
					break
				}
			}
			rowsBefore := e.ledgerRows(t)
			c.Reset()
			c.Record(true)
			out, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c1", Content: "lunch 35"}, twoRoundsOneTool(c))
			require.NoError(t, err)
			require.Equal(t, "recorded", out.Reply)
			st := c.Stats()
			savepoints := int64(0)
			for i, q := range c.Log() {
				t.Logf("%d: %.110s", i+1, q)
				if strings.HasPrefix(q, "SAVEPOINT ") {
					savepoints++
				}
			}
			if d == lease.SQLite {
				assert.Equal(t, int64(1), savepoints)
			} else {
				assert.Zero(t, savepoints)
			}
			st.Statements -= savepoints
			want := map[lease.Dialect]struct{ statements, transactions int64 }{
				lease.Postgres: {4, 1}, lease.MySQL: {8, 1}, lease.SQLite: {9, 2},
			}[d]
			assert.Equal(t, want.statements, st.Statements, "statements on the lock path")
			assert.Equal(t, want.transactions, st.Begins)
			assert.Equal(t, want.transactions, st.Commits)
			assert.Zero(t, st.Rollbacks)
			assertNoPrepares(t, d, st.Prepares)
			assert.Equal(t, want.statements+2*want.transactions, st.Statements+st.Begins+st.Commits, "round trips")
			assert.Equal(t, rowsBefore+1, e.ledgerRows(t))

			// A replay of the finished request takes no lock and writes
			// nothing: one read; on MySQL the request's insert, refused by
			// its key, and then the read.
			c.Reset()
			out, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c1", Content: "lunch 35"}, twoRoundsOneTool(c))
			require.NoError(t, err)
			assert.True(t, out.Replayed)
			replay := int64(1)
			if d == lease.MySQL {
				replay = 2
			}
			assert.Equal(t, replay, c.Stats().Statements)
			assert.Zero(t, c.Stats().Begins)
			assert.Equal(t, rowsBefore+1, e.ledgerRows(t))
		})
	}
}

// BenchmarkLockPath runs new requests (two model rounds, one tool call)
// through the whole flow and reports the statements and round trips per
// request, side effect excluded.
func BenchmarkLockPath(b *testing.B) {
	for _, d := range testdb.Dialects() {
		b.Run(d.String(), func(b *testing.B) {
			e, c := countedEnv(b, d)
			e.pauseSideEffect = c
			ctx := context.Background()
			require.NoError(b, e.r.Sessions().Create(ctx, e.db, "s"))
			agent := twoRoundsOneTool(c)
			c.Reset()
			b.ResetTimer()
			for i := range b.N {
				if _, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: fmt.Sprintf("c%d", i), Content: "x"}, agent); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			st := c.Stats()
			b.ReportMetric(float64(st.Statements)/float64(b.N), "stmts/op")
			b.ReportMetric(float64(st.Statements+st.Begins+st.Commits+st.Rollbacks+st.Prepares)/float64(b.N), "roundtrips/op")
		})
	}
}

// assertNoPrepares checks that a counted run prepared nothing: on MySQL
// and PostgreSQL a prepare is a round trip of its own. On SQLite it is a
// call into the embedded engine, made once per connection of the pool for
// each statement the Lease keeps prepared, and the pool may hand a run a
// connection that no earlier run used (the heartbeat's kept connection
// comes and goes with the runs, and database/sql closes idle connections
// beyond two): it is logged there, not counted as a round trip.
func assertNoPrepares(t *testing.T, d lease.Dialect, prepares int64) {
	t.Helper()
	if d == lease.SQLite {
		t.Logf("%d prepares (SQLite: calls into the engine, once per connection)", prepares)
		return
	}
	assert.Zero(t, prepares, "prepares: a round trip each")
}

package request

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// TestFlowThroughPgxPool: the three levels on the *sql.DB that a service
// with a *pgxpool.Pool gets from stdlib.OpenDBFromPool, handed to the
// Runner as it is (the dialect detected from it). Messages with a tool
// call book once each, the tool's write commits in the fenced transaction
// on a connection of the pool, a resend replays the stored reply without
// running anything, and no lock is left held; the pool served it all.
func TestFlowThroughPgxPool(t *testing.T) {
	t.Run(lease.Postgres.String(), func(t *testing.T) {
		t.Parallel()
		dbx, pool := testdb.OpenPgxPool(t)
		e := newEnv(t, dbx, 5*time.Second) // the lock tables, the ledger and its "write" tool
		db := dbx.DB                       // the *sql.DB of stdlib.OpenDBFromPool, no sqlx around it
		d, err := lease.DetectDialect(db)
		require.NoError(t, err)
		require.Equal(t, lease.Postgres, d)
		r := e.newRunner(t, func(c *Config) { c.DB = db })
		ctx := bg(t)
		acquired := pool.Stat().AcquireCount()

		var runs int
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			runs++
			amount := strings.TrimPrefix(run.Content(), "lunch ")
			res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":`+amount+`}`))
			if err != nil {
				return Answer{}, err
			}
			return Answer{Reply: "booked " + amount, Result: res.Output}, nil
		}
		for i, m := range []Message{
			{SessionKey: "s1", ClientRequestID: "c1", Content: "lunch 35"},
			{SessionKey: "s1", ClientRequestID: "c2", Content: "lunch 12"},
		} {
			out, err := r.Handle(ctx, m, agent)
			require.NoError(t, err, m.ClientRequestID)
			assert.False(t, out.Replayed, m.ClientRequestID)
			assert.Equal(t, "booked "+strings.TrimPrefix(m.Content, "lunch "), out.Reply)
			assert.JSONEq(t, `{"written":"`+strings.TrimPrefix(m.Content, "lunch ")+`","generation":1}`, string(out.Result))
			assert.Equal(t, i+1, e.ledgerRows(t), "one ledger row per message")
		}

		// The client's resend of the first message: the stored reply, nothing run.
		out, err := r.Handle(ctx, Message{SessionKey: "s1", ClientRequestID: "c1", Content: "lunch 35"}, agent)
		require.NoError(t, err)
		assert.True(t, out.Replayed)
		assert.Equal(t, "booked 35", out.Reply)
		assert.Equal(t, 2, runs)
		assert.Equal(t, 2, e.ledgerRows(t))
		assert.Equal(t, int64(2), e.writes.Load())

		for _, cid := range []string{"c1", "c2"} {
			st, err := r.Status(ctx, "s1", cid)
			require.NoError(t, err)
			assert.Equal(t, StateSucceeded, st.State, cid)
		}
		for _, table := range []string{schema.SessionTable, schema.RequestTable, schema.ToolExecutionTable} {
			var held int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE token IS NOT NULL").Scan(&held))
			assert.Zero(t, held, "%s: a lock left held", table)
		}
		assert.Greater(t, pool.Stat().AcquireCount(), acquired, "the pgxpool served the flow's statements")
	})
}

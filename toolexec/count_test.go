package toolexec_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/toolexec"
)

// toolStatements are the statements of one new call with session and
// request fences, its side effect's own statements not counted: the
// insert that claims the call, and the end of each fenced transaction —
// one joint statement on PostgreSQL, the two fences and the mark one by
// one on MySQL and SQLite (see lease.RunFenced).
var toolStatements = map[string]map[lease.Dialect]int64{
	// INSERT; BEGIN, [effect], fences + mark, COMMIT
	"in the database": {lease.Postgres: 2, lease.MySQL: 4, lease.SQLite: 4},
	// INSERT; BEGIN, fences + intent, COMMIT; [act]; BEGIN, fences + mark, COMMIT
	"external": {lease.Postgres: 3, lease.MySQL: 7, lease.SQLite: 7},
}

// TestToolStatements pins the statements and round trips of a new tool
// call, in the database and outside it, on every dialect, with the flow's
// FlowDB as request.Run passes it (on SQLite the fenced transaction then
// also takes its savepoint, with the write lock, in one call into the
// engine, counted apart).
func TestToolStatements(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			c := &countdb.Counter{}
			db := testdb.OpenWith(t, d, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
			e := newEnv(t, db)
			ctx := bg(t)
			flowDB := engine.NewFlowDB(db, d)
			effect := func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
				c.Pause()
				defer c.Resume()
				return e.ledger(ctx, x)
			}
			external := func(ctx context.Context, x toolexec.External) (json.RawMessage, error) {
				return json.RawMessage(`{"paid":true}`), nil
			}
			call := func(kind string, f *flow) error {
				o := e.opts(f, ttl)
				o.Flow = flowDB
				var err error
				if kind == "external" {
					_, err = e.store.ExecuteExternal(ctx, db, f.call(`{"a":1}`), o, toolexec.ExternalOptions{}, external)
				} else {
					_, err = e.store.Execute(ctx, db, f.call(`{"a":1}`), o, effect)
				}
				return err
			}
			for _, kind := range []string{"in the database", "external"} {
				// The first calls prepare the lone statements on SQLite
				// (once per connection of the pool, which may hand the next
				// call a connection the first did not use): warm up until a
				// call prepares nothing, and count the steady state after it.
				for i := 0; ; i++ {
					c.Reset()
					require.NoError(t, call(kind, e.newFlow(t, fmt.Sprintf("warm-%s-%d", kind, i), ttl)))
					if c.Stats().Prepares == 0 || i == 4 {
						break
					}
				}
				f := e.newFlow(t, "s-"+kind, ttl)
				c.Reset()
				c.Record(true)
				require.NoError(t, call(kind, f))
				st := c.Stats()
				savepoints := int64(0)
				for i, q := range c.Log() {
					t.Logf("%s %d: %.150s", kind, i+1, q)
					if strings.HasPrefix(q, "SAVEPOINT ") {
						savepoints++
					}
				}
				txs := int64(1)
				if kind == "external" {
					txs = 2
				}
				if d == lease.SQLite {
					assert.Equal(t, txs, savepoints, kind)
				} else {
					assert.Zero(t, savepoints, kind)
				}
				assert.Equal(t, toolStatements[kind][d], st.Statements-savepoints, "%s: statements", kind)
				assert.Equal(t, txs, st.Begins, kind)
				assert.Equal(t, txs, st.Commits, kind)
				assert.Zero(t, st.Rollbacks, kind)
				if d == lease.SQLite {
					// A call into the embedded engine, once per connection
					// of the pool for each kept statement, not a round trip:
					// the pool may hand the call a connection no earlier call
					// used.
					t.Logf("%s: %d prepares", kind, st.Prepares)
				} else {
					assert.Zero(t, st.Prepares, kind)
				}
				t.Logf("%s: %d statements, %d round trips", kind, st.Statements-savepoints, st.Statements-savepoints+st.Begins+st.Commits)
			}
		})
	}
}

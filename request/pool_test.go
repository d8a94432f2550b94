package request

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// slowTools registers "slow", a tool whose side effect keeps its fenced
// transaction, and with it one connection of the pool, open for d.
func slowTools(t *testing.T, d time.Duration) *toolexec.Registry {
	t.Helper()
	tools := toolexec.NewRegistry()
	require.NoError(t, tools.Register("slow", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		if _, err := x.Tx.ExecContext(ctx, "SELECT 1"); err != nil {
			return nil, err
		}
		timer := time.NewTimer(d) // the tool's own work: it takes d
		defer timer.Stop()
		select {
		case <-timer.C:
			return json.RawMessage(`{"done":true}`), nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}))
	return tools
}

// runSlowTools runs n sessions at once on r, each calling the slow tool
// once, and returns each Handle's error.
func runSlowTools(ctx context.Context, r *Runner, n int) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = r.Handle(ctx, Message{SessionKey: fmt.Sprintf("s%d", i), ClientRequestID: "c", Content: "x"},
				func(ctx context.Context, run *Run) (Answer, error) {
					if _, err := run.CallTool(ctx, "slow", json.RawMessage(`{}`)); err != nil {
						return Answer{}, err
					}
					return Answer{Reply: "ok"}, nil
				})
		})
	}
	wg.Wait()
	return errs
}

// TestSmallPgxPoolIsNoTakeover: a pgxpool of 4 connections (its default
// on a machine of 4 cores or fewer) behind database/sql, 4 sessions whose
// tool keeps a transaction open for 4 s, a TTL of 3 s. Every tool holds a
// connection; the heartbeat must not wait behind them for one of its own,
// or every run is lost though nobody took anything over.
func TestSmallPgxPoolIsNoTakeover(t *testing.T) {
	t.Parallel()
	db := testdb.OpenWith(t, lease.Postgres, func(_, dsn string) (*sql.DB, error) {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			return nil, err
		}
		t.Cleanup(pool.Close) // after the database/sql handle's cleanup
		return stdlib.OpenDBFromPool(pool), nil
	})
	ctx := bg(t)
	require.NoError(t, schema.Apply(ctx, db, lease.Postgres))
	ttl := 3 * time.Second
	r, err := New(Config{DB: db, TTL: ttl, Tools: slowTools(t, 4*time.Second), Session: sessionConfigAutoCreate()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	for i, err := range runSlowTools(ctx, r, 4) {
		require.NoError(t, err, "session s%d", i)
	}
}

// TestSmallPoolIsNoTakeover is TestSmallPgxPoolIsNoTakeover on a
// database/sql pool of 4 connections (SetMaxOpenConns), on MySQL and
// PostgreSQL. (On SQLite the four tools' transactions take the one write
// lock in turn, and the flows waiting for it cannot renew meanwhile
// whatever the pool: see heartbeat.Batcher, "SQLite".)
func TestSmallPoolIsNoTakeover(t *testing.T) {
	for _, d := range []lease.Dialect{lease.MySQL, lease.Postgres} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			db := testdb.Open(t, d)
			ctx := bg(t)
			require.NoError(t, schema.Apply(ctx, db, d))
			db.SetMaxOpenConns(4)
			r, err := New(Config{DB: db, TTL: 3 * time.Second, Tools: slowTools(t, 4*time.Second), Session: sessionConfigAutoCreate()})
			require.NoError(t, err)
			t.Cleanup(func() { _ = r.Close(context.Background()) })
			for i, err := range runSlowTools(ctx, r, 4) {
				require.NoError(t, err, "session s%d", i)
			}
		})
	}
}

// TestExhaustedPoolIsNoTakeover: a pool of one connection, which the
// run's tool holds in its transaction for longer than the TTL, leaves the
// heartbeat none (the Batcher does not keep the only one; nor does a run
// with SeparateHeartbeats): the run is stopped with an error that matches
// lease.ErrPoolExhausted (lease.IsUnavailable: httpapi's 503), not
// ErrTakenOver, and the request stays processing and free, to be resumed
// by a resend. On SQLite the Batcher renews the flow's leases inside
// that transaction (engine.FlowDB), so the run succeeds.
func TestExhaustedPoolIsNoTakeover(t *testing.T) {
	for _, d := range testdb.Dialects() {
		for _, separate := range []bool{false, true} {
			if separate && d == lease.SQLite {
				// A run with SeparateHeartbeats on SQLite and a pool of one
				// connection is lost for a reason other than a wait for a
				// connection (its first renewal does not return before the
				// trust deadline): not this test's subject.
				continue
			}
			name := d.String()
			if separate {
				name += "/separate"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				db := testdb.Open(t, d)
				ctx := bg(t)
				require.NoError(t, schema.Apply(ctx, db, d))
				db.SetMaxOpenConns(1)
				r, err := New(Config{DB: db, TTL: 3 * time.Second, Tools: slowTools(t, 4*time.Second), Session: sessionConfigAutoCreate(),
					SeparateHeartbeats: separate})
				require.NoError(t, err)
				t.Cleanup(func() { _ = r.Close(context.Background()) })
				err = runSlowTools(ctx, r, 1)[0]
				if d == lease.SQLite {
					require.NoError(t, err)
					return
				}
				require.Error(t, err)
				assert.ErrorIs(t, err, lease.ErrPoolExhausted)
				assert.NotErrorIs(t, err, ErrTakenOver)
				assert.True(t, lease.IsUnavailable(err))
				ex, err := r.find(ctx, Message{SessionKey: "s0", ClientRequestID: "c"})
				require.NoError(t, err)
				assert.Equal(t, schema.StoredProcessing, ex.status)
				st, err := r.req.Inspect(ctx, db, ex.id)
				require.NoError(t, err)
				assert.False(t, st.Held, "given back")
			})
		}
	}
}

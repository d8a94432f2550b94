package heartbeat_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// countedDialects runs fn per dialect on a fresh database counted at the
// driver, with the item table.
func countedDialects(t *testing.T, fn func(t *testing.T, e conformance.Env, c *countdb.Counter)) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			c := &countdb.Counter{}
			db := testdb.OpenWith(t, d, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
			fn(t, conformance.Setup(t, db, lease.Options{}), c)
		})
	}
}

// flow is one supervised flow of a batching test.
type flow struct {
	sup    *heartbeat.Supervisor
	work   context.Context
	rec    *recorder
	grants []lease.Grant[string]
	rs     []*heartbeat.LeaseRenewer[string]
}

// startFlows starts n supervisors on b, each keeping per leases of the
// item table (keys <prefix><i>-<j>), renewed through db.
func startFlows(t *testing.T, e conformance.Env, b *heartbeat.Batcher, db lease.DB, prefix string, n, per int, interval, ttl time.Duration) []*flow {
	t.Helper()
	return startFlowsWith(t, e, heartbeat.Config{Interval: interval, TTL: ttl, Batcher: b}, db, prefix, n, per)
}

// startFlowsWith is startFlows with a Config of its own (Batcher or not):
// each flow's supervisor gets cfg with its own recorder as OnEvent.
func startFlowsWith(t *testing.T, e conformance.Env, cfg heartbeat.Config, db lease.DB, prefix string, n, per int) []*flow {
	t.Helper()
	ctx := ctxT(t)
	flows := make([]*flow, n)
	for i := range flows {
		f := &flow{rec: newRecorder()}
		c := cfg
		c.OnEvent = f.rec.on
		s, err := heartbeat.New(c)
		require.NoError(t, err)
		for j := range per {
			k := prefix + strconv.Itoa(i) + "-" + strconv.Itoa(j)
			e.Insert(t, k)
			g, err := e.Lease.Acquire(ctx, e.DB, k, "flow"+strconv.Itoa(i), cfg.TTL)
			require.NoError(t, err)
			r := heartbeat.ForLease("lease"+strconv.Itoa(j), e.Lease, db, g)
			s.Add(r)
			f.grants, f.rs = append(f.grants, g), append(f.rs, r)
		}
		f.work, err = s.Start(context.Background())
		require.NoError(t, err)
		f.sup = s
		t.Cleanup(s.Stop)
		flows[i] = f
	}
	return flows
}

// renewed waits until every lease of f was renewed at least n times more.
func (f *flow) renewed(t *testing.T, n int) {
	t.Helper()
	for _, r := range f.rs {
		for range n {
			f.rec.wait(t, "a renewal of "+r.Name(), func(ev stamped) bool {
				if ev.Kind == heartbeat.EventLost {
					t.Fatalf("lost: %v", ev.Err)
				}
				return ev.Kind == heartbeat.EventRenewed && ev.Lease == r.Name()
			})
		}
	}
}

// TestBatcherFewStatements: forty flows of two leases each (eighty
// leases) cost one statement per round on every dialect, not eighty, and
// every lease stays held with its generation.
func TestBatcherFewStatements(t *testing.T) {
	countedDialects(t, func(t *testing.T, e conformance.Env, c *countdb.Counter) {
		const interval, ttl = 100 * time.Millisecond, 900 * time.Millisecond
		b, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: interval})
		require.NoError(t, err)
		flows := startFlows(t, e, b, e.DB, "f", 40, 2, interval, ttl)
		for _, f := range flows {
			f.renewed(t, 1)
		}
		c.Reset()
		start := time.Now()
		for _, f := range flows {
			f.renewed(t, 3)
		}
		elapsed := time.Since(start)
		rounds := int64(elapsed/interval) + 2
		assert.LessOrEqual(t, c.Count(), rounds, "one statement per round for 80 leases (%v elapsed)", elapsed)
		assert.Equal(t, 80, b.Len())
		ctx := ctxT(t)
		for _, f := range flows {
			require.NoError(t, f.work.Err())
			for j, g := range f.grants {
				gen, err := engine.Verify(ctx, e.Lease, e.DB, g, false)
				require.NoError(t, err)
				assert.Equal(t, g.Generation, gen)
				assert.True(t, f.rs[j].Grant().Deadline.After(g.Deadline))
			}
		}
		for _, f := range flows {
			f.sup.Stop()
		}
		assert.Zero(t, b.Len())
		require.NoError(t, b.Wait(ctx), "the batcher's goroutine returns once it keeps no lease")
	})
}

// TestBatcherLossOnItsOwn: a lease taken from one flow cancels that
// flow's work with a *LostError (ReasonGone) at the next round, and the
// other flows, renewed in the same statement, go on.
func TestBatcherLossOnItsOwn(t *testing.T) {
	countedDialects(t, func(t *testing.T, e conformance.Env, _ *countdb.Counter) {
		const interval, ttl = 50 * time.Millisecond, 600 * time.Millisecond
		b, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: interval})
		require.NoError(t, err)
		flows := startFlows(t, e, b, e.DB, "f", 3, 2, interval, ttl)
		for _, f := range flows {
			f.renewed(t, 1)
		}
		ctx := ctxT(t)
		victim := flows[1]
		require.NoError(t, e.Lease.Release(ctx, e.DB, victim.rs[1].Grant()))
		_, err = e.Lease.Acquire(ctx, e.DB, victim.grants[1].Key, "thief", ttl)
		require.NoError(t, err)
		waitDone(t, victim.work)
		le := lostError(t, context.Cause(victim.work))
		assert.Equal(t, heartbeat.ReasonGone, le.Reason)
		assert.Equal(t, "lease1", le.Lease)
		for _, f := range []*flow{flows[0], flows[2]} {
			f.renewed(t, 2)
			require.NoError(t, f.work.Err())
		}
		assert.Equal(t, 4, b.Len(), "the lost flow's leases are no longer kept")
	})
}

// TestBatcherLongFencedTransaction: a flow's fenced transaction that stays
// open for several rounds holds up neither its own renewals nor, beyond
// the transaction, anyone else's. On SQLite, where the transaction holds
// the only write lock, the flow's leases are renewed inside it (through
// its FlowDB) and the others' batch is put off (ErrWriteLocked, retried)
// until it commits; on MySQL and PostgreSQL the lease rows are locked only
// at the end, and every round goes through.
func TestBatcherLongFencedTransaction(t *testing.T) {
	countedDialects(t, func(t *testing.T, e conformance.Env, _ *countdb.Counter) {
		const interval, ttl = 50 * time.Millisecond, time.Second
		b, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: interval})
		require.NoError(t, err)
		flowA := engine.NewFlowDB(e.DB, e.Dialect)
		a := startFlows(t, e, b, flowA, "a", 1, 2, interval, ttl)[0]
		others := startFlows(t, e, b, e.DB, "o", 2, 1, interval, ttl)
		a.renewed(t, 1)
		ctx := ctxT(t)
		var renewedInside atomic.Int64
		fences := []lease.Fence{e.Lease.Fence("lease0", a.grants[0]), e.Lease.Fence("lease1", a.grants[1])}
		err = engine.RunFenced(ctx, e.DB, engine.FencedTx{Fences: fences, Flow: flowA}, func(tx *sql.Tx) error {
			// The side effect writes a row that is not a lease being
			// renewed (one that is would hold the batch of its table up).
			if _, err := tx.ExecContext(ctx, e.DB.Rebind("INSERT INTO lease_item (item_key, note) VALUES (?, 'effect')"), "effect"); err != nil {
				return err
			}
			// Five rounds with the transaction open: the flow's leases
			// keep being renewed.
			a.renewed(t, 5)
			renewedInside.Add(5)
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, int64(5), renewedInside.Load())
		require.NoError(t, a.work.Err())
		put := false
		for _, f := range others {
		drain: // what happened while the transaction was open
			for {
				select {
				case ev := <-f.rec.ch:
					put = put || (ev.Kind == heartbeat.EventRetry && errors.Is(ev.Err, heartbeat.ErrWriteLocked))
					require.NotEqual(t, heartbeat.EventLost, ev.Kind, "%v", ev.Err)
				default:
					break drain
				}
			}
			f.renewed(t, 2)
			require.NoError(t, f.work.Err())
		}
		if e.Dialect == lease.SQLite {
			assert.True(t, put, "on SQLite the other flows' batch waited for the transaction")
		}
		var note sql.NullString
		require.NoError(t, e.DB.GetContext(ctx, &note, e.DB.Rebind("SELECT note FROM lease_item WHERE item_key = ?"), "effect"))
		assert.Equal(t, "effect", note.String)
	})
}

// TestBatcherAddShortOfTrust: a lease added while the Batcher's goroutine
// waits for its next round, with less trust left than that wait (a large
// safety margin), is renewed after half its trust, not at the round, which
// would come after its trust deadline; and it goes on being renewed so.
func TestBatcherAddShortOfTrust(t *testing.T) {
	countedDialects(t, func(t *testing.T, e conformance.Env, _ *countdb.Counter) {
		// Rounds every 3s; the short lease trusts about 2s at a time.
		const interval, ttl, margin = 3 * time.Second, 9 * time.Second, 7 * time.Second
		b, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: interval})
		require.NoError(t, err)
		long := startFlows(t, e, b, e.DB, "long", 1, 1, interval, ttl)[0]
		for end := time.Now().Add(limit); b.Len() < 1; pause(time.Millisecond) { // handed over by the goroutine
			require.False(t, time.Now().After(end), "the long lease never reached the batcher")
		}
		short, err := lease.New[string](e.Dialect, engine.MustTable(conformance.ItemTable, conformance.ItemColumns), lease.Options{SafetyMargin: margin})
		require.NoError(t, err)
		f := startFlowsWith(t, conformance.Env{DB: e.DB, Dialect: e.Dialect, Lease: short},
			heartbeat.Config{Interval: interval, TTL: ttl, Batcher: b}, e.DB, "short", 1, 1)[0]
		require.Less(t, time.Until(f.grants[0].Deadline), interval, "the short lease trusts less than a round")
		f.renewed(t, 2) // fails on a loss (its trust deadline passed unrenewed)
		require.NoError(t, f.work.Err())
		require.NoError(t, long.work.Err())
	})
}

func TestBatcherConfig(t *testing.T) {
	_, err := heartbeat.NewBatcher(heartbeat.BatchConfig{})
	assert.ErrorIs(t, err, lease.ErrInvalid)
	_, err = heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: time.Second, KeepIdle: -time.Millisecond})
	assert.ErrorIs(t, err, lease.ErrInvalid, "a negative KeepIdle")
	b, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: time.Second})
	require.NoError(t, err)
	_, err = heartbeat.New(heartbeat.Config{Interval: 500 * time.Millisecond, TTL: 3 * time.Second, Batcher: b})
	assert.ErrorIs(t, err, lease.ErrInvalid, "a batch interval above the supervisor's")
	assert.NoError(t, b.Wait(context.Background()), "never started")
}

// TestBatcherAddRacingStop: a lease added while its Supervisor stops is
// never left with the Batcher (which would renew it for nobody, forever):
// once every Supervisor stopped, the Batcher keeps nothing and its
// goroutine returns — without the remove funcs being called.
func TestBatcherAddRacingStop(t *testing.T) {
	db := testdb.Open(t, lease.SQLite)
	e := conformance.Setup(t, db, lease.Options{})
	ctx := ctxT(t)
	const ttl = time.Minute
	b, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: ttl / 3})
	require.NoError(t, err)
	e.Insert(t, "k")
	g, err := e.Lease.Acquire(ctx, e.DB, "k", "h", ttl)
	require.NoError(t, err)
	for range 300 {
		s, err := heartbeat.New(heartbeat.Config{Interval: ttl / 3, TTL: ttl, Batcher: b})
		require.NoError(t, err)
		_, err = s.Start(context.Background())
		require.NoError(t, err)
		added := make(chan struct{})
		go func() {
			defer close(added)
			s.Add(heartbeat.ForLease("late", e.Lease, e.DB, g))
		}()
		s.Stop()
		<-added
	}
	assert.Zero(t, b.Len())
	require.NoError(t, b.Wait(ctx))
}

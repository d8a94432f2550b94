package toolexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

func TestConcurrentSameCall(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)
		const n = 16
		var (
			wg                     sync.WaitGroup
			mu                     sync.Mutex
			ran, reused, conflicts int
			others                 []error
			start                  = make(chan struct{})
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				o := e.opts(f, ttl)
				o.Holder = fmt.Sprintf("flow-%d", i)
				res, err := e.store.Execute(ctx, db, f.call(`{"a":35}`), o, e.ledger)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && res.Reused:
					reused++
				case err == nil:
					ran++
				case errors.As(err, new(*toolexec.BusyError)):
					conflicts++
				default:
					others = append(others, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Empty(t, others)
		assert.Equal(t, 1, ran)
		assert.Equal(t, n-1, reused+conflicts)
		assert.Equal(t, int64(1), e.calls.Load())
		assert.Equal(t, 1, e.ledgerRows(t))
		assert.Equal(t, 1, e.count(t, schema.ToolExecutionTable))
	})
}

// TestLongSideEffectUnderHeartbeat: a side effect holds its transaction
// (on SQLite the database's write lock) for longer than a heartbeat
// interval while a supervisor renews the session, request and tool leases
// through the flow's FlowDB, as request.Run does: the renewals do not wait
// for the transaction (on SQLite they run inside it), and nothing is lost.
func TestLongSideEffectUnderHeartbeat(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		// Sized so that a loaded 2-core machine does not stall a renewal
		// past the trust deadline (TTL − TTL/10 after the last one); the
		// test is about the transaction's renewals, not about timing.
		const (
			interval = 250 * time.Millisecond
			hbTTL    = 1500 * time.Millisecond
			hold     = 750 * time.Millisecond
		)
		e := newEnv(t, db)
		ctx := bg(t)
		var mu sync.Mutex
		renewed := map[string]int{}
		var events []heartbeat.Event
		sup, err := heartbeat.New(heartbeat.Config{Interval: interval, TTL: hbTTL, OnEvent: func(ev heartbeat.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, ev)
			if ev.Kind == heartbeat.EventRenewed {
				renewed[ev.Lease]++
			}
		}})
		require.NoError(t, err)
		f := e.newFlow(t, "s1", hbTTL)
		flow := engine.NewFlowDB(db, e.d)
		sup.Add(heartbeat.ForLease("session", e.sessions.Lease(), flow, f.sess))
		sup.Add(heartbeat.ForLease("request", e.req, flow, f.req))
		work, err := sup.Start(ctx)
		require.NoError(t, err)
		defer sup.Stop()

		// A model round longer than the TTL: the heartbeat keeps the leases.
		time.Sleep(hbTTL + 500*time.Millisecond)

		o := e.opts(f, hbTTL)
		o.Flow = flow
		var toolGen int64
		o.Watch = func(g toolexec.Grant) func() {
			toolGen = g.Generation
			return sup.Add(heartbeat.ForLease("tool", e.store.Lease(), flow, g))
		}
		res, err := e.store.Execute(work, db, f.call(`{"a":35}`), o, func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
			timer := time.NewTimer(hold)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
			return e.ledger(ctx, x)
		})
		require.NoError(t, err)
		assert.False(t, res.Reused)
		assert.Equal(t, toolGen, res.Generation)
		assert.Equal(t, 1, e.ledgerRows(t))

		// Keep going a little: the renewals that waited on the transaction
		// went through, and the removed tool lease is not missed.
		time.Sleep(2 * interval)
		require.NoError(t, sup.Lost())
		require.NoError(t, work.Err())
		sup.Stop()
		mu.Lock()
		for _, ev := range events {
			assert.NotEqual(t, heartbeat.EventLost, ev.Kind, "event %v on %s: %v", ev.Kind, ev.Lease, ev.Err)
		}
		assert.GreaterOrEqual(t, renewed["session"], 3)
		assert.GreaterOrEqual(t, renewed["request"], 3)
		mu.Unlock()
		for name, check := range map[string]func() (lease.Snapshot, error){
			"session": func() (lease.Snapshot, error) { return e.sessions.Inspect(ctx, db, f.sessionKey) },
			"request": func() (lease.Snapshot, error) { return e.req.Inspect(ctx, db, f.requestID) },
		} {
			st, err := check()
			require.NoError(t, err)
			assert.True(t, st.Held, name)
			assert.Equal(t, int64(1), st.Generation, name)
		}
		row := e.toolRow(t, res.ExecutionID)
		assert.Equal(t, schema.StoredSucceeded, row.State)
		assert.False(t, row.Held)
	})
}

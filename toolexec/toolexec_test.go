package toolexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

func TestNewThenReused(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)

		first, err := e.store.Execute(ctx, db, f.call(`{"b":1,"a":35}`), e.opts(f, ttl), e.ledger)
		require.NoError(t, err)
		assert.False(t, first.Reused)
		assert.Equal(t, int64(1), first.Generation)
		assert.JSONEq(t, `{"amount":"35","generation":1}`, string(first.Output))
		assert.Equal(t, int64(1), e.calls.Load())
		assert.Equal(t, 1, e.ledgerRows(t))
		row := e.toolRow(t, first.ExecutionID)
		assert.Equal(t, schema.StoredSucceeded, row.State)
		assert.False(t, row.Held, "a finished call holds no lease")
		assert.Equal(t, "", row.Holder)
		assert.JSONEq(t, string(first.Output), row.result)
		assert.True(t, row.errNull)

		// The same call, spelled differently: the stored result, not a re-run.
		again, err := e.store.Execute(ctx, db, f.call(`{"a":3.5e1,"b":1.0}`), e.opts(f, ttl), e.ledger)
		require.NoError(t, err)
		assert.True(t, again.Reused)
		assert.Equal(t, first.ExecutionID, again.ExecutionID)
		assert.Equal(t, first.Generation, again.Generation)
		assert.JSONEq(t, string(first.Output), string(again.Output))
		assert.Equal(t, int64(1), e.calls.Load(), "the side effect did not run again")
		assert.Equal(t, 1, e.ledgerRows(t))
		assert.Equal(t, 1, e.count(t, schema.ToolExecutionTable))

		// Other arguments, or another tool, are another call.
		other, err := e.store.Execute(ctx, db, f.call(`{"a":36,"b":1}`), e.opts(f, ttl), e.ledger)
		require.NoError(t, err)
		assert.False(t, other.Reused)
		assert.NotEqual(t, first.ExecutionID, other.ExecutionID)
		c := f.call(`{"b":1,"a":35}`)
		c.Tool = "create_transaction_v2"
		other, err = e.store.Execute(ctx, db, c, e.opts(f, ttl), e.ledger)
		require.NoError(t, err)
		assert.False(t, other.Reused)
		assert.Equal(t, int64(3), e.calls.Load())
		assert.Equal(t, 3, e.ledgerRows(t))

		// A side effect that returns nothing stores JSON null.
		c.Tool = "noop"
		res, err := e.store.Execute(ctx, db, c, e.opts(f, ttl), func(context.Context, toolexec.Exec) (json.RawMessage, error) { return nil, nil })
		require.NoError(t, err)
		assert.Equal(t, "null", string(res.Output))
		res, err = e.store.Execute(ctx, db, c, e.opts(f, ttl), e.ledger)
		require.NoError(t, err)
		assert.True(t, res.Reused)
		assert.Equal(t, "null", string(res.Output))
	})
}

func TestFailedThenRetried(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)
		boom := errors.New("bank says no")
		failing := func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
			// It writes, then fails: the write must roll back.
			if _, err := e.ledger(ctx, x); err != nil {
				return nil, err
			}
			return nil, boom
		}

		_, err := e.store.Execute(ctx, db, f.call(`{"a":35}`), e.opts(f, ttl), failing)
		var fe *toolexec.FailedError
		require.ErrorAs(t, err, &fe)
		assert.ErrorAs(t, err, new(*toolexec.FailedError))
		assert.ErrorIs(t, err, boom)
		assert.Equal(t, "create_transaction", fe.Tool)
		assert.Contains(t, fe.Error(), "bank says no")
		assert.Equal(t, 0, e.ledgerRows(t), "the failed side effect's writes rolled back")
		id := e.onlyToolID(t)
		row := e.toolRow(t, id)
		assert.Equal(t, schema.StoredFailed, row.State)
		assert.False(t, row.Held)
		assert.Equal(t, "bank says no", row.errText)
		assert.Equal(t, int64(1), row.Generation)

		// A result that is not JSON is a failure too, and rolls back.
		_, err = e.store.Execute(ctx, db, f.call(`{"a":35}`), e.opts(f, ttl), func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
			if _, err := e.ledger(ctx, x); err != nil {
				return nil, err
			}
			return json.RawMessage(`{not json`), nil
		})
		require.ErrorAs(t, err, new(*toolexec.FailedError))
		assert.Equal(t, 0, e.ledgerRows(t))
		row = e.toolRow(t, id)
		assert.Equal(t, schema.StoredFailed, row.State)
		assert.Equal(t, int64(2), row.Generation, "the retry took the call with a new generation")

		// Retried: it runs, in the same row, with the next generation.
		before := e.calls.Load()
		res, err := e.store.Execute(ctx, db, f.call(`{"a":35}`), e.opts(f, ttl), e.ledger)
		require.NoError(t, err)
		assert.False(t, res.Reused)
		assert.Equal(t, id, res.ExecutionID)
		assert.Equal(t, int64(3), res.Generation)
		assert.Equal(t, before+1, e.calls.Load())
		assert.Equal(t, 1, e.ledgerRows(t))
		row = e.toolRow(t, id)
		assert.Equal(t, schema.StoredSucceeded, row.State)
		assert.True(t, row.errNull, "the error is cleared on retry")
		assert.Equal(t, 1, e.count(t, schema.ToolExecutionTable))
	})
}

// TestLiveConflict holds a call processing under a live lease while another
// holder runs the same call. The first run is held either inside its side
// effect (its transaction is open) or before it (in the Watch hook, with no
// transaction open). On SQLite a transaction holds the database's write
// lock, so a second run would wait on it rather than see the conflict: only
// the Watch variant runs there.
func TestLiveConflict(t *testing.T) {
	dialects := map[string][]lease.Dialect{
		"side effect": {lease.MySQL, lease.Postgres},
		"watch":       testdb.Dialects(),
	}
	for _, where := range []string{"side effect", "watch"} {
		t.Run(where, func(t *testing.T) {
			each := func(fn func(t *testing.T, db *sqlx.DB)) {
				for _, d := range dialects[where] {
					t.Run(d.String(), func(t *testing.T) { t.Parallel(); fn(t, testdb.Open(t, d)) })
				}
			}
			each(func(t *testing.T, db *sqlx.DB) {
				e := newEnv(t, db)
				ctx := bg(t)
				f := e.newFlow(t, "s-"+uuid.NewString()[:8], ttl)
				entered, release := make(chan struct{}), make(chan struct{})
				hold := func() { close(entered); <-release }
				o := e.opts(f, ttl)
				fn := e.ledger
				if where == "watch" {
					o.Watch = func(toolexec.Grant) func() { hold(); return func() {} }
				} else {
					fn = func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) { hold(); return e.ledger(ctx, x) }
				}
				type outcome struct {
					res toolexec.Result
					err error
				}
				done := make(chan outcome, 1)
				go func() {
					res, err := e.store.Execute(ctx, db, f.call(`{"a":35}`), o, fn)
					done <- outcome{res, err}
				}()
				<-entered

				other := toolexec.ExecOptions{Holder: "other-flow", TTL: ttl, Fences: e.fences(f)}
				_, err := e.store.Execute(ctx, db, f.call(`{"a":3.5e1}`), other, e.ledger)
				require.Error(t, err)
				assert.ErrorAs(t, err, new(*toolexec.BusyError))
				assert.ErrorIs(t, err, lease.ErrHeld)
				var ce *lease.ConflictError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, f.holder, ce.Holder)
				assert.Equal(t, int64(1), ce.Generation)
				assert.Greater(t, ce.Remaining, time.Duration(0))
				id := e.onlyToolID(t)
				row := e.toolRow(t, id)
				assert.Equal(t, schema.StoredProcessing, row.State)
				assert.True(t, row.Held)
				assert.Equal(t, f.holder, row.Holder, "the loser changed nothing")

				close(release)
				out := <-done
				require.NoError(t, out.err)
				assert.False(t, out.res.Reused)
				assert.Equal(t, id, out.res.ExecutionID)
				assert.Equal(t, int64(1), e.calls.Load())
				assert.Equal(t, 1, e.ledgerRows(t))

				// Now the other holder gets the stored result.
				res, err := e.store.Execute(ctx, db, f.call(`{"a":35}`), other, e.ledger)
				require.NoError(t, err)
				assert.True(t, res.Reused)
				assert.Equal(t, int64(1), e.calls.Load())
			})
		})
	}
}

func TestExpiredTakenOver(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)
		call := f.call(`{"b":1,"a":35}`)

		// A crashed holder left the call processing under a 50ms lease.
		_, hash, err := toolexec.CanonicalArguments(call.Arguments)
		require.NoError(t, err)
		id := uuid.NewString()
		_, err = e.store.Lease().Create(ctx, db, id, "crashed-flow", 50*time.Millisecond, lease.CreateOptions{
			State: schema.StoredProcessing, Set: []lease.Assignment{
				lease.Set(schema.ColSessionKey, call.SessionKey), lease.Set(schema.ColRequestID, call.RequestID),
				lease.Set(schema.ColToolName, call.Tool), lease.Set(schema.ColArgumentsHash, hash),
				lease.Set(schema.ColIdempotencyKey, toolexec.IdempotencyKey(call.RequestID, call.Tool, hash, call.Occurrence)),
			}})
		require.NoError(t, err)
		waitFor(t, "the crashed lease expires", func() bool {
			st, err := e.store.Lease().Inspect(ctx, db, id)
			require.NoError(t, err)
			return !st.Held
		})

		var watched toolexec.Grant
		o := e.opts(f, ttl)
		o.Watch = func(g toolexec.Grant) func() { watched = g; return func() {} }
		res, err := e.store.Execute(ctx, db, f.call(`{"a":3.5e1,"b":1}`), o, e.ledger)
		require.NoError(t, err)
		assert.False(t, res.Reused)
		assert.Equal(t, id, res.ExecutionID, "the crashed row is taken over, not duplicated")
		assert.Equal(t, int64(2), res.Generation)
		assert.Equal(t, int64(2), watched.Generation)
		assert.Equal(t, f.holder, watched.Holder)
		assert.Equal(t, int64(1), e.calls.Load())
		assert.Equal(t, 1, e.ledgerRows(t))
		row := e.toolRow(t, id)
		assert.Equal(t, schema.StoredSucceeded, row.State)
		assert.Equal(t, int64(2), row.Generation)
		assert.Equal(t, 1, e.count(t, schema.ToolExecutionTable))
	})
}

func TestFenceLost(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)

		t.Run("session taken over", func(t *testing.T) {
			f := e.newFlow(t, "s-session", ttl)
			// The session is released and taken by another request.
			require.NoError(t, e.sessions.Release(ctx, db, f.sess))
			_, err := e.sessions.Acquire(ctx, db, f.sessionKey, uuid.NewString(), ttl)
			require.NoError(t, err)

			calls := e.calls.Load()
			_, err = e.store.Execute(ctx, db, f.call(`{"a":35}`), e.opts(f, ttl), e.ledger)
			require.Error(t, err)
			assert.ErrorIs(t, err, lease.ErrLost)
			assert.NotErrorAs(t, err, new(*toolexec.FailedError))
			assert.Contains(t, err.Error(), "session fence")
			// The fences are checked at the end of the transaction, so the
			// side effect ran; none of it committed.
			assert.Equal(t, calls+1, e.calls.Load())
			assert.Equal(t, 0, e.ledgerRows(t), "nothing written")
			var id string
			require.NoError(t, db.GetContext(ctx, &id, e.d.Rebind("SELECT id FROM "+schema.ToolExecutionTable+" WHERE request_id = ?"), f.requestID))
			row := e.toolRow(t, id)
			assert.Equal(t, schema.StoredProcessing, row.State, "left processing")
			assert.False(t, row.Held, "and free")
			assert.Equal(t, "", row.Holder)
		})

		t.Run("request taken over", func(t *testing.T) {
			f := e.newFlow(t, "s-request", ttl)
			// Another flow takes the request over (its lease was given back)
			// and the session with it.
			require.NoError(t, e.req.Release(ctx, db, f.req))
			require.NoError(t, e.sessions.Release(ctx, db, f.sess))
			g := &flow{sessionKey: f.sessionKey, requestID: f.requestID, holder: "new-flow"}
			var err error
			g.sess, err = e.sessions.Acquire(ctx, db, f.sessionKey, f.requestID, ttl)
			require.NoError(t, err)
			g.req, err = e.req.AcquireWith(ctx, db, f.requestID, g.holder, ttl, lease.AcquireOptions{InStates: []string{schema.StoredProcessing}})
			require.NoError(t, err)
			assert.Equal(t, int64(2), g.req.Generation)

			calls := e.calls.Load()
			_, err = e.store.Execute(ctx, db, f.call(`{"a":35}`), e.opts(f, ttl), e.ledger)
			assert.ErrorIs(t, err, lease.ErrLost)
			assert.Equal(t, calls+1, e.calls.Load(), "it ran, and rolled back at the fence")
			assert.Equal(t, 0, e.ledgerRows(t))

			// The new owner takes the call over at once (no TTL wait) and
			// runs it once.
			res, err := e.store.Execute(ctx, db, g.call(`{"a":35}`), e.opts(g, ttl), e.ledger)
			require.NoError(t, err)
			assert.False(t, res.Reused)
			assert.Equal(t, int64(2), res.Generation)
			assert.Equal(t, calls+2, e.calls.Load())
			assert.Equal(t, 1, e.ledgerRows(t))
		})
	})
}

func TestExecFields(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)
		// Give the session generation 2, so it differs from the request's 1.
		require.NoError(t, e.sessions.Release(ctx, db, f.sess))
		var err error
		f.sess, err = e.sessions.Acquire(ctx, db, f.sessionKey, f.requestID, ttl)
		require.NoError(t, err)
		require.Equal(t, int64(2), f.sess.Generation)

		var (
			watched               toolexec.Grant
			watchCalls, stopCalls int
			stateAtStop           string
			got                   toolexec.Exec
		)
		o := e.opts(f, ttl)
		o.Watch = func(g toolexec.Grant) func() {
			watchCalls++
			watched = g
			return func() {
				stopCalls++
				// Stop comes before the success mark.
				st, err := e.store.Lease().Inspect(context.Background(), db, g.Key)
				if assert.NoError(t, err) {
					stateAtStop = st.State
				}
			}
		}
		call := f.call(`{ "b" : 1, "a" : 35 }`)
		res, err := e.store.Execute(ctx, db, call, o, func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
			got = x
			assert.Equal(t, 1, watchCalls, "watched before the side effect runs")
			assert.Equal(t, 0, stopCalls)
			return e.ledger(ctx, x)
		})
		require.NoError(t, err)
		assert.Equal(t, 1, watchCalls)
		assert.Equal(t, 1, stopCalls, "stop is called once, before Execute returns")
		assert.Equal(t, schema.StoredProcessing, stateAtStop)

		assert.Equal(t, watched.Generation, got.Generation)
		assert.Equal(t, res.Generation, got.Generation)
		assert.Equal(t, int64(1), got.Generation)
		assert.Equal(t, map[string]int64{"session": 2, "request": 1}, got.Fences)
		assert.Equal(t, watched.Key, got.ExecutionID)
		assert.Equal(t, res.ExecutionID, got.ExecutionID)
		assert.Equal(t, f.holder, watched.Holder)
		assert.False(t, engine.TokenIsZero(watched.Token))
		assert.Equal(t, call, got.Call)
		assert.Equal(t, `{"a":35,"b":1}`, string(got.Canonical))
		assert.NotNil(t, got.Tx)

		// Stop is called on the failure path too.
		watchCalls, stopCalls = 0, 0
		_, err = e.store.Execute(ctx, db, f.call(`{"a":1}`), o, func(context.Context, toolexec.Exec) (json.RawMessage, error) {
			return nil, errors.New("no")
		})
		require.ErrorAs(t, err, new(*toolexec.FailedError))
		assert.Equal(t, 1, watchCalls)
		assert.Equal(t, 1, stopCalls)

		// And when a fence fails (the side effect never runs).
		watchCalls, stopCalls = 0, 0
		require.NoError(t, e.sessions.Release(ctx, db, f.sess))
		_, err = e.store.Execute(ctx, db, f.call(`{"a":2}`), o, e.ledger)
		require.ErrorIs(t, err, lease.ErrLost)
		assert.Equal(t, 1, watchCalls)
		assert.Equal(t, 1, stopCalls)

		// A reused result is not watched: nothing runs.
		watchCalls, stopCalls = 0, 0
		res, err = e.store.Execute(ctx, db, call, o, e.ledger)
		require.NoError(t, err)
		assert.True(t, res.Reused)
		assert.Equal(t, 0, watchCalls)
	})
}

func TestInvalidInput(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)
		for _, args := range []string{`[1]`, `{"a":`, `{"a":1,"a":2}`, `"x"`, ``, `null`, `{"a":"\ud800"}`, `{"a":1} {}`,
			`{"id":9007199254740993}`} {
			_, err := e.store.Execute(ctx, db, f.call(args), e.opts(f, ttl), e.ledger)
			assert.ErrorAs(t, err, new(*toolexec.ArgumentsError), "arguments %q", args)
		}
		for name, c := range map[string]toolexec.Call{
			"no session": {RequestID: f.requestID, Tool: "t", Arguments: json.RawMessage(`{}`)},
			"no request": {SessionKey: "s1", Tool: "t", Arguments: json.RawMessage(`{}`)},
			"long request": {SessionKey: "s1", RequestID: f.requestID + "-toolong", Tool: "t",
				Arguments: json.RawMessage(`{}`)},
			"no tool": {SessionKey: "s1", RequestID: f.requestID, Arguments: json.RawMessage(`{}`)},
		} {
			_, err := e.store.Execute(ctx, db, c, e.opts(f, ttl), e.ledger)
			assert.ErrorIs(t, err, lease.ErrInvalid, name)
		}
		_, err := e.store.Execute(ctx, db, f.call(`{}`), e.opts(f, ttl), nil)
		assert.ErrorIs(t, err, lease.ErrInvalid, "nil side effect")
		_, err = e.store.Execute(ctx, nil, f.call(`{}`), e.opts(f, ttl), e.ledger)
		assert.ErrorIs(t, err, lease.ErrInvalid, "nil db")
		_, err = e.store.Execute(ctx, db, f.call(`{}`), toolexec.ExecOptions{Holder: f.holder}, e.ledger)
		assert.ErrorIs(t, err, lease.ErrInvalid, "zero TTL")

		assert.Equal(t, int64(0), e.calls.Load())
		assert.Equal(t, 0, e.count(t, schema.ToolExecutionTable), "no row written")
		assert.Equal(t, 0, e.ledgerRows(t))
	})
}

func TestRegistry(t *testing.T) {
	r := toolexec.NewRegistry()
	noop := func(context.Context, toolexec.Exec) (json.RawMessage, error) { return nil, nil }
	require.NoError(t, r.Register("create_transaction", noop))
	require.NoError(t, r.Register("balance", noop))
	assert.Error(t, r.Register("create_transaction", noop), "registered twice")
	assert.Error(t, r.Register("", noop), "empty name")
	assert.Error(t, r.Register("x", nil), "nil side effect")
	assert.Equal(t, []string{"balance", "create_transaction"}, r.Names())

	fn, err := r.Lookup("create_transaction")
	require.NoError(t, err)
	assert.NotNil(t, fn)
	_, err = r.Lookup("delete_everything")
	assert.ErrorIs(t, err, toolexec.ErrUnknownTool)
	assert.Contains(t, err.Error(), "delete_everything")
	var nilReg *toolexec.Registry
	_, err = nilReg.Lookup("create_transaction")
	assert.ErrorIs(t, err, toolexec.ErrUnknownTool)
}

func TestNewInvalid(t *testing.T) {
	for name, cfg := range map[string]toolexec.Config{
		"zero dialect": {},
		"bad table":    {Dialect: lease.SQLite, Table: "tool execution"},
		"bad margin":   {Dialect: lease.MySQL, Lease: lease.Options{SafetyMargin: -1}},
	} {
		s, err := toolexec.New(cfg)
		assert.ErrorIs(t, err, lease.ErrInvalid, name)
		assert.Nil(t, s, name)
	}
}

//go:build galera

package galera_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/harness/galera"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var spreads = []galera.Spread{galera.PerConnection, galera.PerStatement}

// TestConformance runs the lease conformance suite unchanged on the
// cluster, with clients spread over the nodes per connection and per
// statement, and wsrep_sync_wait=7 in the DSN (one of the configurations
// lease/doc.go asks of a Galera user; the suite's own reads need it too).
func TestConformance(t *testing.T) {
	for _, s := range spreads {
		t.Run(s.String(), func(t *testing.T) {
			t.Parallel()
			conformance.RunLeaseOn(t, func(t testing.TB) *sqlx.DB {
				return galera.Open(t, galera.Database(t, map[string]string{"wsrep_sync_wait": "7"}), s)
			})
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

const effectDDL = "CREATE TABLE effect (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, gen BIGINT NOT NULL) ENGINE=InnoDB"

// TestFencedWritesAgainstTakeovers: a holder on node 1 keeps writing
// fenced side effects (lease.RunFenced, the fence a token-checked write)
// up to the last moment of its lease, while a contender on node 2 takes
// the lease over as soon as it expires. A stale fenced write is one of the
// old generation that committed after the takeover: counted by reading,
// causally, the old generation's effects right after the takeover and
// again once the old holder has stopped. There must be none.
func TestFencedWritesAgainstTakeovers(t *testing.T) {
	writesAgainstTakeovers(t, effectDDL, func(ctx context.Context, db *sqlx.DB, e conformance.Env, g lease.Grant[string]) error {
		return engine.WithFences(ctx, db, []lease.Fence{e.Lease.Fence("k", g)}, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO effect (gen) VALUES (?)", g.Generation)
			return err
		})
	})
}

// TestConfirmPutAgainstTakeovers is TestFencedWritesAgainstTakeovers for
// engine.ConfirmPut, the fenced append of a run's step (package request):
// on MySQL it confirms the lease — a write of the lease row, which the
// cluster certifies against the takeover on the other node — and inserts
// the row in the same transaction. No step of the old generation may
// commit after the takeover.
func TestConfirmPutAgainstTakeovers(t *testing.T) {
	const ddl = "CREATE TABLE effect (id VARCHAR(36) NOT NULL PRIMARY KEY, gen BIGINT NOT NULL, body TEXT NOT NULL) ENGINE=InnoDB"
	writesAgainstTakeovers(t, ddl, func(ctx context.Context, db *sqlx.DB, e conformance.Env, g lease.Grant[string]) error {
		return engine.ConfirmPut(ctx, e.Lease, db, g, engine.Row{Table: "effect", Key: []string{"id"},
			Columns: []string{"id", "gen", "body"}, Values: []any{uuid.NewString(), g.Generation, "step"}})
	})
}

// writesAgainstTakeovers runs rounds of a holder on node 1 writing with
// write up to and past the end of its lease while a contender on node 2
// takes it over, and counts the old generation's writes that committed
// after the takeover (table effect, column gen). There must be none.
func writesAgainstTakeovers(t *testing.T, ddl string, write func(ctx context.Context, db *sqlx.DB, e conformance.Env, g lease.Grant[string]) error) {
	cfgs := galera.Database(t, nil)
	e := conformance.Setup(t, galera.OpenNode(t, cfgs, 0), lease.Options{MultiPrimary: true})
	ctx := ctxT(t)
	_, err := e.DB.ExecContext(ctx, ddl)
	require.NoError(t, err)
	e.Insert(t, "k")
	galera.Sync(t, cfgs)
	holderDB, thiefDB := galera.OpenNode(t, cfgs, 0), galera.OpenNode(t, cfgs, 1)
	count := engine.SyncWait("SELECT COUNT(*) FROM effect WHERE gen = ?")
	const ttl = 300 * time.Millisecond
	const rounds = 12
	var stale, commits, victims, takeovers int
	for range rounds {
		g, err := e.Lease.AcquireWait(ctx, holderDB, "k", "holder", ttl, lease.AcquireOptions{}, lease.WaitOptions{})
		require.NoError(t, err)
		var wg sync.WaitGroup
		var hCommits, hVictims int
		wg.Go(func() {
			for i := 0; ; i++ {
				// Just inside the lease at first, then past it: the last
				// writes race the takeover.
				pause(time.Duration(200+rand.IntN(120)) * time.Millisecond)
				err := write(ctx, holderDB, e, g)
				switch {
				case err == nil:
					hCommits++
				case lease.IsTransient(err):
					hVictims++ // a certification failure: nothing committed
				case errors.Is(err, lease.ErrLost):
					return
				default:
					t.Errorf("fenced write: %v", err)
					return
				}
				if i > 4 {
					return
				}
			}
		})
		tg, err := e.Lease.AcquireWait(ctx, thiefDB, "k", "thief", time.Minute, lease.AcquireOptions{}, lease.WaitOptions{MinDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond})
		require.NoError(t, err)
		require.Greater(t, tg.Generation, g.Generation)
		takeovers++
		var before, after int
		require.NoError(t, thiefDB.GetContext(ctx, &before, count, g.Generation))
		wg.Wait()
		require.NoError(t, thiefDB.GetContext(ctx, &after, count, g.Generation))
		stale += after - before
		commits += hCommits
		victims += hVictims
		require.NoError(t, e.Lease.Release(ctx, thiefDB, tg))
	}
	t.Logf("%d takeovers across nodes: %d fenced commits, %d certification failures retried, %d stale", takeovers, commits, victims, stale)
	assert.Zero(t, stale, "fenced writes committed after a takeover")
	assert.Positive(t, commits)
}

// TestTokenCheckedAcrossNodes: a grant taken through node 1 and then
// renewed, verified and released at once through nodes 2 and 3 (as a
// load balancer may send them) is never reported lost with
// Options.MultiPrimary. Without it, a node that has not applied the
// acquire yet makes some of them ErrLost although nothing changed (the
// count is logged: it depends on timing).
func TestTokenCheckedAcrossNodes(t *testing.T) {
	cfgs := galera.Database(t, nil)
	e := conformance.Setup(t, galera.OpenNode(t, cfgs, 0), lease.Options{})
	ctx := ctxT(t)
	multi, err := lease.New[string](lease.MySQL, engine.TableOf(e.Lease), lease.Options{MultiPrimary: true})
	require.NoError(t, err)
	dbs := []*sqlx.DB{galera.OpenNode(t, cfgs, 0), galera.OpenNode(t, cfgs, 1), galera.OpenNode(t, cfgs, 2)}
	const n = 300
	for i := range n {
		e.Insert(t, fmt.Sprint("plain", i))
		e.Insert(t, fmt.Sprint("multi", i))
	}
	galera.Sync(t, cfgs)
	run := func(l *lease.Lease[string], prefix string) (lost int) {
		for i := range n {
			k := fmt.Sprint(prefix, i)
			g, err := l.Acquire(ctx, dbs[0], k, "h", 5*time.Second)
			require.NoError(t, err)
			if g, err = l.Renew(ctx, dbs[1], g, 5*time.Second); errors.Is(err, lease.ErrLost) {
				lost++
				continue
			}
			require.NoError(t, err)
			if _, err := engine.Verify(ctx, l, dbs[2], g, false); errors.Is(err, lease.ErrLost) {
				lost++
			}
			if err := l.Release(ctx, dbs[1], g); errors.Is(err, lease.ErrLost) {
				lost++
			} else {
				require.NoError(t, err)
			}
		}
		return lost
	}
	plain := run(e.Lease, "plain")
	confirmed := run(multi, "multi")
	t.Logf("%d grants: %d false losses without MultiPrimary, %d with it", n, plain, confirmed)
	assert.Zero(t, confirmed)
}

// TestFlowAcrossNodes: the three-level flow with two devices per message,
// each through its own Runner and pool (one spread per connection, one
// per statement), Options.MultiPrimary and nothing in the DSN. Every
// message is answered after resends; every tool call and every fenced
// write of a request commits once; no run is taken over (no false loss);
// and no error reaching the caller is a raw deadlock or certification
// failure.
func TestFlowAcrossNodes(t *testing.T) {
	cfgs := galera.Database(t, nil)
	ctx := ctxT(t)
	setup := galera.OpenNode(t, cfgs, 0)
	require.NoError(t, schema.Apply(ctx, setup, lease.MySQL))
	_, err := setup.ExecContext(ctx, "CREATE TABLE ledger (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, request_id VARCHAR(64) NOT NULL, kind VARCHAR(8) NOT NULL) ENGINE=InnoDB")
	require.NoError(t, err)
	galera.Sync(t, cfgs)
	tools := toolexec.NewRegistry()
	require.NoError(t, tools.Register("write", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		_, err := x.Tx.ExecContext(ctx, "INSERT INTO ledger (request_id, kind) VALUES (?, 'tool')", x.Call.RequestID)
		return json.RawMessage(`{"ok":true}`), err
	}))
	runners := make([]*request.Runner, 2)
	for i, s := range spreads {
		runners[i], err = request.New(request.Config{DB: galera.Open(t, cfgs, s), Dialect: lease.MySQL, TTL: 5 * time.Second,
			Tools: tools, Session: session.Config{AutoCreate: true}, Lease: lease.Options{MultiPrimary: true}})
		require.NoError(t, err)
	}
	agent := func(ctx context.Context, run *request.Run) (request.Answer, error) {
		if _, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":1}`)); err != nil {
			return request.Answer{}, err
		}
		if err := run.InTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO ledger (request_id, kind) VALUES (?, 'flow')", run.RequestID())
			return err
		}); err != nil {
			return request.Answer{}, err
		}
		return request.Answer{Reply: "ok"}, nil
	}
	const sessions, messages = 16, 6
	var victims, takenOver, answered, conflicts atomic.Int64
	send := func(r *request.Runner, sid, cid string) {
		for attempt := 0; attempt < 200; attempt++ {
			out, err := r.Handle(ctx, request.Message{SessionKey: sid, ClientRequestID: cid, Content: "lunch 1"}, agent)
			switch {
			case err == nil:
				require.Equal(t, "ok", out.Reply)
				answered.Add(1)
				return
			case lease.IsTransient(err):
				victims.Add(1)
				t.Errorf("raw victim from the flow: %v", err)
			case errors.Is(err, request.ErrTakenOver):
				takenOver.Add(1)
				t.Errorf("taken over with no takeover forced: %v", err)
			case errors.As(err, new(*session.BusyError)), errors.Is(err, request.ErrInFlight), errors.As(err, new(*toolexec.BusyError)):
				conflicts.Add(1)
			default:
				t.Errorf("%s/%s: %v", sid, cid, err)
				return
			}
			pause(time.Duration(5+rand.IntN(20)) * time.Millisecond)
		}
		t.Errorf("%s/%s: no answer after 200 sends", sid, cid)
	}
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Go(func() {
			sid := fmt.Sprint("s", s)
			for m := range messages {
				cid := fmt.Sprint("m", m)
				var two sync.WaitGroup
				for _, r := range runners {
					two.Go(func() { send(r, sid, cid) })
				}
				two.Wait()
			}
		})
	}
	wg.Wait()
	var rows []struct {
		Kind string `db:"kind"`
		N    int    `db:"n"`
	}
	require.NoError(t, setup.SelectContext(ctx, &rows, engine.SyncWait("SELECT kind, COUNT(*) AS n FROM ledger GROUP BY request_id, kind")))
	perRequest := map[string][]int{}
	for _, r := range rows {
		perRequest[r.Kind] = append(perRequest[r.Kind], r.N)
	}
	t.Logf("%d messages from 2 devices each: %d answers, %d conflicts resent, %d false losses, %d raw victims",
		sessions*messages, answered.Load(), conflicts.Load(), takenOver.Load(), victims.Load())
	assert.Equal(t, int64(2*sessions*messages), answered.Load(), "both devices get the answer")
	assert.Len(t, perRequest["tool"], sessions*messages)
	assert.Len(t, perRequest["flow"], sessions*messages)
	for kind, ns := range perRequest {
		for _, n := range ns {
			assert.Equal(t, 1, n, "%s writes of one request", kind)
		}
	}
	assert.Zero(t, takenOver.Load())
	assert.Zero(t, victims.Load())
}

func pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}

// TestWaitsAcrossNodes: runs that stop to wait for a person on the
// cluster. Each message is sent through one Runner and stops at its wait;
// the same answer is then sent through both Runners at once (clients
// spread per connection and per statement, Options.MultiPrimary): every
// answer gets the run's reply, the booking before the wait and the
// approved one commit once per message, and no caller sees a raw
// deadlock or certification failure.
func TestWaitsAcrossNodes(t *testing.T) {
	cfgs := galera.Database(t, nil)
	ctx := ctxT(t)
	setup := galera.OpenNode(t, cfgs, 0)
	require.NoError(t, schema.Apply(ctx, setup, lease.MySQL))
	_, err := setup.ExecContext(ctx, "CREATE TABLE ledger (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, request_id VARCHAR(64) NOT NULL, kind VARCHAR(16) NOT NULL) ENGINE=InnoDB")
	require.NoError(t, err)
	galera.Sync(t, cfgs)
	tools := toolexec.NewRegistry()
	require.NoError(t, tools.Register("book", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		var args struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(x.Canonical, &args); err != nil {
			return nil, err
		}
		_, err := x.Tx.ExecContext(ctx, "INSERT INTO ledger (request_id, kind) VALUES (?, ?)", x.Call.RequestID, args.Kind)
		return json.RawMessage(`{"ok":true}`), err
	}))
	agent := func(ctx context.Context, run *request.Run) (request.Answer, error) {
		if _, err := run.CallTool(ctx, "book", json.RawMessage(`{"kind":"deposit"}`)); err != nil {
			return request.Answer{}, err
		}
		ok, err := request.Await[bool](ctx, run, "approve", "book it?")
		if err != nil {
			return request.Answer{}, err
		}
		if !ok {
			return request.Answer{Reply: "denied"}, nil
		}
		if _, err := run.CallTool(ctx, "book", json.RawMessage(`{"kind":"approved"}`)); err != nil {
			return request.Answer{}, err
		}
		return request.Answer{Reply: "booked"}, nil
	}
	runners := make([]*request.Runner, 2)
	for i, s := range spreads {
		runners[i], err = request.New(request.Config{DB: galera.Open(t, cfgs, s), Dialect: lease.MySQL, TTL: 5 * time.Second,
			Tools: tools, Agent: agent, Session: session.Config{AutoCreate: true}, Lease: lease.Options{MultiPrimary: true}})
		require.NoError(t, err)
	}
	// retry sends f until it is answered, resending after the conflicts a
	// client resends after.
	retry := func(what string, f func() (request.Outcome, error)) (request.Outcome, bool) {
		for attempt := 0; attempt < 200; attempt++ {
			out, err := f()
			switch {
			case err == nil:
				return out, true
			case lease.IsTransient(err):
				t.Errorf("%s: raw victim: %v", what, err)
				return out, false
			case errors.As(err, new(*session.BusyError)), errors.Is(err, request.ErrInFlight), errors.As(err, new(*toolexec.BusyError)):
			default:
				t.Errorf("%s: %v", what, err)
				return out, false
			}
			pause(time.Duration(5+rand.IntN(20)) * time.Millisecond)
		}
		t.Errorf("%s: no answer after 200 sends", what)
		return request.Outcome{}, false
	}
	const messages = 24
	var wg sync.WaitGroup
	for m := range messages {
		wg.Go(func() {
			sid, cid := fmt.Sprint("s", m), "m"
			out, ok := retry(sid+" message", func() (request.Outcome, error) {
				return runners[m%2].Handle(ctx, request.Message{SessionKey: sid, ClientRequestID: cid, Content: "rent"}, nil)
			})
			if !ok {
				return
			}
			if !assert.NotNil(t, out.Waiting, "%s waits", sid) {
				return
			}
			approve := m%3 != 0
			want := map[bool]string{true: "booked", false: "denied"}[approve]
			var both sync.WaitGroup
			for _, r := range runners {
				both.Go(func() {
					out, ok := retry(sid+" answer", func() (request.Outcome, error) {
						return r.Answer(ctx, sid, cid, "approve", approve)
					})
					if ok {
						assert.Equal(t, want, out.Reply, "%s: both answers get the run's reply", sid)
					}
				})
			}
			both.Wait()
		})
	}
	wg.Wait()
	var rows []struct {
		Kind string `db:"kind"`
		N    int    `db:"n"`
	}
	require.NoError(t, setup.SelectContext(ctx, &rows, engine.SyncWait("SELECT kind, COUNT(*) AS n FROM ledger GROUP BY request_id, kind")))
	perKind := map[string]int{}
	for _, r := range rows {
		assert.Equal(t, 1, r.N, "%s bookings of one request", r.Kind)
		perKind[r.Kind]++
	}
	t.Logf("%d messages waited and were answered twice at once across nodes: %v", messages, perKind)
	assert.Equal(t, messages, perKind["deposit"])
	assert.Equal(t, messages-messages/3, perKind["approved"])
}

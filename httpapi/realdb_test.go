package httpapi_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/internal/testkit/outage"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func newRunner(t *testing.T, db *sqlx.DB, autoCreate bool) *request.Runner {
	t.Helper()
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	require.NoError(t, schema.Apply(context.Background(), db, d))
	r, err := request.New(request.Config{DB: db, Dialect: d, TTL: 20 * time.Second, ReleaseTimeout: 3 * time.Second,
		Session: session.Config{AutoCreate: autoCreate}, RequireSession: !autoCreate})
	require.NoError(t, err)
	return r
}

func noop(context.Context, *request.Run) (request.Answer, error) {
	return request.Answer{Reply: "ok"}, nil
}

type want struct {
	status int
	typ    string
}

func check(t *testing.T, what string, err error, w want) httpapi.Problem {
	t.Helper()
	require.Error(t, err, what)
	p := httpapi.ProblemFor(err)
	assert.Equal(t, w.status, p.Status, "%s: %v", what, err)
	assert.Equal(t, httpapi.ProblemBase+w.typ, p.Type, "%s: %v", what, err)
	return p
}

// The errors the request flow really returns, on each database, get their
// status, type and Retry-After.
func TestProblemForRealErrors(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		r := newRunner(t, db, true)

		_, err := r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "m-1", Content: "lunch"},
			func(ctx context.Context, run *request.Run) (request.Answer, error) {
				// While m-1 holds the session: another message, and m-1 again.
				_, err := r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "m-2", Content: "taxi"}, noop)
				p := check(t, "another message", err, want{409, httpapi.TypeSessionBusy})
				assert.Greater(t, p.RetryAfter, time.Second, "the session's time left, not the default")
				assert.LessOrEqual(t, p.RetryAfter, 20*time.Second)

				_, err = r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "m-1", Content: "lunch"}, noop)
				p = check(t, "the same message", err, want{409, httpapi.TypeRequestInFlight})
				assert.Greater(t, p.RetryAfter, time.Second)
				assert.LessOrEqual(t, p.RetryAfter, 20*time.Second)
				return request.Answer{Reply: "ok"}, nil
			})
		require.NoError(t, err)

		_, err = r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "m-1", Content: "dinner"}, noop)
		check(t, "m-1 with other content", err, want{422, httpapi.TypeClientRequestIDReused})

		_, err = r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "", Content: "x"}, noop)
		p := check(t, "no client request id", err, want{400, httpapi.TypeInvalidRequest})
		assert.Contains(t, p.Detail, "client request id")

		_, err = r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "m-3", Content: "x"},
			func(context.Context, *request.Run) (request.Answer, error) {
				return request.Answer{}, errors.New("model exploded")
			})
		p = check(t, "the agent failed", err, want{500, httpapi.TypeAgentFailed})
		assert.NotContains(t, p.Detail, "exploded")

		// The queue, interrupts and retention.
		qr, err := request.New(request.Config{DB: db, TTL: 20 * time.Second, ReleaseTimeout: 3 * time.Second,
			Session: session.Config{AutoCreate: true}, Agent: noop, Queue: request.QueueConfig{Max: 1}})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, qr.Close(context.Background())) })
		_, err = qr.Handle(ctx, request.Message{SessionKey: "q", ClientRequestID: "q-1", Content: "x"},
			func(ctx context.Context, run *request.Run) (request.Answer, error) {
				out, err := qr.Handle(ctx, request.Message{SessionKey: "q", ClientRequestID: "q-2", Content: "x", OnBusy: request.Queue}, nil)
				require.NoError(t, err)
				assert.True(t, out.Queued, "a queued message is not a problem")
				_, err = qr.Handle(ctx, request.Message{SessionKey: "q", ClientRequestID: "q-3", Content: "x", OnBusy: request.Queue}, nil)
				p := check(t, "a full queue", err, want{429, httpapi.TypeQueueFull})
				assert.Equal(t, time.Second, p.RetryAfter)
				return request.Answer{Reply: "ok"}, nil
			})
		require.NoError(t, err)
		_, err = qr.Sweep(ctx, 0)
		require.NoError(t, err)
		_, err = qr.Handle(ctx, request.Message{SessionKey: "q", ClientRequestID: "q-1", Content: "x"}, nil)
		check(t, "a swept message", err, want{410, httpapi.TypeExpired})
		_, err = qr.Status(ctx, "q", "no-such")
		check(t, "an unknown message", err, want{404, httpapi.TypeNotFound})

		strict := newRunner(t, db, false)
		_, err = strict.Handle(ctx, request.Message{SessionKey: "nobody", ClientRequestID: "m-1", Content: "x"}, noop)
		check(t, "no such session", err, want{404, httpapi.TypeSessionNotFound})

		// The lease alone.
		l := r.Sessions().Lease()
		require.NoError(t, r.Sessions().Create(ctx, db, "s2"))
		g, err := l.Acquire(ctx, db, "s2", "h-1", 20*time.Second)
		require.NoError(t, err)
		_, err = l.Acquire(ctx, db, "s2", "h-2", 20*time.Second)
		p = check(t, "a held lease", err, want{409, httpapi.TypeLeaseHeld})
		assert.Greater(t, p.RetryAfter, time.Second)
		require.NoError(t, l.Release(ctx, db, g))
		_, err = l.Renew(ctx, db, g, 20*time.Second)
		check(t, "a released lease renewed", err, want{409, httpapi.TypeLeaseLost})
		_, err = l.Create(ctx, db, "s2", "h-3", 20*time.Second, lease.CreateOptions{})
		check(t, "a row created twice", err, want{409, httpapi.TypeAlreadyExists})
		assert.False(t, httpapi.IsUnavailable(err), "a duplicate key is an answer from a reachable database")

		// Errors of a reachable database are not unavailability.
		_, err = db.ExecContext(ctx, "SELEC 1")
		require.Error(t, err)
		assert.False(t, httpapi.IsUnavailable(err), "a syntax error: %v", err)
		assert.Equal(t, http.StatusInternalServerError, httpapi.StatusCode(err))
		dctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
		defer cancel()
		<-dctx.Done()
		_, err = db.ExecContext(dctx, "SELECT 1")
		require.Error(t, err)
		assert.False(t, httpapi.IsUnavailable(err), "the caller's deadline: %v", err)
		require.NoError(t, httpapi.Ping(ctx, db, 5*time.Second))
	})
}

// A client request id used again after its request row was moved to
// another client request id by hand makes the old request's call again:
// its effect key, derived from the client request id, is the call of a
// request that still exists, so toolexec refuses it with *KeyTakenError
// and nothing acts. (A call whose request is gone is adopted instead.)
// The agent returns that error: a 409 effect-key-taken, final (no
// Retry-After), not a 500, and the detail names neither the key nor the
// old request.
func TestProblemForEffectKeyTaken(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		d, err := lease.DetectDialect(db)
		require.NoError(t, err)
		require.NoError(t, schema.Apply(ctx, db, d))
		tools := toolexec.NewRegistry()
		acts := 0
		require.NoError(t, tools.RegisterExternal("notify", func(context.Context, toolexec.External) (json.RawMessage, error) {
			acts++
			return json.RawMessage(`{"sent":true}`), nil
		}, toolexec.ExternalOptions{}))
		r, err := request.New(request.Config{DB: db, Dialect: d, TTL: 20 * time.Second, ReleaseTimeout: 3 * time.Second,
			Session: session.Config{AutoCreate: true}, Tools: tools})
		require.NoError(t, err)
		agent := func(ctx context.Context, run *request.Run) (request.Answer, error) {
			if _, err := run.CallTool(ctx, "notify", json.RawMessage(`{"to":"ann"}`)); err != nil {
				return request.Answer{}, err
			}
			return request.Answer{Reply: "told"}, nil
		}
		msg := request.Message{SessionKey: "s", ClientRequestID: "c-1", Content: "tell them"}
		first, err := r.Handle(ctx, msg, agent)
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, d.Rebind("UPDATE "+schema.RequestTable+" SET "+schema.ColClientRequestID+" = ? WHERE "+
			schema.ColID+" = ?"), "c-1-moved", first.RequestID)
		require.NoError(t, err)

		_, err = r.Handle(ctx, msg, agent)
		var kt *toolexec.KeyTakenError
		require.ErrorAs(t, err, &kt)
		assert.Equal(t, 1, acts, "nothing acted under the other call's key")
		p := check(t, "the old request's call made again", err, want{409, httpapi.TypeEffectKeyTaken})
		assert.Zero(t, p.RetryAfter, "a resend answers the same")
		assert.NotContains(t, p.Detail, kt.EffectKey)
		assert.NotContains(t, p.Detail, first.RequestID)
	})
}

// An external effect whose remote side cannot be reached (a closed port:
// connection refused, what a database gone gives too) leaves its outcome
// unknown. The agent returns that error: 502 outcome-unknown, not 503
// "the database cannot be reached" — the database answered every
// statement.
func TestProblemForRemoteSideDown(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		d, err := lease.DetectDialect(db)
		require.NoError(t, err)
		require.NoError(t, schema.Apply(ctx, db, d))
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		remote := l.Addr().String()
		require.NoError(t, l.Close()) // the payment service is down
		tools := toolexec.NewRegistry()
		require.NoError(t, tools.RegisterExternal("pay", func(ctx context.Context, x toolexec.External) (json.RawMessage, error) {
			var dialer net.Dialer
			c, err := dialer.DialContext(ctx, "tcp", remote)
			if err != nil {
				return nil, err
			}
			c.Close()
			return json.RawMessage(`{"paid":true}`), nil
		}, toolexec.ExternalOptions{}))
		r, err := request.New(request.Config{DB: db, Dialect: d, TTL: 20 * time.Second, ReleaseTimeout: 3 * time.Second,
			Session: session.Config{AutoCreate: true}, Tools: tools})
		require.NoError(t, err)
		_, err = r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "c-1", Content: "pay"},
			func(ctx context.Context, run *request.Run) (request.Answer, error) {
				if _, err := run.CallTool(ctx, "pay", json.RawMessage(`{"amount":35}`)); err != nil {
					return request.Answer{}, err
				}
				return request.Answer{Reply: "paid"}, nil
			})
		var oe *net.OpError
		require.ErrorAs(t, err, &oe, "the remote side's refusal")
		assert.ErrorAs(t, err, new(*toolexec.UnknownOutcomeError))
		assert.False(t, httpapi.IsUnavailable(err), "%v", err)
		p := check(t, "the remote side refused", err, want{502, httpapi.TypeOutcomeUnknown})
		assert.Equal(t, time.Second, p.RetryAfter)
	})
}

// A database that cannot be reached — a closed port and reset connections
// for MySQL and PostgreSQL, a file that cannot be opened for SQLite — is
// recognised in every error the caller sees: a new statement, a statement
// of a transaction begun before, a ping, and a whole message.
func TestIsUnavailableRealOutage(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			o := outage.Open(t, d)
			r := newRunner(t, o.DB, true)
			_, err := r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "before", Content: "x"}, noop)
			require.NoError(t, err)
			// A transaction open across the outage (not on SQLite, where it
			// would keep its open file and hold the write lock).
			var tx *sql.Tx
			if d != lease.SQLite {
				tx, err = o.DB.BeginTx(ctx, nil)
				require.NoError(t, err)
				_, err = tx.ExecContext(ctx, "SELECT 1")
				require.NoError(t, err)
			}

			o.Cut()
			_, err = o.DB.ExecContext(ctx, "SELECT 1")
			assert.True(t, httpapi.IsUnavailable(err), "a new statement: %v", err)
			if tx != nil {
				_, err = tx.ExecContext(ctx, "SELECT 1")
				assert.True(t, httpapi.IsUnavailable(err), "a statement in a transaction begun before: %v", err)
				_ = tx.Rollback()
			}
			err = httpapi.Ping(ctx, o.DB, 5*time.Second)
			assert.ErrorIs(t, err, httpapi.ErrUnavailable)
			assert.True(t, httpapi.IsUnavailable(err), "a ping: %v", err)
			_, err = r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "during", Content: "x"}, noop)
			check(t, "a message", err, want{503, httpapi.TypeUnavailable})
			assert.Equal(t, time.Second, httpapi.ProblemFor(err).RetryAfter)

			o.Restore()
			require.NoError(t, httpapi.Ping(ctx, o.DB, 5*time.Second))
			_, err = r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "during", Content: "x"}, noop)
			assert.NoError(t, err, "the same message once the database is back")
		})
	}
}

// A statement running when the server goes away (MySQL, PostgreSQL).
func TestIsUnavailableMidStatement(t *testing.T) {
	for _, d := range []lease.Dialect{lease.MySQL, lease.Postgres} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			o := outage.Open(t, d)
			sleep := "SELECT SLEEP(30)"
			if d == lease.Postgres {
				sleep = "SELECT pg_sleep(30)"
			}
			conn, err := o.DB.Conn(ctx)
			require.NoError(t, err)
			defer conn.Close()
			var id int64
			idQuery := "SELECT CONNECTION_ID()"
			if d == lease.Postgres {
				idQuery = "SELECT pg_backend_pid()"
			}
			require.NoError(t, conn.QueryRowContext(ctx, idQuery).Scan(&id))
			done := make(chan error, 1)
			go func() {
				_, err := conn.ExecContext(ctx, sleep)
				done <- err
			}()
			// Wait until the server runs the statement, then cut.
			admin := testdb.Open(t, d)
			waitRunning(t, admin, d, id)
			o.Cut()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the statement did not fail when the connection was reset")
			}
			assert.True(t, httpapi.IsUnavailable(err), "%v", err)
		})
	}
}

// waitRunning waits until the server reports connection id running a
// statement.
func waitRunning(t *testing.T, admin *sqlx.DB, d lease.Dialect, id int64) {
	t.Helper()
	q := "SELECT COUNT(*) FROM information_schema.processlist WHERE id = ? AND info LIKE 'SELECT SLEEP%'"
	if d == lease.Postgres {
		q = "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE 'SELECT pg_sleep%'"
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		require.NoError(t, admin.QueryRow(q, id).Scan(&n))
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the statement never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

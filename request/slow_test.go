package request

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// slowEnv is a runner with one tool, "slow": it inserts a ledger row in its
// transaction, tells the test (started), and then works until its own
// duration has passed or the test says stop, before returning.
type slowEnv struct {
	*env
	started chan struct{}
	stop    chan struct{}
	cause   chan error // the context's cause, when it was cancelled first
	// probe, when set, is called once, probeAt into the work.
	probe   func()
	probeAt time.Duration
	worked  time.Duration // how long the last side effect worked
}

func newSlowEnv(t *testing.T, db *sqlx.DB, ttl time.Duration, work time.Duration) *slowEnv {
	t.Helper()
	ctx := context.Background()
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	require.NoError(t, schema.Apply(ctx, db, d))
	_, err = db.ExecContext(ctx, ledgerDDL)
	require.NoError(t, err)
	e := &slowEnv{env: &env{db: db, d: d}, started: make(chan struct{}, 1), stop: make(chan struct{}), cause: make(chan error, 1)}
	tools := toolexec.NewRegistry()
	require.NoError(t, tools.Register("slow", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		if _, err := x.Tx.ExecContext(ctx, d.Rebind("INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)"), x.Call.RequestID, "1"); err != nil {
			return nil, err
		}
		e.started <- struct{}{}
		// The work itself: a slow remote call, a report, an import.
		begun := time.Now()
		timer := time.NewTimer(work)
		defer timer.Stop()
		var probe <-chan time.Time
		if e.probe != nil {
			pt := time.NewTimer(e.probeAt)
			defer pt.Stop()
			probe = pt.C
		}
	working:
		for {
			select {
			case <-probe:
				e.probe()
			case <-timer.C:
				break working
			case <-e.stop:
				break working
			case <-ctx.Done():
				e.cause <- context.Cause(ctx)
				return nil, ctx.Err()
			}
		}
		e.worked = time.Since(begun)
		e.writes.Add(1)
		return json.RawMessage(`{"ok":true}`), nil
	}))
	e.r, err = New(Config{DB: db, TTL: ttl, HeartbeatInterval: ttl / 4, Tools: tools, ReleaseTimeout: 10 * time.Second,
		Session: sessionConfigAutoCreate()})
	require.NoError(t, err)
	return e
}

func slowAgent(ctx context.Context, run *Run) (Answer, error) {
	if _, err := run.CallTool(ctx, "slow", json.RawMessage(`{}`)); err != nil {
		return Answer{}, err
	}
	return Answer{Reply: "done"}, nil
}

// A side effect that works for five TTLs with nobody contending keeps
// every lock of its run and commits, on every dialect: the lease rows are
// locked only at the end of its transaction (and on SQLite the heartbeat
// renews inside it).
func TestSideEffectOfFiveTTLsCommits(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		const ttl = time.Second
		e := newSlowEnv(t, db, ttl, 5*ttl)
		ctx := bg(t)
		// Four TTLs into the work, another connection sees the session
		// held (on MySQL and PostgreSQL the renewals reach the database;
		// on SQLite they are inside the open transaction, and no one else
		// can write until it ends).
		held := make(chan bool, 1)
		e.probeAt = 4 * ttl
		e.probe = func() {
			st, err := e.r.Sessions().Lease().Inspect(context.Background(), db, "s")
			held <- err == nil && st.Held
		}
		done := make(chan error, 1)
		var out Outcome
		go func() {
			var err error
			out, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "import"}, slowAgent)
			done <- err
		}()
		<-e.started
		require.NoError(t, <-done)
		assert.GreaterOrEqual(t, e.worked, 5*ttl)
		if e.d != lease.SQLite {
			assert.True(t, <-held, "the session lease was renewed during the side effect")
		}
		assert.Equal(t, "done", out.Reply)
		assert.Equal(t, int64(1), e.writes.Load())
		assert.Equal(t, 1, e.ledgerRows(t))
		status, stillHeld := e.status(t, "s", "c")
		assert.Equal(t, schema.StoredSucceeded, status)
		assert.False(t, stillHeld)
	})
}

// A takeover during a long side effect stops it and prevents its commit;
// the new owner's run performs the effect once.
func TestTakeoverDuringLongSideEffect(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		const ttl = time.Second
		e := newSlowEnv(t, db, ttl, time.Minute)
		ctx := bg(t)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "import"}
		done := make(chan error, 1)
		go func() {
			_, err := e.r.Handle(ctx, msg, slowAgent)
			done <- err
		}()
		<-e.started

		if e.d == lease.SQLite {
			// The open transaction holds SQLite's write lock: no one can
			// take the lease over while it runs. A thief that does not
			// wait is refused at once.
			conn, err := db.Conn(ctx)
			require.NoError(t, err)
			_, err = conn.ExecContext(ctx, "PRAGMA busy_timeout = 0")
			require.NoError(t, err)
			_, err = conn.ExecContext(ctx, "UPDATE rowlease_session SET token = 'stolen', holder = 'thief' WHERE session_key = 's'")
			require.Error(t, err)
			assert.True(t, lease.IsTransient(err), "busy: %v", err)
			require.NoError(t, conn.Close())
			close(e.stop)
			require.NoError(t, <-done)
			assert.Equal(t, 1, e.ledgerRows(t))
			return
		}

		// Steal the session: the next renewal finds its token gone.
		_, err := db.ExecContext(ctx, "UPDATE rowlease_session SET token = 'stolen', holder = 'thief' WHERE session_key = 's'")
		require.NoError(t, err)
		cause := <-e.cause
		var lost *heartbeat.LostError
		require.ErrorAs(t, cause, &lost)
		assert.Equal(t, heartbeat.ReasonGone, lost.Reason, "noticed by a renewal, not by the deadline: renewals did not wait")
		assert.Equal(t, "session", lost.Lease)
		err = <-done
		assert.ErrorIs(t, err, ErrTakenOver)
		assert.Equal(t, 0, e.ledgerRows(t), "the side effect did not commit")

		// The thief gives the session back; a resend runs the effect once.
		_, err = db.ExecContext(ctx, "UPDATE rowlease_session SET token = NULL, holder = NULL, expires_at = NULL WHERE session_key = 's'")
		require.NoError(t, err)
		waitFor(t, func() bool {
			_, held := e.status(t, "s", "c")
			return !held
		})
		close(e.stop)
		out, err := e.r.Handle(ctx, msg, slowAgent)
		require.NoError(t, err)
		assert.True(t, out.Resumed)
		assert.Equal(t, 1, e.ledgerRows(t))
	})
}

// When renewals become impossible (another transaction locks the session
// row for longer than the TTL), the run stops at its trust deadline and its
// side effect does not commit.
// (MySQL and PostgreSQL: on SQLite the flow's own transaction holds the
// only write lock, and TestTakeoverDuringLongSideEffect shows no one else
// can write meanwhile.)
func TestRenewalsImpossibleDuringLongSideEffect(t *testing.T) {
	for _, d := range []lease.Dialect{lease.MySQL, lease.Postgres} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			renewalsImpossible(t, testdb.Open(t, d))
		})
	}
}

func renewalsImpossible(t *testing.T, db *sqlx.DB) {
	{
		const ttl = time.Second
		e := newSlowEnv(t, db, ttl, time.Minute)
		ctx := bg(t)
		done := make(chan error, 1)
		go func() {
			_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "import"}, slowAgent)
			done <- err
		}()
		<-e.started
		blocker, err := db.BeginTxx(ctx, nil)
		require.NoError(t, err)
		_, err = blocker.ExecContext(ctx, "UPDATE rowlease_session SET updated_at = updated_at WHERE session_key = 's'")
		require.NoError(t, err)
		cause := <-e.cause
		var lost *heartbeat.LostError
		require.ErrorAs(t, cause, &lost)
		assert.Equal(t, heartbeat.ReasonDeadline, lost.Reason)
		require.NoError(t, blocker.Rollback())
		assert.ErrorIs(t, <-done, ErrTakenOver)
		assert.Equal(t, 0, e.ledgerRows(t))
	}
}

package request

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// isAtOnceClaim reports whether q is the statement that takes a session
// and inserts a new request at once (PostgreSQL, engine.AcquireCreate).
func isAtOnceClaim(q string) bool {
	return strings.HasPrefix(q, "WITH ") && strings.Contains(q, "UPDATE \""+schema.SessionTable+"\"") &&
		strings.Contains(q, "INSERT INTO \""+schema.RequestTable+"\"")
}

// requestRows counts the request rows of (session, client request id).
func (e *env) requestRows(t *testing.T, sessionKey, clientID string) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.Get(&n, e.db.Rebind("SELECT COUNT(*) FROM "+schema.RequestTable+" WHERE "+
		schema.ColSessionKey+" = ? AND "+schema.ColClientRequestID+" = ?"), sessionKey, clientID))
	return n
}

// TestNewRequestClaimStatements: a new message (OnBusy Reject) reads its
// request, takes its session and inserts its request in one statement with
// no transaction on PostgreSQL; on MySQL it inserts the request and then
// takes the session, two autocommit statements with no read; on SQLite it
// reads the request, then takes the session and inserts the request in a
// transaction of two. A message of a busy session is refused
// (*session.BusyError) and leaves no request row (on MySQL its insert is
// deleted again); the same message sent again while it runs is
// ErrInFlight, at once.
func TestNewRequestClaimStatements(t *testing.T) {
	eachCounted(t, 30*time.Second, func(t *testing.T, e *env, c *countdb.Counter) {
		ctx := bg(t)
		require.NoError(t, e.r.Sessions().Create(ctx, e.db, "s"))
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "warm-up", Content: "x"}, answerOK)
		require.NoError(t, err)

		c.Reset()
		c.Record(true)
		in, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c1", Content: "x"}, func(context.Context, *Run) (Answer, error) {
				close(in)
				<-release
				return Answer{Reply: "ok"}, nil
			})
			done <- err
		}()
		<-in
		log, st := c.Log(), c.Stats()
		for i, q := range log {
			t.Logf("%d: %.120s", i+1, q)
		}
		require.NotEmpty(t, log)
		if e.d == lease.Postgres {
			assert.True(t, isAtOnceClaim(log[0]), "the find and the claim at once")
			assert.True(t, strings.HasPrefix(log[0], "WITH rowlease_existing AS (SELECT "), log[0])
			assert.Equal(t, int64(1), st.Statements)
			assert.Zero(t, st.Begins)
		} else if e.d == lease.MySQL {
			require.Len(t, log, 2)
			assert.True(t, strings.HasPrefix(log[0], "INSERT INTO `"+schema.RequestTable+"`"), "the request first: %s", log[0])
			assert.True(t, strings.HasPrefix(log[1], "UPDATE `"+schema.SessionTable+"`"), "then the session: %s", log[1])
			assert.Zero(t, st.Begins)
		} else {
			assert.Equal(t, int64(3), st.Statements, "the find, the session, the insert")
			assert.Equal(t, int64(1), st.Begins)
		}

		// Busy: refused, nothing written.
		_, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c2", Content: "y"}, answerOK)
		require.ErrorAs(t, err, new(*session.BusyError))
		assert.Zero(t, e.requestRows(t, "s", "c2"))
		// The same message again, while it runs: in flight, at once.
		_, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c1", Content: "x"}, answerOK)
		require.ErrorIs(t, err, ErrInFlight)
		close(release)
		require.NoError(t, <-done)
		assert.Equal(t, 1, e.requestRows(t, "s", "c1"))
	})
}

// noGhostLeft checks what a new message "c1" of session "s" left when
// its claim failed with an unknown outcome: nothing held by a request the
// caller was told failed. The session is free at once, no request row is
// left, the next message of the session runs, and the failed message
// sent again runs as new.
func noGhostLeft(t *testing.T, ctx context.Context, e *env) {
	t.Helper()
	st, err := e.r.Sessions().Inspect(ctx, e.db, "s")
	require.NoError(t, err)
	assert.False(t, st.Held, "the session is not held by a request that does not exist (holder %q)", st.Holder)
	assert.Zero(t, e.requestRows(t, "s", "c1"), "no request row is left")
	out, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c2", Content: "y"}, answerOK)
	require.NoError(t, err, "the next message of the session is not refused")
	assert.Equal(t, "ok", out.Reply)

	out, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c1", Content: "x"}, answerOK)
	require.NoError(t, err)
	assert.False(t, out.Replayed)
	assert.False(t, out.Resumed, "nothing of the failed send was left to resume")
	assert.Equal(t, int64(1), out.Attempt)
}

// TestNewRequestCancelledClaimGivesBack: ctx is cancelled with the
// statement that takes the session for a new request on the wire (on
// PostgreSQL, the one that also inserts the request), and the statement
// takes effect. What it took is given back under a context that survives
// the cancellation (TestNewRequestLeavesNoGhostSession: the reply lost).
func TestNewRequestCancelledClaimGivesBack(t *testing.T) {
	eachCounted(t, 30*time.Second, func(t *testing.T, e *env, c *countdb.Counter) {
		ctx := bg(t)
		require.NoError(t, e.r.Sessions().Create(ctx, e.db, "s"))
		hctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var once atomic.Bool
		c.FailAfter(func(q string) error {
			if isSessionAcquire(q) && once.CompareAndSwap(false, true) {
				cancel()
				return context.Canceled
			}
			return nil
		})
		_, err := e.r.Handle(hctx, Message{SessionKey: "s", ClientRequestID: "c1", Content: "x"}, answerOK)
		c.FailAfter(nil)
		require.True(t, once.Load(), "the statement that takes the session failed")
		require.ErrorIs(t, err, context.Canceled)
		noGhostLeft(t, ctx, e)
	})
}

// opNames is a lease.Observer that keeps each operation as
// table:name:verdict.
type opNames struct {
	mu  sync.Mutex
	ops []string
}

func (o *opNames) Start(ctx context.Context, _ lease.Span) (context.Context, func(error, ...lease.Attr)) {
	return ctx, func(error, ...lease.Attr) {}
}

func (o *opNames) Op(_ context.Context, op lease.Op) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops = append(o.ops, op.Table+":"+op.Name+":"+op.Verdict)
}

func (o *opNames) Event(context.Context, string, ...lease.Attr) {}

func (o *opNames) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.ops
	o.ops = nil
	return out
}

// TestNewRequestClaimObserved: the claim of a new message reports the
// session's acquire and the request's create, as the lone operations are
// reported, on every dialect (one statement on PostgreSQL or not; on MySQL
// the create first); a busy session reports the acquire's conflict and no
// create (on MySQL, the create and then the request's delete).
func TestNewRequestClaimObserved(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		obs := &opNames{}
		r, err := New(Config{DB: db, TTL: 30 * time.Second, Tools: e.tools, Session: sessionConfigAutoCreate(), Observer: obs})
		require.NoError(t, err)
		defer func() { require.NoError(t, r.Close(context.Background())) }()
		ctx := bg(t)
		require.NoError(t, r.Sessions().Create(ctx, db, "s"))
		claimOps := func(ops []string) []string {
			var out []string
			for _, op := range ops {
				if strings.Contains(op, ":acquire:") || strings.Contains(op, ":create:") {
					out = append(out, op)
				}
			}
			return out
		}
		in, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		obs.take()
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c1", Content: "x"}, func(context.Context, *Run) (Answer, error) {
				close(in)
				<-release
				return Answer{Reply: "ok"}, nil
			})
			done <- err
		}()
		<-in
		claimed := []string{schema.SessionTable + ":acquire:acquired", schema.RequestTable + ":create:acquired"}
		if e.d == lease.MySQL {
			// The request first (requestFirstClaimer).
			claimed[0], claimed[1] = claimed[1], claimed[0]
		}
		assert.Equal(t, claimed, claimOps(obs.take()))
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c2", Content: "y"}, answerOK)
		require.ErrorAs(t, err, new(*session.BusyError))
		ops := obs.take()
		busy := claimOps(ops)
		if e.d == lease.MySQL {
			// Its request inserted, the session's conflict, and the
			// request deleted again.
			require.NotEmpty(t, busy)
			assert.Equal(t, schema.RequestTable+":create:acquired", busy[0])
			busy = busy[1:]
			assert.Contains(t, ops, schema.RequestTable+":delete:ok")
		}
		require.NotEmpty(t, busy)
		for _, op := range busy {
			assert.Equal(t, schema.SessionTable+":acquire:held", op, "a busy session: its acquire's conflict, no create")
		}
		close(release)
		require.NoError(t, <-done)
	})
}

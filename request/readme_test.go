package request

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// TestReadmeQueueConfigTakesANewSession: the Config of the queue block of
// docs/flow.md (moved there from README), copied as it stands (no Session config: the shipped session
// table), answers the first message of a session that has no lock row
// yet, with each OnBusy policy, instead of 404 (*session.NotFoundError).
func TestReadmeQueueConfigTakesANewSession(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		agent := func(ctx context.Context, run *Run) (Answer, error) { return Answer{Reply: "ok"}, nil }
		tools := e.tools

		// As in docs/flow.md ("When the session is busy").
		runner, err := New(Config{DB: db, Tools: tools, Agent: agent, // Agent runs queued messages
			Retention: RetentionConfig{After: 30 * 24 * time.Hour}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = runner.Close(context.Background()) })

		for i, policy := range []Policy{Reject, Queue, Interrupt} {
			sid := "new-session-" + policy.String()
			out, err := runner.Handle(ctx, Message{SessionKey: sid, ClientRequestID: "c1", Content: "x", OnBusy: policy}, nil)
			require.NoError(t, err, "first message of a new session, policy %d", i)
			require.Equal(t, "ok", out.Reply)
		}
	})
}

// TestSessionRowRequiredWhereAsked: a missing session row is still 404
// (*session.NotFoundError) with nothing written where the service asks for
// it: on the shipped table with RequireSession, and on a session table of
// the user's own (Session.Table set) without AutoCreate, whose rows the
// user's code creates.
func TestSessionRowRequiredWhereAsked(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		agent := func(ctx context.Context, run *Run) (Answer, error) { return Answer{Reply: "ok"}, nil }
		_, err := db.ExecContext(ctx, "CREATE TABLE chat_session (id VARCHAR(191) NOT NULL PRIMARY KEY)")
		require.NoError(t, err)
		cols := lease.Columns{Key: "id", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation"}
		stmts, err := schema.LeaseColumnsDDL(e.d, engine.MustTable("chat_session", cols))
		require.NoError(t, err)
		for _, s := range stmts {
			_, err := db.ExecContext(ctx, s)
			require.NoError(t, err)
		}
		own := session.Config{Table: "chat_session", Columns: cols}
		countOwn := func() (n int) {
			require.NoError(t, db.GetContext(ctx, &n, "SELECT COUNT(*) FROM chat_session"))
			return n
		}
		for name, cfg := range map[string]Config{
			"shipped table, RequireSession": {DB: db, Agent: agent, RequireSession: true},
			"own table, no AutoCreate":      {DB: db, Agent: agent, Session: own},
		} {
			runner, err := New(cfg)
			require.NoError(t, err, name)
			t.Cleanup(func() { _ = runner.Close(context.Background()) })
			before := snapshot(t, e)
			_, err = runner.Handle(ctx, Message{SessionKey: "unknown", ClientRequestID: "c1", Content: "x"}, nil)
			require.ErrorAs(t, err, new(*session.NotFoundError), name)
			require.Equal(t, before, snapshot(t, e), "%s: nothing written", name)
			require.Zero(t, countOwn(), name)
		}
		// With AutoCreate on the user's table, the first message creates the row.
		own.AutoCreate = true
		runner, err := New(Config{DB: db, Agent: agent, Session: own})
		require.NoError(t, err)
		t.Cleanup(func() { _ = runner.Close(context.Background()) })
		out, err := runner.Handle(ctx, Message{SessionKey: "new", ClientRequestID: "c1", Content: "x"}, nil)
		require.NoError(t, err)
		require.Equal(t, "ok", out.Reply)
		require.Equal(t, 1, countOwn())
	})
}

package request

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/session"
)

// TestReadmeQueueConfigTakesANewSession: the Config of README's queue
// block, copied as it stands, answers the first message of a session that
// has no lock row yet, with each OnBusy policy, instead of 404
// (session.ErrNotFound).
func TestReadmeQueueConfigTakesANewSession(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		agent := func(ctx context.Context, run *Run) (Answer, error) { return Answer{Reply: "ok"}, nil }
		tools := e.tools

		// As in README ("When the session is busy").
		runner, err := New(Config{DB: db, Tools: tools, Agent: agent, // Agent runs queued messages
			Session:   session.Config{AutoCreate: true}, // a new session's first message creates its row
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

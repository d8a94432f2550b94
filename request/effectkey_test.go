package request

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// TestEffectKeySurvivesALostTail: an asynchronous failover can lose the
// tail that held a message's request row and its tool execution (the
// intent of an external effect, acted on already). The client resends the
// message; the run makes the same call and must act under the same effect
// key, so that a receiver that deduplicates by key acts once.
func TestEffectKeySurvivesALostTail(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 10*time.Second)
		ctx := bg(t)
		var keys []string
		require.NoError(t, e.tools.RegisterExternal("notify", func(ctx context.Context, x toolexec.External) (json.RawMessage, error) {
			keys = append(keys, x.EffectKey)
			return json.RawMessage(`{"sent":true}`), nil
		}, toolexec.ExternalOptions{}))
		msg := Message{SessionKey: "s", ClientRequestID: "c-1", Content: "tell them"}
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			if _, err := run.CallTool(ctx, "notify", json.RawMessage(`{"to":"ann","n":35}`)); err != nil {
				return Answer{}, err
			}
			return Answer{Reply: "told"}, nil
		}
		first, err := e.r.Handle(ctx, msg, agent)
		require.NoError(t, err)
		require.Len(t, keys, 1)

		// The lost tail: the request row and its tool execution are gone
		// (the promoted standby never had them).
		_, err = db.ExecContext(ctx, e.d.Rebind("DELETE FROM "+schema.ToolExecutionTable+" WHERE "+schema.ColRequestID+" = ?"), first.RequestID)
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, e.d.Rebind("DELETE FROM "+schema.RequestTable+" WHERE "+schema.ColID+" = ?"), first.RequestID)
		require.NoError(t, err)

		again, err := e.r.Handle(ctx, msg, agent)
		require.NoError(t, err)
		require.Len(t, keys, 2, "the resent message ran again: its reply was lost")
		assert.NotEqual(t, first.RequestID, again.RequestID, "a new request row")
		assert.Equal(t, keys[0], keys[1], "the same call acts under the same effect key")

		// Another message of the session making the same call is another
		// effect, under another key.
		other, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c-2", Content: "tell them"}, agent)
		require.NoError(t, err)
		require.Len(t, keys, 3)
		assert.NotEqual(t, keys[0], keys[2], "another client request id, another key")
		assert.Equal(t, "told", other.Reply)
	})
}

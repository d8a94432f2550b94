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

// TestCallOfALostRequestAdopted: an asynchronous failover can lose the
// tail that held a message's request row while its run goes on against
// the promoted standby, where its tool call's row is then inserted
// without it (the call's side effect never commits there: its fence needs
// the request's lease). The resent message makes a new request; its call
// derives the same id, and takes the orphaned call over instead of
// failing with *toolexec.KeyTakenError on every resend: the side effect
// runs once. A succeeded orphan's result is returned without running.
func TestCallOfALostRequestAdopted(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 10*time.Second)
		ctx := bg(t)
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			if _, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":35}`)); err != nil {
				return Answer{}, err
			}
			return Answer{Reply: "written"}, nil
		}
		for _, orphan := range []string{schema.StoredProcessing, schema.StoredSucceeded} {
			msg := Message{SessionKey: "s", ClientRequestID: "c-" + orphan, Content: "lunch 35"}
			first, err := e.r.Handle(ctx, msg, agent)
			require.NoError(t, err)
			want := e.ledgerRows(t)
			if orphan == schema.StoredProcessing {
				// The side effect never committed: no ledger row, the call
				// left processing with its lease given up.
				_, err = db.ExecContext(ctx, e.d.Rebind("DELETE FROM ledger_entry WHERE request_id = ?"), first.RequestID)
				require.NoError(t, err)
				_, err = db.ExecContext(ctx, e.d.Rebind("UPDATE "+schema.ToolExecutionTable+" SET "+schema.ColStatus+" = ?, "+
					schema.ColResult+" = NULL, "+schema.ColToken+" = NULL, "+schema.ColHolder+" = NULL, "+schema.ColExpiresAt+
					" = NULL WHERE "+schema.ColRequestID+" = ?"), schema.StoredProcessing, first.RequestID)
				require.NoError(t, err)
			}
			// The lost tail: the request row alone is gone.
			_, err = db.ExecContext(ctx, e.d.Rebind("DELETE FROM "+schema.RequestTable+" WHERE "+schema.ColID+" = ?"), first.RequestID)
			require.NoError(t, err)

			again, err := e.r.Handle(ctx, msg, agent)
			require.NoError(t, err, "the orphaned call is adopted, not a *toolexec.KeyTakenError")
			assert.Equal(t, "written", again.Reply)
			assert.NotEqual(t, first.RequestID, again.RequestID)
			assert.Equal(t, want, e.ledgerRows(t), "%s orphan: one ledger row for the message", orphan)
			count := func(requestID string) (n int) {
				require.NoError(t, db.GetContext(ctx, &n, e.d.Rebind("SELECT COUNT(*) FROM "+schema.ToolExecutionTable+
					" WHERE "+schema.ColRequestID+" = ?"), requestID))
				return n
			}
			assert.Equal(t, 1, count(again.RequestID), "the call now belongs to the new request")
			assert.Equal(t, 0, count(first.RequestID))
		}
	})
}

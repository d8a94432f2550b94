package toolexec_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// claimed inserts a tool execution held by holder, as Store.Execute's claim
// does before running the side effect.
func (e *env) claimed(t *testing.T, sessionKey, requestID, holder, args string) toolexec.Grant {
	t.Helper()
	_, hash, err := toolexec.CanonicalArguments([]byte(args))
	require.NoError(t, err)
	g, err := e.store.Lease().Create(bg(t), e.db, uuid.NewString(), holder, time.Minute, lease.CreateOptions{
		State: schema.StoredProcessing, Set: []lease.Assignment{
			lease.Set(schema.ColSessionKey, sessionKey), lease.Set(schema.ColRequestID, requestID),
			lease.Set(schema.ColToolName, "create_transaction"), lease.Set(schema.ColArgumentsHash, hash),
			lease.Set(schema.ColIdempotencyKey, toolexec.IdempotencyKey(requestID, "create_transaction", hash, 0)),
		}})
	require.NoError(t, err)
	return g
}

// TestReleaseForRequest frees the leases of one request's running tool
// executions, and nothing else: not its finished ones, not another
// request's, not a row of the same request id under another session.
func TestReleaseForRequest(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", time.Minute)
		a := e.claimed(t, "s1", f.requestID, f.holder, `{"a":1}`)
		b := e.claimed(t, "s1", f.requestID, f.holder, `{"a":2}`)
		done := e.claimed(t, "s1", f.requestID, f.holder, `{"a":3}`)
		_, err := e.store.Lease().Transition(ctx, db, done, lease.ChangeOptions{
			From: []string{schema.StoredProcessing}, To: schema.StoredSucceeded, Set: []lease.Assignment{lease.Set(schema.ColResult, `{}`)},
		})
		require.NoError(t, err)
		otherRequest := e.claimed(t, "s1", uuid.NewString(), "other", `{"a":1}`)
		otherSession := e.claimed(t, "s2", f.requestID, "other", `{"a":4}`)

		tx, err := db.BeginTxx(ctx, nil)
		require.NoError(t, err)
		n, err := e.store.ReleaseForRequest(ctx, tx, "s1", f.requestID)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		assert.Equal(t, int64(2), n)

		for _, g := range []toolexec.Grant{a, b} {
			row := e.toolRow(t, g.Key)
			assert.False(t, row.Held)
			assert.Empty(t, row.Holder)
			assert.Equal(t, schema.StoredProcessing, row.State, "still to be run")
			assert.Equal(t, g.Generation, row.Generation)
			_, err := e.store.Lease().Transition(ctx, db, g, lease.ChangeOptions{From: []string{schema.StoredProcessing}, To: schema.StoredSucceeded})
			assert.ErrorIs(t, err, lease.ErrLost, "the old holder marks nothing")
		}
		assert.Equal(t, schema.StoredSucceeded, e.toolRow(t, done.Key).State)
		for _, g := range []toolexec.Grant{otherRequest, otherSession} {
			row := e.toolRow(t, g.Key)
			assert.True(t, row.Held)
			assert.Equal(t, "other", row.Holder)
		}

		// The new owner claims the call at once, under a new generation.
		ng, err := e.store.Lease().AcquireWith(ctx, db, a.Key, "new-owner", time.Minute, lease.AcquireOptions{InStates: []string{schema.StoredProcessing}})
		require.NoError(t, err)
		assert.Greater(t, ng.Generation, a.Generation)

		// Nothing left to free.
		n, err = e.store.ReleaseForRequest(ctx, db, "s1", uuid.NewString())
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}

func TestReleaseForRequestBadInputSendsNoSQL(t *testing.T) {
	s, err := toolexec.New(toolexec.Config{Dialect: lease.SQLite})
	require.NoError(t, err)
	var c countdb.Counter
	db := c.Wrap(testdb.Open(t, lease.SQLite))
	var nilTx *sqlx.Tx
	for name, tc := range map[string]struct {
		db             lease.DB
		session, reqID string
	}{
		"nil db":           {nil, "s", "r"},
		"typed nil db":     {nilTx, "s", "r"},
		"no session":       {db, "", "r"},
		"long session":     {db, strings.Repeat("s", schema.MaxSessionKeyLen+1), "r"},
		"bad utf8 session": {db, "\xff", "r"},
		"no request":       {db, "s", ""},
		"long request":     {db, "s", strings.Repeat("r", 37)},
	} {
		_, err := s.ReleaseForRequest(bg(t), tc.db, tc.session, tc.reqID)
		var ve *engine.ValidationError
		assert.ErrorAs(t, err, &ve, name)
		assert.ErrorIs(t, err, lease.ErrInvalid, name)
	}
	assert.Zero(t, c.Count())
}

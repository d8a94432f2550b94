package toolexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

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

// keyCall is a call identified as request.Run.CallTool identifies it.
type keyCall struct {
	session, client, tool, args string
}

// actUnder makes c, as an external call, in a new flow (a new request row
// and id) through store, and returns the effect key it acted under. The
// flow gives its session back after.
func (e *env) actUnder(t *testing.T, store *toolexec.Store, c keyCall) (string, error) {
	t.Helper()
	ctx := bg(t)
	f := e.newFlow(t, c.session, ttl)
	defer func() { require.NoError(t, e.sessions.Release(ctx, e.db, f.sess)) }()
	call := toolexec.Call{SessionKey: c.session, RequestID: f.requestID, ClientRequestID: c.client, Tool: c.tool, Arguments: json.RawMessage(c.args)}
	var key string
	res, err := store.ExecuteExternal(ctx, e.db, call, e.opts(f, ttl), toolexec.ExternalOptions{},
		func(ctx context.Context, x toolexec.External) (json.RawMessage, error) {
			key = x.EffectKey
			return json.RawMessage(`{}`), nil
		})
	if err != nil {
		return "", err
	}
	require.Equal(t, key, res.ExecutionID, "the effect key is the execution id")
	return key, nil
}

func (e *env) loseEveryCall(t *testing.T) {
	t.Helper()
	_, err := e.db.ExecContext(bg(t), "DELETE FROM "+schema.ToolExecutionTable)
	require.NoError(t, err)
}

// TestEffectKeyDerivedFromTheClientRequestID: with a client request id,
// the execution id (the effect key) is the same for the same call made
// again after its row was lost — under another request id, by another
// Store — and differs when the session, the client request id, the tool
// or the canonical arguments differ.
func TestEffectKeyDerivedFromTheClientRequestID(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		base := keyCall{session: "s1", client: "c-1", tool: "pay", args: `{"a":35,"to":"ann"}`}
		first, err := e.actUnder(t, e.store, base)
		require.NoError(t, err)
		u, err := uuid.Parse(first)
		require.NoError(t, err)
		assert.Equal(t, uuid.Version(5), u.Version(), "a name-based UUID")
		assert.Len(t, first, 36, "fits the id column")
		// Pinned (Python's uuid.uuid5 gives the same): a change of the
		// derivation would give a call in flight across an upgrade a new
		// key.
		assert.Equal(t, "57fdf485-60b5-5faa-9588-dce45ef0df36", first)

		e.loseEveryCall(t)
		other, err := toolexec.New(toolexec.Config{Dialect: e.d})
		require.NoError(t, err)
		again, err := e.actUnder(t, other, base)
		require.NoError(t, err)
		assert.Equal(t, first, again, "another Store, another request id: the same key")

		e.loseEveryCall(t)
		same := base
		same.args = `{"to":"ann","a":3.5e1}`
		canon, err := e.actUnder(t, e.store, same)
		require.NoError(t, err)
		assert.Equal(t, first, canon, "the same canonical arguments: the same key")

		seen := map[string]string{first: "base"}
		for name, c := range map[string]keyCall{
			"session":           {session: "s2", client: base.client, tool: base.tool, args: base.args},
			"client request id": {session: base.session, client: "c-2", tool: base.tool, args: base.args},
			"tool":              {session: base.session, client: base.client, tool: "refund", args: base.args},
			"arguments":         {session: base.session, client: base.client, tool: base.tool, args: `{"a":36,"to":"ann"}`},
			// The fields are separated: moving a byte from one to the
			// next is another call.
			"boundary": {session: "s1c", client: "-1", tool: base.tool, args: base.args},
		} {
			key, err := e.actUnder(t, e.store, c)
			require.NoError(t, err, name)
			if prev, dup := seen[key]; dup {
				t.Fatalf("%s gives the key of %s: %s", name, prev, key)
			}
			seen[key] = name
		}
	})
}

// TestEffectKeyRandomWithoutAClientRequestID: a direct caller that sets no
// client request id gets a random id, which a lost row does not survive.
func TestEffectKeyRandomWithoutAClientRequestID(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		c := keyCall{session: "s1", tool: "pay", args: `{"a":35}`}
		first, err := e.actUnder(t, e.store, c)
		require.NoError(t, err)
		u, err := uuid.Parse(first)
		require.NoError(t, err)
		assert.Equal(t, uuid.Version(4), u.Version())
		e.loseEveryCall(t)
		again, err := e.actUnder(t, e.store, c)
		require.NoError(t, err)
		assert.NotEqual(t, first, again)
	})
}

// TestEffectKeyTakenByAnotherRequest: a call whose derived id is the id
// of a call of another request that still exists (here a request row
// written under another client request id, which only a hand can do) gets
// *KeyTakenError, which also matches lease.ErrExists: nothing is written
// and nothing acts. (A call of a request that no longer exists is
// adopted: TestEffectKeyOfALostRequestAdopted.)
func TestEffectKeyTakenByAnotherRequest(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		c := keyCall{session: "s1", client: "c-1", tool: "pay", args: `{"a":35}`}
		first, err := e.actUnder(t, e.store, c)
		require.NoError(t, err)
		before := e.toolRow(t, first)

		f := e.newFlow(t, c.session, ttl)
		call := toolexec.Call{SessionKey: c.session, RequestID: f.requestID, ClientRequestID: c.client, Tool: c.tool, Arguments: json.RawMessage(c.args)}
		acted := false
		_, err = e.store.ExecuteExternal(ctx, db, call, e.opts(f, ttl), toolexec.ExternalOptions{Repeat: true},
			func(ctx context.Context, x toolexec.External) (json.RawMessage, error) {
				acted = true
				return nil, nil
			})
		var kt *toolexec.KeyTakenError
		require.ErrorAs(t, err, &kt)
		assert.ErrorAs(t, err, new(*toolexec.KeyTakenError))
		assert.ErrorIs(t, err, lease.ErrExists)
		assert.Equal(t, first, kt.EffectKey)
		assert.NotEqual(t, f.requestID, kt.RequestID)
		assert.Equal(t, "pay", kt.Tool)
		assert.Contains(t, err.Error(), first)
		assert.False(t, acted)
		assert.Equal(t, 1, e.count(t, schema.ToolExecutionTable), "nothing written")
		assert.Equal(t, before, e.toolRow(t, first), "the other request's call untouched")

		// The same in the database: Execute refuses it alike.
		_, err = e.store.Execute(ctx, db, call, e.opts(f, ttl), e.ledger)
		assert.ErrorAs(t, err, new(*toolexec.KeyTakenError))
		assert.Equal(t, 0, e.ledgerRows(t))
	})
}

// TestEffectKeyOfALostRequestAdopted: a call whose derived id is held by
// a call of a request that no longer exists (a tail an asynchronous
// failover lost, while the run went on against the new primary) is
// adopted by the new request: its row moves to it, keeping its id, and a
// succeeded external effect's result comes back without acting again.
func TestEffectKeyOfALostRequestAdopted(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		c := keyCall{session: "s1", client: "c-1", tool: "pay", args: `{"a":35}`}
		first, err := e.actUnder(t, e.store, c)
		require.NoError(t, err)
		var owner string
		require.NoError(t, db.GetContext(ctx, &owner, db.Rebind("SELECT request_id FROM "+schema.ToolExecutionTable+" WHERE id = ?"), first))
		_, err = db.ExecContext(ctx, db.Rebind("DELETE FROM "+schema.RequestTable+" WHERE id = ?"), owner)
		require.NoError(t, err)

		f := e.newFlow(t, c.session, ttl)
		call := toolexec.Call{SessionKey: c.session, RequestID: f.requestID, ClientRequestID: c.client, Tool: c.tool, Arguments: json.RawMessage(c.args)}
		acted := false
		res, err := e.store.ExecuteExternal(ctx, db, call, e.opts(f, ttl), toolexec.ExternalOptions{},
			func(ctx context.Context, x toolexec.External) (json.RawMessage, error) {
				acted = true
				return nil, nil
			})
		require.NoError(t, err)
		assert.True(t, res.Reused, "the stored result of the effect that happened")
		assert.Equal(t, first, res.ExecutionID, "the same call, under the same effect key")
		assert.False(t, acted)
		require.NoError(t, db.GetContext(ctx, &owner, db.Rebind("SELECT request_id FROM "+schema.ToolExecutionTable+" WHERE id = ?"), first))
		assert.Equal(t, f.requestID, owner, "the call belongs to the new request now")
		assert.Equal(t, 1, e.count(t, schema.ToolExecutionTable))
	})
}

// TestEffectKeySameCallTwiceInOneRequest: the same call made twice by one
// request with the same occurrence (a retry, a resumed run) is one call:
// the second returns the first's result, as without a client request id
// (the unique key on request, tool, arguments and occurrence decides, and
// the derived id names the same row). Another occurrence is another call
// (TestOccurrencesAreEffectsOfTheirOwn).
func TestEffectKeySameCallTwiceInOneRequest(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)
		call := f.pay(`{"a":35}`)
		call.ClientRequestID = "c-1"
		acts := 0
		fn := func(ctx context.Context, x toolexec.External) (json.RawMessage, error) {
			acts++
			return json.RawMessage(`{"paid":true}`), nil
		}
		first, err := e.store.ExecuteExternal(ctx, db, call, e.opts(f, ttl), toolexec.ExternalOptions{}, fn)
		require.NoError(t, err)
		second, err := e.store.ExecuteExternal(ctx, db, call, e.opts(f, ttl), toolexec.ExternalOptions{}, fn)
		require.NoError(t, err)
		assert.True(t, second.Reused)
		assert.Equal(t, first.ExecutionID, second.ExecutionID)
		assert.Equal(t, 1, acts)
	})
}

// TestClientRequestIDChecked: a client request id that no request can
// have is refused before any SQL.
func TestClientRequestIDChecked(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		f := e.newFlow(t, "s1", ttl)
		for _, bad := range []string{"c ", "a\x00b", "\xff", strings.Repeat("c", schema.MaxClientRequestIDLen+1)} {
			call := f.call(`{"a":1}`)
			call.ClientRequestID = bad
			_, err := e.store.Execute(bg(t), db, call, e.opts(f, ttl), e.ledger)
			var ve *engine.ValidationError
			require.True(t, errors.As(err, &ve), "%q: %v", bad, err)
			assert.Equal(t, "client request id", ve.Field)
		}
		assert.Equal(t, 0, e.count(t, schema.ToolExecutionTable))
	})
}

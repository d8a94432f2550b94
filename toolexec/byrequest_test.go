package toolexec_test

import (
	"encoding/json"
	"strconv"
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

// finish moves a held tool execution to state to, with result res (none
// when empty), giving its lease back.
func (e *env) finish(t *testing.T, g toolexec.Grant, to, res string) {
	t.Helper()
	o := lease.ChangeOptions{From: []string{schema.StoredProcessing}, To: to}
	if res != "" {
		o.Set = []lease.Assignment{lease.Set(schema.ColResult, res)}
	}
	_, err := e.store.Lease().Transition(bg(t), e.db, g, o)
	require.NoError(t, err)
}

// TestSucceeded reads a request's successful tool executions and nothing
// else: not its running, failed or started ones, not another request's,
// not a row of the same request id under another session.
func TestSucceeded(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", time.Minute)
		withResult := e.claimed(t, "s1", f.requestID, f.holder, `{"a":1}`)
		e.finish(t, withResult, schema.StoredSucceeded, `{"id":7}`)
		noResult := e.claimed(t, "s1", f.requestID, f.holder, `{"a":2}`)
		e.finish(t, noResult, schema.StoredSucceeded, "")
		e.finish(t, e.claimed(t, "s1", f.requestID, f.holder, `{"a":3}`), schema.StoredFailed, "")
		e.finish(t, e.claimed(t, "s1", f.requestID, f.holder, `{"a":4}`), schema.StoredStarted, "")
		e.claimed(t, "s1", f.requestID, f.holder, `{"a":5}`) // running
		e.finish(t, e.claimed(t, "s1", uuid.NewString(), "other", `{"a":1}`), schema.StoredSucceeded, `{}`)
		e.finish(t, e.claimed(t, "s2", f.requestID, "other", `{"a":6}`), schema.StoredSucceeded, `{}`)

		got, err := e.store.Succeeded(ctx, db, "s1", f.requestID)
		require.NoError(t, err)
		_, hash1, err := toolexec.CanonicalArguments([]byte(`{"a":1}`))
		require.NoError(t, err)
		_, hash2, err := toolexec.CanonicalArguments([]byte(`{"a":2}`))
		require.NoError(t, err)
		assert.ElementsMatch(t, []toolexec.Record{
			{ExecutionID: withResult.Key, Tool: "create_transaction", ArgumentsHash: hash1, Result: json.RawMessage(`{"id":7}`)},
			{ExecutionID: noResult.Key, Tool: "create_transaction", ArgumentsHash: hash2},
		}, got)

		got, err = e.store.Succeeded(ctx, db, "s1", uuid.NewString())
		require.NoError(t, err)
		assert.Nil(t, got, "no success, no records")
	})
}

// TestDeleteExpired deletes the tool executions of expired requests only,
// and of those only the finished ones whose lease is free: an external
// effect left started, and a call whose lease is live, stay; so do the
// calls of a request in the list that is not expired.
func TestDeleteExpired(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		swept := e.newFlow(t, "s1", time.Minute)
		running := e.newFlow(t, "s2", time.Minute)
		done := e.claimed(t, "s1", swept.requestID, swept.holder, `{"a":1}`)
		e.finish(t, done, schema.StoredSucceeded, `{}`)
		failed := e.claimed(t, "s1", swept.requestID, swept.holder, `{"a":2}`)
		e.finish(t, failed, schema.StoredFailed, "")
		started := e.claimed(t, "s1", swept.requestID, swept.holder, `{"a":3}`)
		e.finish(t, started, schema.StoredStarted, "")
		live := e.claimed(t, "s1", swept.requestID, swept.holder, `{"a":4}`)
		other := e.claimed(t, "s2", running.requestID, running.holder, `{"a":1}`)
		e.finish(t, other, schema.StoredSucceeded, `{}`)
		_, err := e.req.Transition(ctx, db, swept.req, lease.ChangeOptions{From: []string{schema.StoredProcessing}, To: schema.StoredExpired})
		require.NoError(t, err)

		tx, err := db.BeginTxx(ctx, nil)
		require.NoError(t, err)
		n, err := e.store.DeleteExpired(ctx, tx, engine.TableOf(e.req), []string{swept.requestID, running.requestID})
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		assert.Equal(t, int64(2), n)
		for _, g := range []toolexec.Grant{done, failed} {
			_, err := e.store.Lease().Inspect(ctx, db, g.Key)
			assert.ErrorIs(t, err, lease.ErrNotFound, "deleted")
		}
		for _, g := range []toolexec.Grant{started, live, other} {
			_, err := e.store.Lease().Inspect(ctx, db, g.Key)
			assert.NoError(t, err, "kept")
		}
	})
}

// TestByRequestBadInputSendsNoSQL: Succeeded and DeleteExpired refuse a
// nil database and text no tool execution can hold (engine.CheckText's
// rule, under toolexec's name) before any SQL, and DeleteExpired of no
// ids sends nothing.
func TestByRequestBadInputSendsNoSQL(t *testing.T) {
	s, err := toolexec.New(toolexec.Config{Dialect: lease.SQLite})
	require.NoError(t, err)
	var c countdb.Counter
	db := c.Wrap(testdb.Open(t, lease.SQLite))
	requests := engine.MustTable(schema.RequestTable, requestColumns)
	refused := func(what string, err error) {
		t.Helper()
		var ve *engine.ValidationError
		if assert.ErrorAs(t, err, &ve, what) {
			assert.Equal(t, "toolexec", ve.Package, what)
		}
	}
	var nilTx *sqlx.Tx
	for _, bad := range []lease.DB{nil, nilTx} {
		_, err := s.Succeeded(bg(t), bad, "s", "r")
		refused("Succeeded, nil db", err)
		_, err = s.DeleteExpired(bg(t), bad, requests, []string{"r"})
		refused("DeleteExpired, nil db", err)
	}
	badText := []string{"", "ends in a space ", "nul\x00", "\xff"}
	for _, key := range append(badText, strings.Repeat("k", schema.MaxSessionKeyLen+1)) {
		_, err := s.Succeeded(bg(t), db, key, "r")
		refused("Succeeded, session key "+strconv.Quote(key), err)
	}
	for _, id := range append(badText, strings.Repeat("r", 37)) {
		_, err := s.Succeeded(bg(t), db, "s", id)
		refused("Succeeded, request id "+strconv.Quote(id), err)
		_, err = s.DeleteExpired(bg(t), db, requests, []string{"r", id})
		refused("DeleteExpired, request id "+strconv.Quote(id), err)
	}
	n, err := s.DeleteExpired(bg(t), db, requests, nil)
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Zero(t, c.Count(), "no statement sent")
}

package toolexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// TestOccurrenceZeroKeepsItsKeys: the first of identical calls (occurrence
// 0) keeps the idempotency key and the execution id that calls had before
// occurrences, so rows written before and effect keys already handed to
// other systems still name the same call; a later occurrence gets keys of
// its own. The values are pinned (Python's uuid.uuid5 gives the same).
func TestOccurrenceZeroKeepsItsKeys(t *testing.T) {
	_, hash, err := toolexec.CanonicalArguments([]byte(`{"to":"ann","a":35}`))
	require.NoError(t, err)
	require.Equal(t, "0562d7222c4b4c5015c2e2bec02c4dd7b306b649e8662c46975ad07d634b49f2", hash)

	assert.Equal(t, "r-1:pay:"+hash, toolexec.IdempotencyKey("r-1", "pay", hash, 0), "the key calls always had")
	assert.Equal(t, "r-1:pay:"+hash+":1", toolexec.IdempotencyKey("r-1", "pay", hash, 1))
	assert.Equal(t, "r-1:pay:"+hash+":12", toolexec.IdempotencyKey("r-1", "pay", hash, 12))

	// uuid5(653b54d5-…, "s1\0c-1\0pay\0" + hash): the id pinned by
	// TestEffectKeyDerivedFromTheClientRequestID before occurrences.
	assert.Equal(t, "57fdf485-60b5-5faa-9588-dce45ef0df36", toolexec.ExecutionID("s1", "c-1", "pay", hash, 0))
	// uuid5(653b54d5-…, "s1\0c-1\0pay\0" + hash + "\0" + "1"), and "12".
	assert.Equal(t, "8b7f2272-dfbb-5026-ba56-325f7f0a91d8", toolexec.ExecutionID("s1", "c-1", "pay", hash, 1))
	assert.Equal(t, "642b0c89-a826-5410-b362-51745bec8a19", toolexec.ExecutionID("s1", "c-1", "pay", hash, 12))
}

// TestOccurrencesAreEffectsOfTheirOwn: two identical calls of one request
// with occurrences 0 and 1 are two effects, each its own row, idempotency
// key and id; each made again finds its own row's result. Succeeded
// reports the occurrences.
func TestOccurrencesAreEffectsOfTheirOwn(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)
		call := func(occurrence int) toolexec.Call {
			c := f.call(`{"a":5}`)
			c.ClientRequestID = "c-1"
			c.Occurrence = occurrence
			return c
		}
		first, err := e.store.Execute(ctx, db, call(0), e.opts(f, ttl), e.ledger)
		require.NoError(t, err)
		second, err := e.store.Execute(ctx, db, call(1), e.opts(f, ttl), e.ledger)
		require.NoError(t, err)
		assert.False(t, second.Reused, "occurrence 1 is not occurrence 0 again")
		assert.NotEqual(t, first.ExecutionID, second.ExecutionID)
		assert.Equal(t, 2, e.ledgerRows(t), "two effects")

		_, hash, err := toolexec.CanonicalArguments([]byte(`{"a":5}`))
		require.NoError(t, err)
		for n, res := range []toolexec.Result{first, second} {
			assert.Equal(t, toolexec.ExecutionID("s1", "c-1", "create_transaction", hash, n), res.ExecutionID)
			var occurrence int
			var idem string
			require.NoError(t, db.QueryRowContext(ctx, e.d.Rebind("SELECT "+schema.ColOccurrence+", "+schema.ColIdempotencyKey+
				" FROM "+schema.ToolExecutionTable+" WHERE "+schema.ColID+" = ?"), res.ExecutionID).Scan(&occurrence, &idem))
			assert.Equal(t, n, occurrence)
			assert.Equal(t, toolexec.IdempotencyKey(f.requestID, "create_transaction", hash, n), idem)
		}

		for n, want := range []toolexec.Result{first, second} {
			again, err := e.store.Execute(ctx, db, call(n), e.opts(f, ttl), e.ledger)
			require.NoError(t, err)
			assert.True(t, again.Reused, "occurrence %d made again", n)
			assert.Equal(t, want.ExecutionID, again.ExecutionID)
		}
		assert.Equal(t, int64(2), e.calls.Load())
		assert.Equal(t, 2, e.ledgerRows(t))

		recs, err := e.store.Succeeded(ctx, db, "s1", f.requestID)
		require.NoError(t, err)
		require.Len(t, recs, 2)
		got := map[int]string{recs[0].Occurrence: recs[0].ExecutionID, recs[1].Occurrence: recs[1].ExecutionID}
		assert.Equal(t, map[int]string{0: first.ExecutionID, 1: second.ExecutionID}, got)
	})
}

// TestOccurrenceOfAnExternalCall: an external effect's key is its
// occurrence's id, and a later occurrence acts under a key of its own.
func TestOccurrenceOfAnExternalCall(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)
		var keys []string
		fn := func(ctx context.Context, x toolexec.External) (json.RawMessage, error) {
			keys = append(keys, x.EffectKey)
			return json.RawMessage(`{"paid":true}`), nil
		}
		_, hash, err := toolexec.CanonicalArguments([]byte(`{"a":35}`))
		require.NoError(t, err)
		for _, n := range []int{0, 1, 0, 1} {
			c := f.pay(`{"a":35}`)
			c.ClientRequestID = "c-1"
			c.Occurrence = n
			res, err := e.store.ExecuteExternal(ctx, db, c, e.opts(f, ttl), toolexec.ExternalOptions{}, fn)
			require.NoError(t, err)
			assert.Equal(t, toolexec.ExecutionID("s1", "c-1", "pay", hash, n), res.ExecutionID)
		}
		require.Len(t, keys, 2, "one act per occurrence")
		assert.Equal(t, toolexec.ExecutionID("s1", "c-1", "pay", hash, 0), keys[0])
		assert.Equal(t, toolexec.ExecutionID("s1", "c-1", "pay", hash, 1), keys[1])
	})
}

// TestOccurrenceChecked: an occurrence that the column cannot hold is
// refused before any SQL.
func TestOccurrenceChecked(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		f := e.newFlow(t, "s1", ttl)
		above := math.MaxInt32
		above++ // wraps to a negative on 32-bit platforms: refused too
		for _, bad := range []int{-1, above} {
			call := f.call(`{"a":1}`)
			call.Occurrence = bad
			_, err := e.store.Execute(bg(t), db, call, e.opts(f, ttl), e.ledger)
			var ve *engine.ValidationError
			require.True(t, errors.As(err, &ve), "%d: %v", bad, err)
			assert.Equal(t, "occurrence", ve.Field)
		}
		assert.Equal(t, 0, e.count(t, schema.ToolExecutionTable))
		assert.Equal(t, int64(0), e.calls.Load())
	})
}

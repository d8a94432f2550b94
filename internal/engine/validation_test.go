package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// SessionID is a named string key type, as callers declare them.
type SessionID string

// String gives the type a String method that prints something else, so a
// check that goes through fmt would see the wrong text.
func (s SessionID) String() string { return "session" }

// TestNamedStringKeyValidated: a key of a named string type is checked like
// a plain string — too long, not UTF-8, a NUL byte, a trailing space — and
// rejected before any statement, on every dialect. So is a holder with a
// NUL byte.
func TestNamedStringKeyValidated(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		d, err := engine.DetectDialect(db)
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, conformance.ItemDDL[d])
		require.NoError(t, err)
		l, err := engine.New[SessionID](d, engine.MustTable(conformance.ItemTable, conformance.ItemColumns), engine.Options{})
		require.NoError(t, err)
		require.NoError(t, l.Ensure(ctx, db, "ok", engine.CreateOptions{}))
		g, err := l.Acquire(ctx, db, "ok", "alice", 30*time.Second)
		require.NoError(t, err)

		var c countdb.Counter
		cdb := c.Wrap(db)
		bad := map[string]SessionID{
			"192 bytes":      SessionID(strings.Repeat("k", engine.MaxKeyLen+1)),
			"1 MiB":          SessionID(strings.Repeat("k", 1<<20)),
			"not UTF-8":      "k\xff",
			"NUL byte":       "k\x00k",
			"trailing space": "ok ",
		}
		for name, key := range bad {
			calls := map[string]func() error{
				"acquire": func() error { _, err := l.Acquire(ctx, cdb, key, "alice", time.Second); return err },
				"create": func() error {
					_, err := l.Create(ctx, cdb, key, "alice", time.Second, engine.CreateOptions{})
					return err
				},
				"ensure":  func() error { return l.Ensure(ctx, cdb, key, engine.CreateOptions{}) },
				"inspect": func() error { _, err := l.Inspect(ctx, cdb, key); return err },
				"renew": func() error {
					bg := g
					bg.Key = key
					_, err := l.Renew(ctx, cdb, bg, time.Second)
					return err
				},
			}
			for op, call := range calls {
				err := call()
				var ve *engine.ValidationError
				require.ErrorAs(t, err, &ve, "%s key, %s", name, op)
				assert.Equal(t, "key", ve.Field, "%s key, %s", name, op)
				assert.ErrorIs(t, err, engine.ErrInvalid)
			}
		}
		for name, holder := range map[string]string{"NUL byte": "al\x00ice", "trailing space": "alice "} {
			_, err := l.Acquire(ctx, cdb, "ok", holder, time.Second)
			var ve *engine.ValidationError
			require.ErrorAs(t, err, &ve, "%s holder", name)
			assert.Equal(t, "holder", ve.Field)
		}
		assert.Zero(t, c.Count(), "no statement was sent")
		st, err := l.Inspect(ctx, db, "ok")
		require.NoError(t, err)
		assert.Equal(t, "alice", st.Holder)
	})
}

// TestCheckText: the one rule for keys, holders and other text in unique
// keys, with errors that never quote the input.
func TestCheckText(t *testing.T) {
	for _, ok := range []string{"a", "a b", " a", "a\tb", "é", strings.Repeat("x", 10)} {
		assert.NoError(t, engine.CheckText("id", ok, 10), "%q", ok)
	}
	for s, reason := range map[string]string{
		"":                      "empty",
		strings.Repeat("x", 11): "longer than 10 bytes",
		"a\xffb":                "not UTF-8",
		"a\x00b":                "contains a NUL byte",
		"abc ":                  "ends with a space",
		"secret  ":              "ends with a space",
		strings.Repeat("é", 6):  "longer than 10 bytes",
	} {
		err := engine.CheckText("client request id", s, 10)
		var ve *engine.ValidationError
		require.ErrorAs(t, err, &ve, "%q", s)
		assert.Equal(t, "client request id", ve.Field)
		assert.Contains(t, ve.Reason, reason, "%q", s)
		assert.ErrorIs(t, err, engine.ErrInvalid)
		if s != "" {
			assert.NotContains(t, err.Error(), s, "the input is not quoted")
		}
	}
}

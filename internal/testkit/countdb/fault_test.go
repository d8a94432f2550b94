package countdb

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errDropped = errors.New("connection dropped after the statement ran")

// TestFailAfter: a statement or commit picked by FailAfter takes effect,
// and the caller gets the error instead of the result, on a pool (prepared
// or not) and in a transaction.
func TestFailAfter(t *testing.T) {
	targets := []struct {
		name string
		open func(t *testing.T) *target
	}{
		{"sqlite", sqliteTarget},
		{"mysql/interpolateParams", func(t *testing.T) *target { return mysqlTarget(t, true) }},
		{"mysql/prepare", func(t *testing.T) *target { return mysqlTarget(t, false) }},
		{"postgres", postgresTarget},
	}
	for _, tt := range targets {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tg := tt.open(t)
			var c Counter
			db, err := OpenDB(tg.driver, tg.dsn, &c)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			q := func(s string) string { return tg.rebind(strings.ReplaceAll(s, "{t}", tg.table)) }
			count := func(k string) int {
				var n int
				require.NoError(t, db.QueryRowContext(ctx, q("SELECT COUNT(*) FROM {t} WHERE k = ?"), k).Scan(&n))
				return n
			}
			failing := func(prefix string) func(string) error {
				return func(s string) error {
					if strings.HasPrefix(s, prefix) {
						return errDropped
					}
					return nil
				}
			}

			// An autocommit statement, sent as text.
			c.FailAfter(failing("INSERT"))
			_, err = db.ExecContext(ctx, q("INSERT INTO {t} (k, v) VALUES (?, ?)"), "a", 1)
			require.ErrorIs(t, err, errDropped)
			c.FailAfter(nil)
			assert.Equal(t, 1, count("a"), "the insert took effect")

			// A prepared statement.
			st, err := db.PrepareContext(ctx, q("INSERT INTO {t} (k, v) VALUES (?, ?)"))
			require.NoError(t, err)
			defer st.Close()
			c.FailAfter(failing("INSERT"))
			_, err = st.ExecContext(ctx, "b", 1)
			require.ErrorIs(t, err, errDropped)
			c.FailAfter(nil)
			assert.Equal(t, 1, count("b"))

			// A query: its rows are read before the error is returned.
			c.FailAfter(failing("SELECT"))
			var v int
			err = db.QueryRowContext(ctx, q("SELECT v FROM {t} WHERE k = ?"), "a").Scan(&v)
			require.ErrorIs(t, err, errDropped)
			c.FailAfter(nil)

			// A commit.
			c.FailAfter(failing(Commit))
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(ctx, q("INSERT INTO {t} (k, v) VALUES (?, ?)"), "c", 1)
			require.NoError(t, err)
			require.ErrorIs(t, tx.Commit(), errDropped)
			c.FailAfter(nil)
			assert.Equal(t, 1, count("c"), "the transaction committed")

			// A statement in a transaction that then rolls back: nothing stays.
			c.FailAfter(failing("INSERT"))
			tx, err = db.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(ctx, q("INSERT INTO {t} (k, v) VALUES (?, ?)"), "d", 1)
			require.ErrorIs(t, err, errDropped)
			require.NoError(t, tx.Rollback())
			c.FailAfter(nil)
			assert.Equal(t, 0, count("d"))

			// The pool is still usable.
			var n int
			require.NoError(t, db.QueryRowContext(ctx, q("SELECT COUNT(*) FROM {t}")).Scan(&n))
			assert.Equal(t, 3, n)
		})
	}
}

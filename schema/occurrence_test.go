package schema

import (
	"context"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
)

// insertRepeat inserts the call of the seeded tool execution of (an id
// of seedRows or insertTool) again under its own id and idempotency key:
// the same request, tool and arguments, as the given occurrence (< 0: the
// column left out, for the tables of migration 5).
func insertRepeat(ctx context.Context, db *sqlx.DB, of, id string, occurrence int) error {
	cols, args := "id, session_key, request_id, tool_name, arguments_hash, idempotency_key, status",
		[]any{id, "s-" + of, "r-" + of, "tool", hashA, "k-" + id, StoredSucceeded}
	if occurrence >= 0 {
		cols += ", " + ColOccurrence
		args = append(args, occurrence)
	}
	_, err := db.ExecContext(ctx, db.Rebind("INSERT INTO "+ToolExecutionTable+" ("+cols+
		") VALUES (?"+strings.Repeat(", ?", len(args)-1)+")"), args...)
	return err
}

// largeMetadata is a request's metadata larger than a MySQL TEXT (64 KB):
// the column holds large text on every server.
var largeMetadata = `{"user":"u-1","notes":"` + strings.Repeat("é", 40_000) + `"}`

// requireMigration6Columns checks the columns of migration 6 on db: the
// rows of earlier versions are occurrence 0, the agent and metadata of a
// request are written and read back, and the call's unique key has room
// for one row per occurrence of an identical call. It writes rows.
func requireMigration6Columns(t *testing.T, db *sqlx.DB) {
	t.Helper()
	ctx := t.Context()
	assert.Equal(t, []string{"0"}, queryRows(t, db, "SELECT DISTINCT "+ColOccurrence+" FROM "+ToolExecutionTable),
		"rows of earlier versions are occurrence 0")
	agent := strings.Repeat("a", MaxAgentNameLen)
	_, err := db.ExecContext(ctx, db.Rebind("UPDATE "+RequestTable+" SET "+ColAgent+" = ?, "+ColMetadata+" = ? WHERE id = ?"),
		agent, largeMetadata, "seed-0")
	require.NoError(t, err)
	assert.Equal(t, []string{agent + " | " + largeMetadata},
		queryRows(t, db, "SELECT "+ColAgent+", "+ColMetadata+" FROM "+RequestTable+" WHERE id = ?", "seed-0"))
	assert.Equal(t, []string{"<null> | <null>"},
		queryRows(t, db, "SELECT "+ColAgent+", "+ColMetadata+" FROM "+RequestTable+" WHERE id = ?", "seed-1"),
		"NULL by default")

	require.NoError(t, insertRepeat(ctx, db, "seed-0", "seed-0-again", 1), "the second identical call")
	require.Error(t, insertRepeat(ctx, db, "seed-0", "seed-0-same", 1), "one row per occurrence of a call")
	require.Error(t, insertRepeat(ctx, db, "seed-0", "seed-0-first", 0), "one row per occurrence of a call")
}

// testMigration6DownUp runs migration 6 down and up again with tool on
// db, at migration 6 with the rows of seedRows: down gives back the schema
// of migration 5 and deletes the rows of repeated calls (occurrence > 0),
// keeping the others; up gives back the schema of migration 6 with the
// rows at occurrence 0. Up on tables that have it already runs again
// harmlessly on PostgreSQL and elsewhere refuses loudly, changing nothing.
// It leaves db at migration 6 with the rows of seedRows.
func testMigration6DownUp(t *testing.T, db *sqlx.DB, d lease.Dialect, tool string) {
	t.Helper()
	ctx := t.Context()
	v5 := freshDump(t, d, func(db *sqlx.DB) { migrateUp(t, db, d, tool, 5) })
	v6 := freshDump(t, d, func(db *sqlx.DB) { migrateUp(t, db, d, tool, 6) })
	require.NotEqual(t, v5, v6, "migrations 1-5 must differ from 1-6")

	seeded := tableRows(t, db)
	requireMigration6Columns(t, db)
	require.NoError(t, insertRepeat(ctx, db, "seed-1", "seed-1-again", 2), "occurrences need not be dense")
	require.Len(t, tableRows(t, db), len(seeded)+2)

	require.NoError(t, runMigration(t, db, d, tool, 6, false), "%s down 6", tool)
	requireSameSchema(t, tool+" migrations 1-5", v5, tool+" 1-6, then 6 down", dumpSchema(t, db, d))
	require.Equal(t, seeded, tableRows(t, db), "%s down 6 must delete the repeated calls and keep the other rows", tool)
	require.Error(t, insertRepeat(ctx, db, "seed-0", "seed-0-again", -1), "the key of migration 5: one row per call")

	require.NoError(t, runMigration(t, db, d, tool, 6, true), "%s up 6 after down", tool)
	requireSameSchema(t, tool+" migrations 1-6", v6, tool+" 6 down, then up", dumpSchema(t, db, d))
	require.Equal(t, seeded, tableRows(t, db), "%s up 6 changed the rows", tool)
	requireMigration6Columns(t, db)
	rows := tableRows(t, db)

	err := runMigration(t, db, d, tool, 6, true)
	if d == lease.Postgres {
		require.NoError(t, err, "%s up 6 a second time", tool)
	} else {
		require.Error(t, err, "%s up 6 a second time must refuse", tool)
		assert.Contains(t, strings.ToLower(err.Error()), "duplicate column")
	}
	requireSameSchema(t, tool+" migrations 1-6", v6, tool+" up 6 twice", dumpSchema(t, db, d))
	require.Equal(t, rows, tableRows(t, db), "%s up 6 twice changed the rows", tool)

	_, err = db.ExecContext(ctx, db.Rebind("DELETE FROM "+ToolExecutionTable+" WHERE "+ColOccurrence+" > 0"))
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "UPDATE "+RequestTable+" SET "+ColAgent+" = NULL, "+ColMetadata+" = NULL")
	require.NoError(t, err)
	require.Equal(t, seeded, tableRows(t, db))
}

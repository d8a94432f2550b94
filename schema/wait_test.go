package schema

import (
	"context"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// waitUntilArg is a deadline as the dialect stores it (seedRows writes
// expires_at the same way).
func waitUntilArg(d lease.Dialect) any {
	if d == lease.SQLite {
		return int64(1927602306123456)
	}
	return "2031-02-03 04:05:06.123456"
}

// waitCols reads the columns of migration 7 of every request.
const waitCols = "SELECT id, " + ColWaitName + ", " + ColWaitQuestion + ", " + ColWaitSeq + ", " + ColWaitUntil +
	" FROM " + RequestTable + " ORDER BY id"

// laterCols reads the request columns of migrations 3, 5 and 6, which
// migration 7's rebuild on SQLite copies.
const laterCols = "SELECT id, " + ColContent + ", " + ColQueueSeq + ", " + ColOnBusy + ", " + ColInterruptedBy + ", " +
	ColDeaths + ", " + ColAgent + ", " + ColMetadata + " FROM " + RequestTable + " ORDER BY id"

// setLaterCols gives the seeded request seed-0 values in the columns of
// migrations 3, 5 and 6 (seedRows leaves them NULL or 0), so that a
// rebuild that lost one shows.
func setLaterCols(t *testing.T, db *sqlx.DB) {
	t.Helper()
	_, err := db.ExecContext(t.Context(), db.Rebind("UPDATE "+RequestTable+" SET "+ColContent+" = ?, "+ColQueueSeq+" = ?, "+
		ColOnBusy+" = ?, "+ColInterruptedBy+" = ?, "+ColDeaths+" = ?, "+ColAgent+" = ?, "+ColMetadata+" = ? WHERE id = ?"),
		"lunch 35", int64(4), "queue", "c-9", int64(2), "bookkeeper", largeMetadata, "seed-0")
	require.NoError(t, err)
}

// clearLaterCols sets the columns of setLaterCols back to what seedRows
// left.
func clearLaterCols(t *testing.T, db *sqlx.DB) {
	t.Helper()
	_, err := db.ExecContext(t.Context(), "UPDATE "+RequestTable+" SET "+ColContent+" = NULL, "+ColQueueSeq+" = NULL, "+
		ColOnBusy+" = NULL, "+ColInterruptedBy+" = NULL, "+ColDeaths+" = 0, "+ColAgent+" = NULL, "+ColMetadata+" = NULL")
	require.NoError(t, err)
}

// insertWaiting inserts a request in status 'waiting' with an open
// question in the columns of migration 7.
func insertWaiting(ctx context.Context, db *sqlx.DB, d lease.Dialect, id string) error {
	_, err := db.ExecContext(ctx, db.Rebind("INSERT INTO "+RequestTable+
		" (id, session_key, client_request_id, fingerprint, status, "+ColWaitName+", "+ColWaitQuestion+", "+
		ColWaitSeq+", "+ColWaitUntil+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
		id, "s-"+id, "c-"+id, hashA, StoredWaiting, "approve", `{"amount":35}`, 3, waitUntilArg(d))
	return err
}

// requireMigration7Columns checks the status and columns of migration 7
// on db: a request may be 'waiting' with its question's name (up to 128
// characters, enforced on MySQL and PostgreSQL), JSON larger than a
// MySQL TEXT, step position and deadline, all NULL by default; on SQLite
// the deadline is an integer like the other times. It inserts the
// requests wait-cols and wait-null.
func requireMigration7Columns(t *testing.T, db *sqlx.DB, d lease.Dialect) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, insertWaiting(ctx, db, d, "wait-cols"), "a request may be waiting")
	require.NoError(t, insertRequest(ctx, db, "wait-null", StoredProcessing))
	assert.Equal(t, []string{"<null> | <null> | <null> | <null>"},
		queryRows(t, db, "SELECT "+ColWaitName+", "+ColWaitQuestion+", "+ColWaitSeq+", "+ColWaitUntil+
			" FROM "+RequestTable+" WHERE id = ?", "wait-null"), "NULL by default")

	// The column holds 128 characters; package request lets a name have
	// MaxWaitNameLen (120) bytes, and records the answer's step under
	// "await:" and the name, within the step table's 128.
	name := strings.Repeat("n", 128)
	_, err := db.ExecContext(ctx, db.Rebind("UPDATE "+RequestTable+" SET "+ColWaitName+" = ?, "+ColWaitQuestion+" = ?, "+
		ColWaitSeq+" = ? WHERE id = ?"), name, largeMetadata, 2_000_000_000, "wait-cols")
	require.NoError(t, err)
	assert.Equal(t, []string{name + " | " + largeMetadata + " | 2000000000"},
		queryRows(t, db, "SELECT "+ColWaitName+", "+ColWaitQuestion+", "+ColWaitSeq+" FROM "+RequestTable+" WHERE id = ?", "wait-cols"))
	if d != lease.SQLite {
		_, err = db.ExecContext(ctx, db.Rebind("UPDATE "+RequestTable+" SET "+ColWaitName+" = ? WHERE id = ?"),
			name+"n", "wait-cols")
		require.Error(t, err, "wait_name holds at most 128 characters")
	}
	// The deadline compares as a time (an integer on SQLite).
	assert.Equal(t, []string{"wait-cols"}, queryRows(t, db, "SELECT id FROM "+RequestTable+" WHERE "+ColWaitUntil+" = ?",
		waitUntilArg(d)))
	if d == lease.SQLite {
		_, err = db.ExecContext(ctx, "UPDATE "+RequestTable+" SET "+ColWaitUntil+" = ? WHERE id = ?",
			"2031-02-03 04:05:06", "wait-cols")
		requireCheckViolation(t, err, "rowlease_request_time_ck")
	}
}

// testMigration7DownUp runs migration 7 down and up again with tool on
// db, at migration 7 with the rows of seedRows: down refuses, loudly and
// changing nothing, while a request is 'waiting'; without one it gives
// back the schema of migration 6, up the schema of migration 7, the rows
// and the columns of migrations 3, 5 and 6 surviving both (on SQLite both
// rebuild the table). Up on a table that has it already runs again
// harmlessly on PostgreSQL and elsewhere refuses loudly, changing
// nothing. It leaves db at migration 7 with the rows of seedRows.
func testMigration7DownUp(t *testing.T, db *sqlx.DB, d lease.Dialect, tool string) {
	t.Helper()
	ctx := t.Context()
	v6 := freshDump(t, d, func(db *sqlx.DB) { migrateUp(t, db, d, tool, 6) })
	v7 := freshDump(t, d, func(db *sqlx.DB) { migrateUp(t, db, d, tool, 7) })
	require.NotEqual(t, v6, v7, "migrations 1-6 must differ from 1-7")

	seeded := tableRows(t, db)
	setLaterCols(t, db)
	later := queryRows(t, db, laterCols)

	// A 'waiting' request blocks down 7, loudly, and down changes nothing.
	requireMigration7Columns(t, db, d)
	rows, waits := tableRows(t, db), queryRows(t, db, waitCols)
	err := runMigration(t, db, d, tool, 7, false)
	requireCheckViolation(t, err, requestStatusCheck)
	requireSameSchema(t, tool+" migrations 1-7", v7, tool+" after a refused down 7", dumpSchema(t, db, d))
	require.Equal(t, rows, tableRows(t, db), "%s refused down 7 changed the rows", tool)
	require.Equal(t, waits, queryRows(t, db, waitCols), "%s refused down 7 changed the open questions", tool)
	_, err = db.ExecContext(ctx, "DELETE FROM "+RequestTable+" WHERE id IN ('wait-cols', 'wait-null')")
	require.NoError(t, err)
	require.Equal(t, later, queryRows(t, db, laterCols))

	require.NoError(t, runMigration(t, db, d, tool, 7, false), "%s down 7", tool)
	requireSameSchema(t, tool+" migrations 1-6", v6, tool+" 1-7, then 7 down", dumpSchema(t, db, d))
	require.Equal(t, seeded, tableRows(t, db), "%s down 7 changed the rows", tool)
	require.Equal(t, later, queryRows(t, db, laterCols), "%s down 7 changed the columns of migrations 3 to 6", tool)
	requireCheckViolation(t, insertRequest(ctx, db, "after-down-7", StoredWaiting), requestStatusCheck)

	require.NoError(t, runMigration(t, db, d, tool, 7, true), "%s up 7 after down", tool)
	requireSameSchema(t, tool+" migrations 1-7", v7, tool+" 7 down, then up", dumpSchema(t, db, d))
	require.Equal(t, seeded, tableRows(t, db), "%s up 7 changed the rows", tool)
	require.Equal(t, later, queryRows(t, db, laterCols), "%s up 7 changed the columns of migrations 3 to 6", tool)
	require.NoError(t, insertWaiting(ctx, db, d, "wait-again"))
	rows, waits = tableRows(t, db), queryRows(t, db, waitCols)

	err = runMigration(t, db, d, tool, 7, true)
	if d == lease.Postgres {
		require.NoError(t, err, "%s up 7 a second time", tool)
	} else {
		require.Error(t, err, "%s up 7 a second time must refuse", tool)
		assert.Contains(t, strings.ToLower(err.Error()), "duplicate column")
	}
	requireSameSchema(t, tool+" migrations 1-7", v7, tool+" up 7 twice", dumpSchema(t, db, d))
	require.Equal(t, rows, tableRows(t, db), "%s up 7 twice changed the rows", tool)
	require.Equal(t, waits, queryRows(t, db, waitCols), "%s up 7 twice changed the open questions", tool)

	_, err = db.ExecContext(ctx, "DELETE FROM "+RequestTable+" WHERE id = 'wait-again'")
	require.NoError(t, err)
	clearLaterCols(t, db)
	require.Equal(t, seeded, tableRows(t, db))
}

// TestApplyUpgradesToWaiting: Apply, called by several sessions at once
// on the tables of the Apply of migration 6 with rows in them, lets a
// request wait: the schema of a fresh Apply, the rows and the columns of
// migrations 3 to 6 kept (on SQLite the table is rebuilt), and a trigger
// of the user's on the request table created again on SQLite.
func TestApplyUpgradesToWaiting(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		ctx := t.Context()
		want := freshDump(t, d, applyDDL(t, d))
		db := testdb.Open(t, d)
		applyOf(t, d, 6)(db)
		seedRows(t, db, d)
		setLaterCols(t, db)
		requireCheckViolation(t, insertRequest(ctx, db, "before", StoredWaiting), requestStatusCheck)
		if d == lease.SQLite {
			for _, s := range []string{
				"CREATE TABLE app_request_audit (request_id TEXT NOT NULL, status TEXT NOT NULL)",
				"CREATE TRIGGER app_request_audit AFTER INSERT ON rowlease_request BEGIN INSERT INTO app_request_audit VALUES (NEW.id, NEW.status); END",
			} {
				_, err := db.ExecContext(ctx, s)
				require.NoError(t, err, s)
			}
			want = freshDump(t, d, func(db *sqlx.DB) {
				applyDDL(t, d)(db)
				for _, s := range []string{
					"CREATE TABLE app_request_audit (request_id TEXT NOT NULL, status TEXT NOT NULL)",
					"CREATE TRIGGER app_request_audit AFTER INSERT ON rowlease_request BEGIN INSERT INTO app_request_audit VALUES (NEW.id, NEW.status); END",
				} {
					_, err := db.ExecContext(ctx, s)
					require.NoError(t, err, s)
				}
			})
		}
		rows, later := tableRows(t, db), queryRows(t, db, laterCols)

		const workers = 8
		errs := make(chan error, workers)
		for range workers {
			go func() { errs <- Apply(ctx, db, d) }()
		}
		for range workers {
			require.NoError(t, <-errs, "concurrent Apply on the tables of migration 6")
		}
		requireSameSchema(t, "a fresh Apply", want, "upgraded by Apply", dumpSchema(t, db, d))
		require.Equal(t, rows, tableRows(t, db), "the upgrade changed the rows")
		require.Equal(t, later, queryRows(t, db, laterCols), "the upgrade changed the columns of migrations 3 to 6")

		rec := &recordingDB{db: db}
		require.NoError(t, Apply(ctx, rec, d))
		stmts, err := Statements(d)
		require.NoError(t, err)
		assert.Equal(t, stmts, rec.execs, "Apply on upgraded tables must run the DDL only")
		requireMigration7Columns(t, db, d)
		if d == lease.SQLite {
			assert.Contains(t, queryRows(t, db, "SELECT request_id, status FROM app_request_audit"), "wait-cols | waiting",
				"the trigger on the request table must fire after the rebuild")
		}
	})
}

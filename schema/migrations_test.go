package schema

import (
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// migrationTexts holds the embedded texts of one dialect: the DDL and, per
// version, the golang-migrate up file.
type migrationTexts struct {
	ddl string
	up  map[int]string
}

func readMigrationTexts(t *testing.T, dialect lease.Dialect) migrationTexts {
	t.Helper()
	ddl, err := DDL(dialect)
	require.NoError(t, err)
	mfs, err := Migrations(dialect, "golang-migrate")
	require.NoError(t, err)
	m := migrationTexts{ddl: ddl, up: map[int]string{}}
	for v, names := range migrateFiles {
		b, err := fs.ReadFile(mfs, names[0])
		require.NoError(t, err)
		m.up[v] = string(b)
	}
	return m
}

// TestMigrationsMatchDDL is the drift test. On each real database it sets
// up one database with Apply (the DDL) and others with all the migrations
// (1 to lastMigration) of golang-migrate and of goose, run as those tools run them, and requires
// the same schema: tables, columns with types, nullability and defaults,
// constraints with their definitions, indexes (dumpSchema). Without a
// server it fails (testdb with ROWLEASE_REQUIRE_ALL) or skips that dialect.
// The texts are generated from the golang-migrate files
// (TestGeneratedFilesAreCurrent); this test proves that the DDL the
// generator folds builds what the migrations build.
func TestMigrationsMatchDDL(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		want := freshDump(t, d, applyDDL(t, d))
		for _, tool := range migrationTools {
			got := freshDump(t, d, func(db *sqlx.DB) { migrateUp(t, db, d, tool, lastMigration) })
			requireSameSchema(t, "the DDL (Apply)", want, fmt.Sprintf("%s migrations 1-%d", tool, lastMigration), got)
		}
	})
}

// TestMigrationsDownUp runs migrations 7, 6, 4, 3 and 2 down and up
// again on a database with rows, with each tool (migration 5 has a test of
// its own, TestMigration5DownUp; here the database goes down through it
// from 6 to 4): down gives back the schema of the version before, up the
// schema of the version, and the rows survive both (down 6 deletes the
// rows of repeated calls, which the key before it has no room for). Down
// refuses, and changes nothing, while a row has a status only the newer
// version allows. Migration 2 runs again harmlessly on a database that
// already has it; migrations 3, 4, 6 and 7 do on PostgreSQL, and
// elsewhere refuse loudly, changing nothing (a database that Apply
// upgraded before the user copied the migrations).
func TestMigrationsDownUp(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		ctx := t.Context()
		for _, tool := range migrationTools {
			v1 := freshDump(t, d, func(db *sqlx.DB) { migrateUp(t, db, d, tool, 1) })
			v2 := freshDump(t, d, func(db *sqlx.DB) { migrateUp(t, db, d, tool, 2) })
			v3 := freshDump(t, d, func(db *sqlx.DB) { migrateUp(t, db, d, tool, 3) })
			v4 := freshDump(t, d, func(db *sqlx.DB) { migrateUp(t, db, d, tool, 4) })
			require.NotEqual(t, v1, v2, "migration 1 alone must differ from 1+2")
			require.NotEqual(t, v2, v3, "migrations 1+2 must differ from 1-3")
			require.NotEqual(t, v3, v4, "migrations 1-3 must differ from 1-4")

			db := testdb.Open(t, d)
			migrateUp(t, db, d, tool, 7)
			seedRows(t, db, d)
			testMigration7DownUp(t, db, d, tool)
			require.NoError(t, runMigration(t, db, d, tool, 7, false), "%s down 7", tool)
			testMigration6DownUp(t, db, d, tool)
			seeded := tableRows(t, db)
			require.NoError(t, runMigration(t, db, d, tool, 6, false), "%s down 6", tool)
			require.NoError(t, runMigration(t, db, d, tool, 5, false), "%s down 5", tool)
			requireSameSchema(t, tool+" migrations 1-4", v4, tool+" 1-6, then 6 and 5 down", dumpSchema(t, db, d))
			require.Equal(t, seeded, tableRows(t, db), "%s down 6 and 5 changed the rows", tool)
			// The columns of migration 3 survive the rebuilds of migration 4.
			_, err := db.ExecContext(ctx, db.Rebind("UPDATE "+RequestTable+
				" SET content = ?, queue_seq = ?, on_busy = ?, interrupted_by = ?, steps = ? WHERE id = ?"),
				"lunch 35", int64(4), "queue", "c-9", `[{"name":"a","output":1}]`, "seed-0")
			require.NoError(t, err)
			queueCols := "SELECT id, content, queue_seq, on_busy, interrupted_by FROM " + RequestTable + " ORDER BY id"
			queued := queryRows(t, db, queueCols)
			rows := tableRows(t, db)

			// Migration 4.
			require.NoError(t, runMigration(t, db, d, tool, 4, false), "%s down 4", tool)
			requireSameSchema(t, tool+" migrations 1-3", v3, tool+" 1-4, then 4 down", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s down 4 changed the rows", tool)
			require.Equal(t, queued, queryRows(t, db, queueCols), "%s down 4 changed the queue columns", tool)
			requireCheckViolation(t, insertRequest(ctx, db, "after-down-4", StoredCancelled), requestStatusCheck)

			require.NoError(t, runMigration(t, db, d, tool, 4, true), "%s up 4 after down", tool)
			requireSameSchema(t, tool+" migrations 1-4", v4, tool+" 4 down, then up", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s up 4 changed the rows", tool)
			require.Equal(t, queued, queryRows(t, db, queueCols), "%s up 4 changed the queue columns", tool)
			_, err = db.ExecContext(ctx, db.Rebind("UPDATE "+RequestTable+" SET steps = ? WHERE id = ?"), `[]`, "seed-0")
			require.NoError(t, err)
			steps := queryRows(t, db, "SELECT id, steps FROM "+RequestTable+" ORDER BY id")

			err = runMigration(t, db, d, tool, 4, true)
			if d == lease.Postgres {
				require.NoError(t, err, "%s up 4 a second time", tool)
			} else {
				require.Error(t, err, "%s up 4 a second time must refuse", tool)
				assert.Contains(t, strings.ToLower(err.Error()), "duplicate column")
			}
			requireSameSchema(t, tool+" migrations 1-4", v4, tool+" up 4 twice", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s up 4 twice changed the rows", tool)
			require.Equal(t, steps, queryRows(t, db, "SELECT id, steps FROM "+RequestTable+" ORDER BY id"), "%s up 4 twice changed the steps", tool)

			// A 'cancelled' request blocks down 4, loudly, and down changes
			// nothing.
			require.NoError(t, insertRequest(ctx, db, "blocks-cancelled", StoredCancelled))
			rows = tableRows(t, db)
			err = runMigration(t, db, d, tool, 4, false)
			requireCheckViolation(t, err, requestStatusCheck)
			requireSameSchema(t, tool+" migrations 1-4", v4, tool+" after a refused down 4", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s refused down 4 changed the rows", tool)
			_, err = db.ExecContext(ctx, db.Rebind("DELETE FROM "+RequestTable+" WHERE id = ?"), "blocks-cancelled")
			require.NoError(t, err)
			rows = tableRows(t, db)
			require.NoError(t, runMigration(t, db, d, tool, 4, false), "%s down 4", tool)
			_, err = db.ExecContext(ctx, db.Rebind("UPDATE "+RequestTable+
				" SET content = NULL, queue_seq = NULL, on_busy = NULL, interrupted_by = NULL WHERE id = ?"), "seed-0")
			require.NoError(t, err)

			// Migration 3, on the tables of 1-3.
			require.NoError(t, runMigration(t, db, d, tool, 3, false), "%s down 3", tool)
			requireSameSchema(t, tool+" migrations 1+2", v2, tool+" 1-3, then 3 down", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s down 3 changed the rows", tool)
			requireCheckViolation(t, insertRequest(ctx, db, "after-down-3", StoredQueued), requestStatusCheck)

			require.NoError(t, runMigration(t, db, d, tool, 3, true), "%s up 3 after down", tool)
			requireSameSchema(t, tool+" migrations 1-3", v3, tool+" 3 down, then up", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s up 3 changed the rows", tool)

			err = runMigration(t, db, d, tool, 3, true)
			if d == lease.Postgres {
				require.NoError(t, err, "%s up 3 a second time", tool)
			} else {
				require.Error(t, err, "%s up 3 a second time must refuse", tool)
				assert.Contains(t, strings.ToLower(err.Error()), "duplicate column")
			}
			requireSameSchema(t, tool+" migrations 1-3", v3, tool+" up 3 twice", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s up 3 twice changed the rows", tool)

			// A 'queued' request blocks down 3, loudly, and down changes
			// nothing; so do 'interrupted' and 'expired'.
			for _, st := range []string{StoredQueued, StoredInterrupted, StoredExpired} {
				require.NoError(t, insertRequest(ctx, db, "blocks-"+st, st))
				rows = tableRows(t, db)
				err = runMigration(t, db, d, tool, 3, false)
				requireCheckViolation(t, err, requestStatusCheck)
				requireSameSchema(t, tool+" migrations 1-3", v3, tool+" after a refused down 3", dumpSchema(t, db, d))
				require.Equal(t, rows, tableRows(t, db), "%s refused down 3 changed the rows", tool)
				_, err = db.ExecContext(ctx, db.Rebind("DELETE FROM "+RequestTable+" WHERE id = ?"), "blocks-"+st)
				require.NoError(t, err)
			}
			rows = tableRows(t, db)
			require.NoError(t, runMigration(t, db, d, tool, 3, false), "%s down 3", tool)

			// Migration 2, on the tables of 1+2.
			require.NoError(t, runMigration(t, db, d, tool, 2, false), "%s down 2", tool)
			requireSameSchema(t, tool+" migration 1", v1, tool+" 1+2, then 2 down", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s down 2 changed the rows", tool)
			requireCheckViolation(t, insertTool(ctx, db, "after-down", StoredStarted), toolStatusCheck)

			require.NoError(t, runMigration(t, db, d, tool, 2, true), "%s up 2 after down", tool)
			requireSameSchema(t, tool+" migrations 1+2", v2, tool+" 2 down, then up", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s up 2 changed the rows", tool)

			require.NoError(t, runMigration(t, db, d, tool, 2, true), "%s up 2 a second time", tool)
			requireSameSchema(t, tool+" migrations 1+2", v2, tool+" up 2 twice", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s up 2 twice changed the rows", tool)

			// A 'started' row blocks down, loudly, and down changes nothing.
			require.NoError(t, insertTool(ctx, db, "started-1", StoredStarted))
			rows = tableRows(t, db)
			err = runMigration(t, db, d, tool, 2, false)
			requireCheckViolation(t, err, toolStatusCheck)
			requireSameSchema(t, tool+" migrations 1+2", v2, tool+" after a refused down 2", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s refused down 2 changed the rows", tool)

			// Without it, down 2 and down 1 remove everything.
			_, err = db.ExecContext(ctx, db.Rebind("DELETE FROM "+ToolExecutionTable+" WHERE id = ?"), "started-1")
			require.NoError(t, err)
			require.NoError(t, runMigration(t, db, d, tool, 2, false), "%s down 2", tool)
			require.NoError(t, runMigration(t, db, d, tool, 1, false), "%s down 1", tool)
			require.Empty(t, tableNames(t, db, d), "%s down 2, down 1 left tables", tool)
		}
	})
}

// requireCheckViolation asserts that err is a violation of the named CHECK
// constraint (each server's message names it).
func requireCheckViolation(t *testing.T, err error, name string) {
	t.Helper()
	require.Error(t, err, "expected a violation of %s", name)
	require.Contains(t, err.Error(), name)
}

// TestDriftCheckCatchesEdits proves that the real-database drift check
// notices a DDL or a migration that builds anything else than the other,
// and names the object that differs. (That the goose files and the DDL are
// what the golang-migrate files generate is TestGeneratedFilesAreCurrent's
// job.)
func TestDriftCheckCatchesEdits(t *testing.T) {
	t.Parallel()
	// On the servers: a DDL or a migration 2 that builds anything else than
	// the other is reported, with the object that differs.
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		m := readMigrationTexts(t, d)
		migrated := freshDump(t, d, func(db *sqlx.DB) { migrateUp(t, db, d, "golang-migrate", lastMigration) })
		edit := func(src, old, repl string) string {
			t.Helper()
			out := strings.Replace(src, old, repl, 1)
			require.NotEqual(t, src, out, "%s: mutation %q -> %q did not apply", d, old, repl)
			return out
		}
		mustDrift := func(name, mentions string, got []string) {
			t.Helper()
			diff := schemaDiff(fmt.Sprintf("migrations 1-%d", lastMigration), migrated, name, got)
			assert.NotEmpty(t, diff, "%s: drift not detected: %s", d, name)
			assert.Contains(t, diff, mentions, "%s: %s: the difference must name %s", d, name, mentions)
		}
		ddlWith := func(ddl string) func(db *sqlx.DB) {
			return func(db *sqlx.DB) { require.NoError(t, ApplyScript(t.Context(), db, ddl)) }
		}
		// migrationsWith runs all the migrations with the given text as
		// the up file of one version.
		migrationsWith := func(version int, text string) func(db *sqlx.DB) {
			return func(db *sqlx.DB) {
				for v := 1; v <= lastMigration; v++ {
					if v == version {
						require.NoError(t, runScriptAs(t, db, d, "golang-migrate", text))
						continue
					}
					require.NoError(t, runMigration(t, db, d, "golang-migrate", v, true))
				}
			}
		}
		migrationsWith2 := func(up2 string) func(db *sqlx.DB) { return migrationsWith(2, up2) }

		mustDrift("DDL with the CHECK of migration 1", toolStatusCheck, freshDump(t, d, ddlWith(
			edit(m.ddl, "'processing', 'started', 'success', 'error'", "'processing', 'success', 'error'"))))
		mustDrift("DDL with a column renamed", "generations", freshDump(t, d, ddlWith(
			edit(m.ddl, "generation ", "generations "))))
		mustDrift("DDL with a default changed", ColGeneration, freshDump(t, d, ddlWith(
			edit(m.ddl, "NOT NULL DEFAULT 0", "NOT NULL DEFAULT 1"))))
		mustDrift("migration 2 that allows one more status", toolStatusCheck, freshDump(t, d, migrationsWith2(
			edit(m.up[2], "'started', ", "'started', 'cancelled', "))))
		mustDrift("DDL with the request CHECK of migration 1", requestStatusCheck, freshDump(t, d, ddlWith(
			edit(m.ddl, "'queued', 'processing', 'waiting', 'success', 'error', 'interrupted', 'cancelled', 'expired'", "'processing', 'success', 'error'"))))
		mustDrift("DDL with the request CHECK of migration 3", requestStatusCheck, freshDump(t, d, ddlWith(
			edit(m.ddl, "'processing', 'waiting', 'success', 'error', 'interrupted', 'cancelled', 'expired'",
				"'processing', 'success', 'error', 'interrupted', 'expired'"))))
		mustDrift("DDL with the request CHECK of migration 6", requestStatusCheck, freshDump(t, d, ddlWith(
			edit(m.ddl, "'processing', 'waiting', ", "'processing', "))))
		mustDrift("DDL without the wait_name column", ColWaitName, freshDump(t, d, ddlWith(
			regexp.MustCompile(`(?m)^\s*wait_name\s.*\n`).ReplaceAllString(m.ddl, ""))))
		mustDrift("migration 7 that forgets the status it adds", requestStatusCheck, freshDump(t, d, migrationsWith(7,
			edit(m.up[7], "'waiting', ", ""))))
		mustDrift("migration 7 that names wait_seq otherwise", ColWaitSeq, freshDump(t, d, migrationsWith(7,
			strings.ReplaceAll(m.up[7], ColWaitSeq, "wait_step"))))
		mustDrift("DDL without the deaths column", ColDeaths, freshDump(t, d, ddlWith(
			regexp.MustCompile(`(?m)^\s*deaths\s.*\n`).ReplaceAllString(m.ddl, ""))))
		mustDrift("DDL with the steps column of migration 4", oldStepsColumn, freshDump(t, d, ddlWith(
			edit(m.ddl, "    deaths ", "    steps TEXT NULL,\n    deaths "))))
		mustDrift("DDL with the call key of migration 5", ToolExecutionCallUnique, freshDump(t, d, ddlWith(
			edit(m.ddl, "arguments_hash, occurrence)", "arguments_hash)"))))
		mustDrift("DDL without the agent column", ColAgent, freshDump(t, d, ddlWith(
			regexp.MustCompile(`(?m)^\s*agent\s.*\n`).ReplaceAllString(m.ddl, ""))))
		mustDrift("migration 6 that keeps the call key of migration 5", ToolExecutionCallUnique, freshDump(t, d, migrationsWith(6,
			edit(m.up[6], "arguments_hash, occurrence)", "arguments_hash)"))))
		noStepSeq := strings.ReplaceAll(m.up[5], ColStepSeq, "step_sequence")
		require.NotEqual(t, m.up[5], noStepSeq)
		mustDrift("migration 5 that names step_seq otherwise", ColStepSeq, freshDump(t, d, migrationsWith(5, noStepSeq)))
		// Migration 7 writes the whole request CHECK again: a status that
		// an earlier migration forgot comes back with it, and a migration 7
		// that forgets one is the drift.
		mustDrift("migration 7 that forgets an earlier status", requestStatusCheck, freshDump(t, d, migrationsWith(7,
			edit(m.up[7], "'cancelled', ", ""))))
		// Migration 7 rebuilds the table on SQLite, with its indexes: there
		// the index is forgotten in migration 7.
		var noIndex string
		noIndexIn := 3
		switch d {
		case lease.MySQL:
			noIndex = edit(m.up[3], "    ADD KEY "+RequestStatusUpdatedIndex+" (status, updated_at),\n", "")
		case lease.SQLite:
			noIndexIn = 7
			noIndex = m.up[7][:strings.LastIndex(m.up[7], "CREATE INDEX")]
		default:
			noIndex = m.up[3][:strings.LastIndex(m.up[3], "CREATE INDEX")]
		}
		mustDrift(fmt.Sprintf("migration %d that forgets the status index", noIndexIn), RequestStatusUpdatedIndex,
			freshDump(t, d, migrationsWith(noIndexIn, noIndex)))
		if d == lease.SQLite {
			up2 := m.up[2][:strings.LastIndex(m.up[2], "CREATE INDEX")]
			mustDrift("migration 2 that forgets an index", ToolExecutionSessionRequestIndex, freshDump(t, d, migrationsWith2(up2)))
			mustDrift("migration 2 that rebuilds a column without its default", ColGeneration, freshDump(t, d, migrationsWith2(
				edit(m.up[2], "INTEGER NOT NULL DEFAULT 0", "INTEGER NOT NULL"))))
			mustDrift("migration 7 whose time CHECK leaves out wait_until", "rowlease_request_time_ck", freshDump(t, d, migrationsWith(7,
				edit(m.up[7], " AND typeof(wait_until) IN ('integer', 'null')", ""))))
			mustDrift("migration 7 that rebuilds without the deaths column's default", ColDeaths, freshDump(t, d, migrationsWith(7,
				edit(m.up[7], "deaths            INTEGER NOT NULL DEFAULT 0", "deaths            INTEGER NOT NULL DEFAULT 1"))))
		}
	})
}

// TestMigrationFilesAreUsersFiles: users copy the migration files into
// their own folders, so the files say what they do and nothing about this
// repository's tests or paths.
func TestMigrationFilesAreUsersFiles(t *testing.T) {
	t.Parallel()
	err := fs.WalkDir(migrationFiles, "migrations", func(path string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if d.IsDir() {
			return nil
		}
		b, err := fs.ReadFile(migrationFiles, path)
		require.NoError(t, err)
		for _, word := range []string{"Test", "test", "schema/sql", "drift"} {
			assert.NotContains(t, string(b), word, path)
		}
		return nil
	})
	require.NoError(t, err)
}

// TestSupportedVersionsAgree: the package doc and the DDL headers name the
// server versions the README names.
func TestSupportedVersionsAgree(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	require.Contains(t, string(readme), "MySQL 8 / MariaDB 10.6+, PostgreSQL 13+ and SQLite 3.35+")
	for _, want := range []string{"MariaDB 10.6 or\n// later", "PostgreSQL 13 or later", "SQLite 3.35 or later"} {
		assert.Contains(t, string(doc), want, "schema/doc.go")
	}
	for d, want := range map[lease.Dialect]string{lease.MySQL: "MariaDB 10.6+", lease.Postgres: "PostgreSQL 13+", lease.SQLite: "SQLite 3.35+"} {
		ddl, err := DDL(d)
		require.NoError(t, err)
		first, _, _ := strings.Cut(ddl, "\n")
		assert.Contains(t, first, want, "schema/sql/%s.sql", d)
	}
}

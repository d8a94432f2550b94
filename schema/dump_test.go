package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema/internal/sqlscript"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// toolStatusCheck and requestStatusCheck are the names of the status
// CHECKs, which every server names in its violation message.
const (
	toolStatusCheck    = "rowlease_tool_execution_status_ck"
	requestStatusCheck = "rowlease_request_status_ck"
)

// eachDialect runs fn as a parallel subtest per dialect, like testdb.Each,
// for tests that need several fresh databases of one dialect
// (testdb.Open(t, d) each).
func eachDialect(t *testing.T, fn func(t *testing.T, d lease.Dialect)) {
	t.Helper()
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			fn(t, d)
		})
	}
}

// lastMigration is the version of the newest migration: the one whose
// tables Apply's DDL builds.
const lastMigration = 7

// Migration file names, per version.
var (
	migrateFiles = map[int][2]string{ // version → up, down
		1: {"000001_create_lock_tables.up.sql", "000001_create_lock_tables.down.sql"},
		2: {"000002_tool_execution_started.up.sql", "000002_tool_execution_started.down.sql"},
		3: {"000003_request_queue.up.sql", "000003_request_queue.down.sql"},
		4: {"000004_request_steps.up.sql", "000004_request_steps.down.sql"},
		5: {"000005_step_journal.up.sql", "000005_step_journal.down.sql"},
		6: {"000006_agent_metadata_occurrence.up.sql", "000006_agent_metadata_occurrence.down.sql"},
		7: {"000007_request_wait.up.sql", "000007_request_wait.down.sql"},
	}
	gooseFiles = map[int]string{
		1: "00001_create_lock_tables.sql",
		2: "00002_tool_execution_started.sql",
		3: "00003_request_queue.sql",
		4: "00004_request_steps.sql",
		5: "00005_step_journal.sql",
		6: "00006_agent_metadata_occurrence.sql",
		7: "00007_request_wait.sql",
	}
	migrationTools = []string{"golang-migrate", "goose"}
)

// migrationScript returns the text that tool runs for one version and
// direction: a golang-migrate file, or the Up or Down section of a goose
// file (statements joined again, each ending in ";\n").
func migrationScript(t *testing.T, d lease.Dialect, tool string, version int, up bool) string {
	t.Helper()
	fsys, err := Migrations(d, tool)
	require.NoError(t, err)
	if tool == "golang-migrate" {
		name := migrateFiles[version][1]
		if up {
			name = migrateFiles[version][0]
		}
		b, err := fs.ReadFile(fsys, name)
		require.NoError(t, err)
		return string(b)
	}
	b, err := fs.ReadFile(fsys, gooseFiles[version])
	require.NoError(t, err)
	gUp, gDown, err := parseGoose(string(b))
	require.NoError(t, err)
	stmts := gDown
	if up {
		stmts = gUp
	}
	var s strings.Builder
	for _, st := range stmts {
		s.WriteString(st + ";\n")
	}
	return s.String()
}

// parseGoose splits a goose migration into the statements of its Up and Down
// sections, the way goose does for files without StatementBegin/End: at lines
// ending in ';'. Annotations this parser does not implement are errors, so a
// file that starts to need them fails the drift test until the parser learns
// them.
func parseGoose(src string) (up, down []string, err error) {
	var section string
	var upText, downText strings.Builder
	for line := range strings.Lines(src) {
		trimmed := strings.TrimSpace(line)
		if ann, ok := strings.CutPrefix(trimmed, "-- +goose "); ok {
			switch strings.TrimSpace(ann) {
			case "Up":
				if section != "" {
					return nil, nil, errors.New("goose: second or late -- +goose Up")
				}
				section = "up"
			case "Down":
				if section != "up" {
					return nil, nil, errors.New("goose: -- +goose Down without a preceding Up")
				}
				section = "down"
			default:
				return nil, nil, fmt.Errorf("goose: annotation %q not supported by this test", trimmed)
			}
			continue
		}
		switch section {
		case "":
			if trimmed != "" && !strings.HasPrefix(trimmed, "--") {
				return nil, nil, fmt.Errorf("goose: SQL before -- +goose Up: %q", trimmed)
			}
		case "up":
			upText.WriteString(line)
		case "down":
			downText.WriteString(line)
		}
	}
	if section != "down" {
		return nil, nil, errors.New("goose: file needs both -- +goose Up and -- +goose Down")
	}
	return sqlscript.Split(upText.String()), sqlscript.Split(downText.String()), nil
}

// runMigration runs one migration file the way tool does.
func runMigration(t *testing.T, db *sqlx.DB, d lease.Dialect, tool string, version int, up bool) error {
	t.Helper()
	return runScriptAs(t, db, d, tool, migrationScript(t, d, tool, version, up))
}

// runScriptAs runs a migration text the way tool runs a file.
//
// golang-migrate sends the whole file in one Exec: on SQLite inside a
// transaction of its own (the sqlite and sqlite3 drivers), on PostgreSQL as
// one simple-protocol query (an implicit transaction), on MySQL over a
// connection with multiStatements=true. goose splits the file at lines
// ending in ';' and runs the statements one by one in one transaction.
func runScriptAs(t *testing.T, db *sqlx.DB, d lease.Dialect, tool, script string) error {
	t.Helper()
	ctx := t.Context()
	if tool == "goose" {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for _, st := range sqlscript.Split(script) {
			if _, err := tx.ExecContext(ctx, st); err != nil {
				_ = tx.Rollback()
				return fmt.Errorf("goose statement %q: %w", sqlscript.FirstLine(st), err)
			}
		}
		return tx.Commit()
	}
	switch d {
	case lease.SQLite:
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, script); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	case lease.MySQL:
		_, err := multiStatementDB(t, db).ExecContext(ctx, script)
		return err
	default:
		_, err := db.ExecContext(ctx, script)
		return err
	}
}

// multiStatementDB opens a pool with multiStatements=true on db's MySQL
// database, as golang-migrate's MySQL driver needs.
func multiStatementDB(t *testing.T, db *sqlx.DB) *sql.DB {
	t.Helper()
	var name string
	require.NoError(t, db.QueryRowContext(t.Context(), "SELECT DATABASE()").Scan(&name))
	cfg, err := mysql.ParseDSN(os.Getenv(testdb.MySQLEnv))
	require.NoError(t, err)
	cfg.DBName = name
	cfg.MultiStatements = true
	mdb, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = mdb.Close() })
	return mdb
}

// migrateUp runs the up migrations 1..to of tool.
func migrateUp(t *testing.T, db *sqlx.DB, d lease.Dialect, tool string, to int) {
	t.Helper()
	for v := 1; v <= to; v++ {
		require.NoError(t, runMigration(t, db, d, tool, v, true), "%s %s up %d", d, tool, v)
	}
}

// queryRows returns every row of query as its columns printed with %v
// (NULL as <null>) and joined by " | ".
func queryRows(t *testing.T, db *sqlx.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), db.Rebind(query), args...)
	require.NoError(t, err, query)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...), query)
		parts := make([]string, len(cols))
		for i, v := range vals {
			parts[i] = "<null>"
			if v.Valid {
				parts[i] = v.String
			}
		}
		out = append(out, strings.Join(parts, " | "))
	}
	require.NoError(t, rows.Err(), query)
	return out
}

// dumpSchema describes everything in db's database (MySQL), schema
// (PostgreSQL) or file (SQLite) that the DDL can set: tables, columns with
// position, type, nullability and default, constraints with their
// definitions as the server prints them, indexes with their columns, and on
// SQLite every object's CREATE text (which holds the CHECKs). Names of the
// per-test database or schema are left out, so two databases made the same
// way dump the same. The lines are sorted.
func dumpSchema(t *testing.T, db *sqlx.DB, d lease.Dialect) []string {
	t.Helper()
	var out []string
	add := func(prefix, query string) {
		for _, r := range queryRows(t, db, query) {
			out = append(out, prefix+" "+r)
		}
	}
	switch d {
	case lease.Postgres:
		var schemaName string
		require.NoError(t, db.QueryRowContext(t.Context(), "SELECT current_schema()").Scan(&schemaName))
		add("table", `SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = current_schema()`)
		// The position counts the columns in order: ordinal_position is
		// PostgreSQL's attnum, which keeps a gap for every dropped column
		// (a down migration followed by an up one).
		add("column", `SELECT table_name, column_name,
			ROW_NUMBER() OVER (PARTITION BY table_name ORDER BY ordinal_position), data_type, character_maximum_length,
			is_nullable, column_default, collation_name FROM information_schema.columns WHERE table_schema = current_schema()`)
		add("constraint", `SELECT cl.relname, c.conname, c.contype, c.convalidated, c.condeferrable, pg_get_constraintdef(c.oid)
			FROM pg_constraint c JOIN pg_class cl ON cl.oid = c.conrelid JOIN pg_namespace n ON n.oid = cl.relnamespace
			WHERE n.nspname = current_schema()`)
		add("index", `SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()`)
		for i := range out {
			out[i] = strings.ReplaceAll(out[i], schemaName+".", "")
		}
	case lease.MySQL:
		add("table", `SELECT table_name, table_type, engine, table_collation, create_options
			FROM information_schema.tables WHERE table_schema = DATABASE()`)
		add("column", `SELECT table_name, column_name, ordinal_position, column_type, is_nullable,
			COALESCE(column_default, '<no default>'), extra, collation_name
			FROM information_schema.columns WHERE table_schema = DATABASE()`)
		add("constraint", `SELECT tc.table_name, tc.constraint_name, tc.constraint_type, cc.check_clause
			FROM information_schema.table_constraints tc
			LEFT JOIN information_schema.check_constraints cc
			ON cc.constraint_schema = tc.constraint_schema AND cc.constraint_name = tc.constraint_name
			WHERE tc.table_schema = DATABASE()`)
		add("index", `SELECT table_name, index_name, non_unique, index_type,
			GROUP_CONCAT(column_name ORDER BY seq_in_index SEPARATOR ',')
			FROM information_schema.statistics WHERE table_schema = DATABASE()
			GROUP BY table_name, index_name, non_unique, index_type`)
	case lease.SQLite:
		// CREATE texts: SQLite keeps the statement as written, minus IF NOT
		// EXISTS, and a renamed table gets its new name in double quotes.
		for _, r := range queryRows(t, db, `SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_stat%'`) {
			r = strings.ReplaceAll(r, "IF NOT EXISTS ", "")
			r = strings.ReplaceAll(r, `"`, "")
			out = append(out, "object "+strings.Join(strings.Fields(r), " "))
		}
		add("column", `SELECT m.name, p.cid, p.name, p.type, p."notnull", p.dflt_value, p.pk, p.hidden
			FROM sqlite_master m, pragma_table_xinfo(m.name) p WHERE m.type = 'table'`)
		add("index", `SELECT m.name, il.name, il."unique", il.origin, il.partial,
			(SELECT group_concat(ii.name, ',') FROM (SELECT name FROM pragma_index_info(il.name) ORDER BY seqno) ii)
			FROM sqlite_master m, pragma_index_list(m.name) il WHERE m.type = 'table'`)
	}
	slices.Sort(out)
	return out
}

// schemaDiff lists the lines only one dump has; "" when they are equal.
func schemaDiff(wantLabel string, want []string, gotLabel string, got []string) string {
	var b strings.Builder
	for _, w := range want {
		if !slices.Contains(got, w) {
			fmt.Fprintf(&b, "\n  only in %s: %s", wantLabel, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			fmt.Fprintf(&b, "\n  only in %s: %s", gotLabel, g)
		}
	}
	return b.String()
}

// requireSameSchema fails the test if the dumps differ, listing the
// differences.
func requireSameSchema(t *testing.T, wantLabel string, want []string, gotLabel string, got []string) {
	t.Helper()
	require.NotEmpty(t, want, "%s dumped nothing", wantLabel)
	if diff := schemaDiff(wantLabel, want, gotLabel, got); diff != "" {
		t.Fatalf("schemas differ:%s", diff)
	}
}

// freshDump returns the schema dump of a fresh database set up by setup.
func freshDump(t *testing.T, d lease.Dialect, setup func(db *sqlx.DB)) []string {
	t.Helper()
	db := testdb.Open(t, d)
	setup(db)
	return dumpSchema(t, db, d)
}

// applyDDL is a setup for freshDump: Apply on an empty database.
func applyDDL(t *testing.T, d lease.Dialect) func(db *sqlx.DB) {
	return func(db *sqlx.DB) { require.NoError(t, Apply(t.Context(), db, d)) }
}

// insertTool inserts a tool execution with the given id and status.
func insertTool(ctx context.Context, db *sqlx.DB, id, status string) error {
	_, err := db.ExecContext(ctx, db.Rebind("INSERT INTO "+ToolExecutionTable+
		" (id, session_key, request_id, tool_name, arguments_hash, idempotency_key, status) VALUES (?, ?, ?, ?, ?, ?, ?)"),
		id, "s-"+id, "r-"+id, "tool", hashA, "k-"+id, status)
	return err
}

// insertRequest inserts a request with the given id and status.
func insertRequest(ctx context.Context, db *sqlx.DB, id, status string) error {
	_, err := db.ExecContext(ctx, db.Rebind("INSERT INTO "+RequestTable+
		" (id, session_key, client_request_id, fingerprint, status) VALUES (?, ?, ?, ?, ?)"),
		id, "s-"+id, "c-"+id, hashA, status)
	return err
}

// seedRows fills the three tables with a few rows in every status of
// migration 1, with the optional columns set, so that a rebuild that lost
// or changed a value shows in toolRows.
func seedRows(t *testing.T, db *sqlx.DB, d lease.Dialect) {
	t.Helper()
	ctx := t.Context()
	exp := any("2031-02-03 04:05:06.123456")
	if d == lease.SQLite {
		exp = int64(1927602306123456)
	}
	_, err := db.ExecContext(ctx, db.Rebind("INSERT INTO "+SessionTable+" (session_key, holder, token, expires_at, generation) VALUES (?, ?, ?, ?, ?)"),
		"seed", "worker", uuid1, exp, int64(3))
	require.NoError(t, err)
	for i, status := range []string{StoredProcessing, StoredSucceeded, StoredFailed} {
		id := fmt.Sprintf("seed-%d", i)
		require.NoError(t, insertRequest(ctx, db, id, status))
		require.NoError(t, insertTool(ctx, db, id, status))
		_, err := db.ExecContext(ctx, db.Rebind("UPDATE "+ToolExecutionTable+
			" SET holder = ?, token = ?, expires_at = ?, generation = ?, result = ?, error = ? WHERE id = ?"),
			"worker-"+id, uuid2, exp, int64(i+7), `{"n":`+fmt.Sprint(i)+`}`, "e-"+id, id)
		require.NoError(t, err)
	}
}

// migration1Columns are the columns of each table in migration 1, which
// every later version keeps.
var migration1Columns = map[string]string{
	SessionTable: "session_key, holder, token, expires_at, generation, created_at, updated_at",
	RequestTable: "id, session_key, client_request_id, fingerprint, status, holder, token, expires_at, generation, " +
		"reply, result, error, created_at, updated_at",
	ToolExecutionTable: "id, session_key, request_id, tool_name, arguments_hash, idempotency_key, status, holder, " +
		"token, expires_at, generation, result, error, created_at, updated_at",
}

// tableRows returns every row of every lock table (the columns of
// migration 1), for comparing the data before and after a migration.
func tableRows(t *testing.T, db *sqlx.DB) []string {
	t.Helper()
	var out []string
	for _, tbl := range []string{SessionTable, RequestTable, ToolExecutionTable} {
		key := ColID
		if tbl == SessionTable {
			key = ColSessionKey
		}
		for _, r := range queryRows(t, db, "SELECT "+migration1Columns[tbl]+" FROM "+tbl+" ORDER BY "+key) {
			out = append(out, tbl+": "+r)
		}
	}
	return out
}

// tableNames lists the tables of db's database, schema or file.
func tableNames(t *testing.T, db *sqlx.DB, d lease.Dialect) []string {
	t.Helper()
	switch d {
	case lease.SQLite:
		return queryRows(t, db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
	case lease.MySQL:
		return queryRows(t, db, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY table_name")
	default:
		return queryRows(t, db, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name")
	}
}

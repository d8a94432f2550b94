package schema

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// oldSteps are the steps column values that seedOldSteps writes into the
// tables of migration 4, by request id, as the library wrote them
// (json.Marshal: compact, with Go's escapes), and the generation of each
// request. seed-1 has no steps (NULL), seed-2 an empty array.
var (
	oldSteps = map[string]string{
		"seed-0": `[{"name":"model","output":{"tool":"write","args":[1,2.50,"\u003cb\u003e"]}},` +
			`{"name":"note","output":"a \"quoted\" line\nand é"},` +
			`{"name":"count","output":42},{"name":"nothing","output":null},{"name":"list","output":[]}]`,
		"seed-2": `[]`,
	}
	oldStepsGeneration = map[string]int64{"seed-0": 5, "seed-1": 6, "seed-2": 7}
)

// seedOldSteps writes oldSteps into the steps column of the seeded
// requests (seedRows) of a database at migration 4, and their
// generations.
func seedOldSteps(t *testing.T, db *sqlx.DB) {
	t.Helper()
	for id, gen := range oldStepsGeneration {
		var steps any
		if s, ok := oldSteps[id]; ok {
			steps = s
		}
		_, err := db.ExecContext(t.Context(), db.Rebind("UPDATE "+RequestTable+
			" SET "+oldStepsColumn+" = ?, "+ColGeneration+" = ? WHERE id = ?"), steps, gen, id)
		require.NoError(t, err)
	}
}

// stepRow is one row of StepTable.
type stepRow struct {
	RequestID  string `db:"request_id"`
	Seq        int    `db:"seq"`
	Name       string `db:"name"`
	Output     string `db:"output"`
	Generation int64  `db:"generation"`
}

func readSteps(t *testing.T, db *sqlx.DB) []stepRow {
	t.Helper()
	var rows []stepRow
	require.NoError(t, db.SelectContext(t.Context(), &rows, "SELECT "+ColRequestID+", "+ColSeq+", "+ColName+", "+
		ColOutput+", "+ColGeneration+" FROM "+StepTable+" ORDER BY "+ColRequestID+", "+ColSeq))
	return rows
}

// isMySQLProper reports whether db is MySQL rather than MariaDB.
func isMySQLProper(t *testing.T, db *sqlx.DB, d lease.Dialect) bool {
	t.Helper()
	if d != lease.MySQL {
		return false
	}
	var version string
	require.NoError(t, db.QueryRowContext(t.Context(), "SELECT VERSION()").Scan(&version))
	return !strings.Contains(version, "MariaDB")
}

// requireMovedSteps checks that migration 5 moved oldSteps into StepTable:
// one row per step, seq from 0 in array order, the request's generation,
// each output the JSON text of the old array's element. The outputs are
// compared byte for byte: PostgreSQL (json) and MariaDB (JSON_TABLE's
// JSON PATH) keep the text as it is, and SQLite's -> writes JSON compact,
// as the library wrote it. MySQL writes a JSON value out again in its
// own spacing: there they are compared as JSON.
func requireMovedSteps(t *testing.T, db *sqlx.DB, d lease.Dialect) {
	t.Helper()
	got := readSteps(t, db)
	var want []stepRow
	for _, id := range []string{"seed-0", "seed-2"} {
		for i, el := range splitJSONArray(t, oldSteps[id]) {
			name, output := splitStep(t, el)
			want = append(want, stepRow{RequestID: id, Seq: i, Name: name, Output: output, Generation: oldStepsGeneration[id]})
		}
	}
	require.Len(t, got, len(want), "rows of %s: %v", StepTable, got)
	reserializes := isMySQLProper(t, db, d)
	for i := range want {
		w, g := want[i], got[i]
		if reserializes {
			assert.JSONEq(t, w.Output, g.Output, "step %d", i)
			g.Output = w.Output
		}
		assert.Equal(t, w, g, "step %d", i)
	}
	assert.Equal(t, []string{"0 | <null>", "0 | <null>", "0 | <null>"},
		queryRows(t, db, "SELECT "+ColDeaths+", (SELECT MAX("+ColStepSeq+") FROM "+ToolExecutionTable+") FROM "+
			RequestTable+" ORDER BY id"), "deaths 0, step_seq NULL")
	requireNoColumn(t, db, d, RequestTable, oldStepsColumn)
}

// requireRestoredSteps checks that migration 5's down put oldSteps back
// into the steps column: equal as JSON (PostgreSQL's json_agg writes its
// own spacing), NULL for a request without steps (the empty array of
// seed-2 included).
func requireRestoredSteps(t *testing.T, db *sqlx.DB) {
	t.Helper()
	got := queryRows(t, db, "SELECT id, COALESCE("+oldStepsColumn+", '<null>') FROM "+RequestTable+" ORDER BY id")
	require.Len(t, got, 3)
	for _, row := range got {
		id, steps, _ := strings.Cut(row, " | ")
		if want := oldSteps[id]; want != "" && want != "[]" {
			assert.JSONEq(t, want, steps, id)
		} else {
			assert.Equal(t, "<null>", steps, id)
		}
	}
}

// requireNoColumn checks that table has no column named column.
func requireNoColumn(t *testing.T, db *sqlx.DB, d lease.Dialect, table, column string) {
	t.Helper()
	cols, err := tableColumns(t.Context(), db, d.String(), table)
	require.NoError(t, err)
	require.True(t, cols[table], "no table %s", table)
	require.False(t, cols[table+"."+column], "%s still has the column %s", table, column)
}

// splitJSONArray returns the elements of a JSON array as their text.
func splitJSONArray(t *testing.T, array string) []string {
	t.Helper()
	array = strings.TrimSpace(array)
	require.True(t, strings.HasPrefix(array, "[") && strings.HasSuffix(array, "]"), array)
	inner := array[1 : len(array)-1]
	if strings.TrimSpace(inner) == "" {
		return nil
	}
	var out []string
	depth, start, inString, escaped := 0, 0, false, false
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 0:
			out = append(out, inner[start:i])
			start = i + 1
		}
	}
	return append(out, inner[start:])
}

// splitStep returns the name and the output text of one compact step
// object {"name":"…","output":…}.
func splitStep(t *testing.T, obj string) (name, output string) {
	t.Helper()
	rest, ok := strings.CutPrefix(obj, `{"name":"`)
	require.True(t, ok, obj)
	name, rest, ok = strings.Cut(rest, `","output":`)
	require.True(t, ok, obj)
	output, ok = strings.CutSuffix(rest, "}")
	require.True(t, ok, obj)
	return name, output
}

// TestApplyUpgradesStepsColumn: Apply, called by several sessions at once
// on the tables of the Apply of migration 4 with steps in the request
// table's steps column, moves them into StepTable in order, drops the
// column, and builds exactly the schema of a fresh Apply; the rows of the
// other tables are kept.
func TestApplyUpgradesStepsColumn(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		ctx := t.Context()
		want := freshDump(t, d, applyDDL(t, d))
		db := testdb.Open(t, d)
		applyOf(t, d, 4)(db)
		seedRows(t, db, d)
		seedOldSteps(t, db)
		rows := tableRows(t, db)

		const workers = 8
		errs := make(chan error, workers)
		for range workers {
			go func() { errs <- Apply(ctx, db, d) }()
		}
		for range workers {
			require.NoError(t, <-errs, "concurrent Apply on the tables of migration 4")
		}
		requireSameSchema(t, "a fresh Apply", want, "upgraded by Apply", dumpSchema(t, db, d))
		require.Equal(t, rows, tableRows(t, db), "the upgrade changed the rows")
		requireMovedSteps(t, db, d)

		rec := &recordingDB{db: db}
		require.NoError(t, Apply(ctx, rec, d))
		stmts, err := Statements(d)
		require.NoError(t, err)
		assert.Equal(t, stmts, rec.execs, "Apply on upgraded tables must run the DDL only")
		requireQueueStatusesAllowed(t, db)
	})
}

// TestMigration5DownUp runs migration 5 up, down and up again with each
// tool on the tables of migrations 1-4 with steps in the steps column:
// up moves them into StepTable, down puts them back into the column, the
// second up moves them again to the same rows, and each gives the schema
// of its version. Up on tables that have it already refuses and changes
// nothing (a database that Apply upgraded before the user copied the
// migrations).
func TestMigration5DownUp(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		for _, tool := range migrationTools {
			v4 := freshDump(t, d, func(db *sqlx.DB) { migrateUp(t, db, d, tool, 4) })
			v5 := freshDump(t, d, func(db *sqlx.DB) { migrateUp(t, db, d, tool, 5) })
			require.NotEqual(t, v4, v5)

			db := testdb.Open(t, d)
			migrateUp(t, db, d, tool, 4)
			seedRows(t, db, d)
			seedOldSteps(t, db)
			rows := tableRows(t, db)

			require.NoError(t, runMigration(t, db, d, tool, 5, true), "%s up 5", tool)
			requireSameSchema(t, tool+" migrations 1-5", v5, tool+" 1-4, then 5 up", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s up 5 changed the rows", tool)
			requireMovedSteps(t, db, d)
			moved := readSteps(t, db)

			require.NoError(t, runMigration(t, db, d, tool, 5, false), "%s down 5", tool)
			requireSameSchema(t, tool+" migrations 1-4", v4, tool+" 1-5, then 5 down", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s down 5 changed the rows", tool)
			requireRestoredSteps(t, db)

			require.NoError(t, runMigration(t, db, d, tool, 5, true), "%s up 5 after down", tool)
			requireSameSchema(t, tool+" migrations 1-5", v5, tool+" 5 down, then up", dumpSchema(t, db, d))
			require.Equal(t, rows, tableRows(t, db), "%s up 5 again changed the rows", tool)
			require.Equal(t, moved, readSteps(t, db), "%s: down and up again must give the same steps", tool)

			err := runMigration(t, db, d, tool, 5, true)
			require.Error(t, err, "%s up 5 a second time must refuse", tool)
			requireSameSchema(t, tool+" migrations 1-5", v5, tool+" up 5 twice", dumpSchema(t, db, d))
			require.Equal(t, moved, readSteps(t, db), "%s up 5 twice changed the steps", tool)
			require.Equal(t, rows, tableRows(t, db), fmt.Sprintf("%s up 5 twice changed the rows", tool))
		}
	})
}

// TestApplyUpgradesStepsColumnMattn: the upgrade of migration 5 through
// the other SQLite driver, mattn/go-sqlite3.
func TestApplyUpgradesStepsColumnMattn(t *testing.T) {
	t.Parallel()
	db := testdb.OpenMattn(t)
	applyOf(t, lease.SQLite, 4)(db)
	seedRows(t, db, lease.SQLite)
	seedOldSteps(t, db)
	rows := tableRows(t, db)
	require.NoError(t, Apply(t.Context(), db, lease.SQLite))
	require.Equal(t, rows, tableRows(t, db), "the upgrade changed the rows")
	requireMovedSteps(t, db, lease.SQLite)
}

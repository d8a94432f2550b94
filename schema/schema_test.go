package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema/internal/sqlscript"
)

var dialects = []lease.Dialect{lease.MySQL, lease.Postgres, lease.SQLite}

// TestDialects: every function takes a lease.Dialect; a name goes through
// lease.ParseDialect first, and an invalid value is ErrUnknownDialect.
func TestDialects(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"mariadb", "pgx/v5", "sqlite3"} {
		d, err := lease.ParseDialect(name)
		require.NoError(t, err, name)
		got, err := DDL(d)
		require.NoError(t, err, name)
		file, err := ddlFiles.ReadFile("sql/" + d.String() + ".sql")
		require.NoError(t, err)
		assert.Equal(t, string(file), got, name)
	}
	for _, bad := range []lease.Dialect{0, lease.Dialect(4), lease.Dialect(-1)} {
		_, err := DDL(bad)
		require.Error(t, err, "%s", bad)
		assert.ErrorIs(t, err, ErrUnknownDialect)
		assert.Contains(t, err.Error(), bad.String(), "error must name the dialect")

		_, err = Statements(bad)
		assert.ErrorIs(t, err, ErrUnknownDialect)
		_, err = Migrations(bad, "goose")
		assert.ErrorIs(t, err, ErrUnknownDialect)
		rec := recordingExecer{}
		err = Apply(context.Background(), &rec, bad)
		assert.ErrorIs(t, err, ErrUnknownDialect)
		assert.Empty(t, rec.queries)
	}
}

// normalizeStatement collapses every run of white space to one space, so
// that the shape checks read a statement as one line.
func normalizeStatement(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

var (
	createTableRE = regexp.MustCompile(`^CREATE TABLE IF NOT EXISTS (\w+) \(`)
	createIndexRE = regexp.MustCompile(`^CREATE (UNIQUE )?INDEX IF NOT EXISTS (\w+) ON (\w+) \(`)
)

// TestStatementsShape checks properties the rest of the package relies on:
// every statement is a single idempotent CREATE, the tables are the exported
// ones, and the exported index and column names occur in every dialect.
func TestStatementsShape(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		stmts, err := Statements(d)
		require.NoError(t, err)
		require.NotEmpty(t, stmts)
		ddl, err := DDL(d)
		require.NoError(t, err)

		var tables []string
		for _, s := range stmts {
			assert.NotContains(t, s, ";", "%s: statement must not contain ';': %s", d, s)
			assert.NotContains(t, s, "--", "%s: statement must not contain a comment: %s", d, s)
			norm := normalizeStatement(s)
			if m := createTableRE.FindStringSubmatch(norm); m != nil {
				tables = append(tables, m[1])
				if d == lease.MySQL {
					assert.True(t, strings.HasSuffix(norm, ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"),
						"mysql table %s must be InnoDB utf8mb4_bin", m[1])
				}
				continue
			}
			if createIndexRE.MatchString(norm) {
				assert.NotEqual(t, lease.MySQL, d, "MySQL 8 has no CREATE INDEX IF NOT EXISTS; declare keys inside CREATE TABLE: %s", norm)
				continue
			}
			t.Errorf("%s: statement is neither CREATE TABLE IF NOT EXISTS nor CREATE INDEX IF NOT EXISTS: %s", d, norm)
		}
		assert.Equal(t, []string{SessionTable, RequestTable, ToolExecutionTable, StepTable}, tables, d)

		for _, name := range []string{
			RequestSessionClientUnique, ToolExecutionIdemUnique, ToolExecutionCallUnique, ToolExecutionSessionRequestIndex,
			RequestSessionQueueUnique, RequestStatusUpdatedIndex,
			ColID, ColSessionKey, ColHolder, ColToken, ColExpiresAt, ColGeneration, ColCreatedAt, ColUpdatedAt,
			ColClientRequestID, ColFingerprint, ColStatus, ColReply, ColResult, ColError, ColRequestID,
			ColToolName, ColArgumentsHash, ColIdempotencyKey, ColContent, ColQueueSeq, ColOnBusy, ColInterruptedBy,
			ColSeq, ColName, ColOutput, ColDeaths, ColStepSeq, ColAgent, ColMetadata, ColOccurrence,
			ColWaitName, ColWaitQuestion, ColWaitSeq, ColWaitUntil,
		} {
			assert.Regexp(t, `\b`+name+`\b`, ddl, "%s DDL lacks %s", d, name)
		}
		assert.Contains(t, ddl, "rowlease_request_status_ck CHECK (status IN ('"+StoredQueued+"', '"+
			StoredProcessing+"', '"+StoredWaiting+"', '"+StoredSucceeded+"', '"+StoredFailed+"', '"+StoredInterrupted+"', '"+
			StoredCancelled+"', '"+StoredExpired+"'))", d)
		if d == lease.SQLite {
			assert.Contains(t, ddl, "typeof(expires_at) IN ('integer', 'null') AND typeof("+ColWaitUntil+") IN ('integer', 'null'))",
				"sqlite DDL: the request's time CHECK takes in wait_until")
		}
		assert.NotRegexp(t, `\b`+oldStepsColumn+`\b`, ddl, "%s DDL still has the steps column of migration 4", d)
		assert.Regexp(t, ToolExecutionCallUnique+`\b[^(]*\(request_id, tool_name, arguments_hash, occurrence\)`, ddl,
			"%s DDL: the call's unique key takes in the occurrence", d)
		assert.Contains(t, ddl, toolStatusCheck+" CHECK (status IN ('"+
			StoredProcessing+"', '"+StoredStarted+"', '"+StoredSucceeded+"', '"+StoredFailed+"'))", d)
	}
}

func TestSplitStatements(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"empty", "", nil},
		{"only comments", "-- a\n\n  -- b ;\n", nil},
		{"one", "CREATE TABLE t (a INT);\n", []string{"CREATE TABLE t (a INT)"}},
		{"no trailing semicolon", "SELECT 1", []string{"SELECT 1"}},
		{
			"multi-line with comments and blanks",
			"-- header\nCREATE TABLE a (\n    x INT,\n\n    -- inner comment\n    y INT\n);\n\nCREATE INDEX i\n    ON a (x);  \n",
			[]string{"CREATE TABLE a (\n    x INT,\n    y INT\n)", "CREATE INDEX i\n    ON a (x)"},
		},
		{"crlf", "SELECT 1;\r\nSELECT 2;\r\n", []string{"SELECT 1", "SELECT 2"}},
		{"semicolon inside a line stays", "SELECT ';' AS x;\n", []string{"SELECT ';' AS x"}},
		{"tail after last semicolon", "SELECT 1;\nSELECT 2\n", []string{"SELECT 1", "SELECT 2"}},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, sqlscript.Split(c.src), c.name)
	}
}

// recordingExecer records the statements it is given.
type recordingExecer struct {
	queries []string
	args    [][]any
	failAt  int // 1-based call number that fails; 0 = never
	err     error
}

func (r *recordingExecer) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	r.queries = append(r.queries, query)
	r.args = append(r.args, args)
	if r.failAt == len(r.queries) {
		return nil, r.err
	}
	return driverResult{}, nil
}

type driverResult struct{}

func (driverResult) LastInsertId() (int64, error) { return 0, errors.New("no id") }
func (driverResult) RowsAffected() (int64, error) { return 0, nil }

func TestApplyRunsStatementsOneAtATime(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		var rec recordingExecer
		require.NoError(t, Apply(context.Background(), &rec, d))
		want, err := Statements(d)
		require.NoError(t, err)
		assert.Equal(t, want, rec.queries, d)
		for i, a := range rec.args {
			assert.Empty(t, a, "%s: statement %d got arguments", d, i+1)
		}
	}
}

func TestApplyStopsAtFirstError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	rec := recordingExecer{failAt: 2, err: boom}
	err := Apply(context.Background(), &rec, lease.MySQL)
	require.Error(t, err)
	assert.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "mysql")
	assert.Contains(t, err.Error(), "statement 2 of 4")
	assert.Contains(t, err.Error(), "CREATE TABLE IF NOT EXISTS "+RequestTable)
	assert.Len(t, rec.queries, 2, "no statement may run after the failing one")
}

func TestApplyNilExecer(t *testing.T) {
	t.Parallel()
	err := Apply(context.Background(), nil, lease.SQLite)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nil Execer")
}

func TestMigrationsFS(t *testing.T) {
	t.Parallel()
	want := map[string][]string{
		"migrate": {"000001_create_lock_tables.down.sql", "000001_create_lock_tables.up.sql",
			"000002_tool_execution_started.down.sql", "000002_tool_execution_started.up.sql",
			"000003_request_queue.down.sql", "000003_request_queue.up.sql",
			"000004_request_steps.down.sql", "000004_request_steps.up.sql",
			"000005_step_journal.down.sql", "000005_step_journal.up.sql",
			"000006_agent_metadata_occurrence.down.sql", "000006_agent_metadata_occurrence.up.sql",
			"000007_request_wait.down.sql", "000007_request_wait.up.sql"},
		"goose": {"00001_create_lock_tables.sql", "00002_tool_execution_started.sql", "00003_request_queue.sql",
			"00004_request_steps.sql", "00005_step_journal.sql", "00006_agent_metadata_occurrence.sql",
			"00007_request_wait.sql"},
	}
	tools := map[string]string{"golang-migrate": "migrate", "migrate": "migrate", "Golang-Migrate": "migrate", "goose": "goose", "GOOSE": "goose"}
	for _, d := range dialects {
		for tool, kind := range tools {
			fsys, err := Migrations(d, tool)
			require.NoError(t, err, "%s %s", d, tool)
			entries, err := fs.ReadDir(fsys, ".")
			require.NoError(t, err)
			var names []string
			for _, e := range entries {
				assert.False(t, e.IsDir())
				names = append(names, e.Name())
			}
			slices.Sort(names)
			assert.Equal(t, want[kind], names, "%s %s", d, tool)
		}
	}
	_, err := Migrations(lease.SQLite, "flyway")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnknownMigrationTool)
	assert.Contains(t, err.Error(), `"flyway"`)
}

// sqlStateError mimics a driver error carrying an SQLSTATE.
type sqlStateError struct{ state string }

func (e sqlStateError) Error() string    { return "sqlstate " + e.state }
func (e sqlStateError) SQLState() string { return e.state }

func TestApplyRetriesCreateRace(t *testing.T) {
	t.Parallel()
	race := fmt.Errorf("wrapped: %w", sqlStateError{"23505"})

	// The statement that loses the race once is repeated and Apply succeeds.
	rec := recordingExecer{failAt: 1, err: race}
	require.NoError(t, Apply(context.Background(), &rec, lease.Postgres))
	stmts, err := Statements(lease.Postgres)
	require.NoError(t, err)
	assert.Equal(t, append([]string{stmts[0]}, stmts...), rec.queries)

	// A race error that persists is returned after 1 + 3 attempts.
	var attempts int
	err = Apply(context.Background(), execFunc(func(string) error { attempts++; return race }), lease.Postgres)
	assert.ErrorIs(t, err, race)
	assert.Equal(t, 4, attempts)

	// Other errors, with or without an SQLSTATE, are not retried.
	for _, e := range []error{sqlStateError{"42601"}, errors.New("plain")} {
		attempts = 0
		err = Apply(context.Background(), execFunc(func(string) error { attempts++; return e }), lease.Postgres)
		assert.ErrorIs(t, err, e)
		assert.Equal(t, 1, attempts, "%v", e)
	}
}

type execFunc func(query string) error

func (f execFunc) ExecContext(_ context.Context, query string, _ ...any) (sql.Result, error) {
	if err := f(query); err != nil {
		return nil, err
	}
	return driverResult{}, nil
}

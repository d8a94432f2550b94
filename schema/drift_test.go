package schema

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
)

// normalizeStatement collapses every run of white space to one space. The
// drift check compares statements after this and nothing else, so a change of
// IF NOT EXISTS, of case, or of any token counts as drift.
func normalizeStatement(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// compareStatements reports the first difference between two statement lists.
func compareStatements(label string, want, got []string) error {
	for i := 0; i < len(want) || i < len(got); i++ {
		switch {
		case i >= len(got):
			return fmt.Errorf("%s: statement %d of the DDL is missing:\n  %s", label, i+1, normalizeStatement(want[i]))
		case i >= len(want):
			return fmt.Errorf("%s: statement %d is not in the DDL:\n  %s", label, i+1, normalizeStatement(got[i]))
		}
		if w, g := normalizeStatement(want[i]), normalizeStatement(got[i]); w != g {
			return fmt.Errorf("%s: statement %d differs from the DDL at %q:\n  DDL:       %s\n  migration: %s",
				label, i+1, firstDifference(w, g), w, g)
		}
	}
	return nil
}

// firstDifference shows where two strings start to differ: the migration's
// text from a little before the first differing byte.
func firstDifference(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	start := max(0, i-20)
	return "…" + got[start:min(len(got), i+30)] + "…"
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
	return splitStatements(upText.String()), splitStatements(downText.String()), nil
}

var dropTableRE = regexp.MustCompile(`^DROP TABLE (?:IF EXISTS )?(\w+)$`)

// droppedTables returns the tables a down migration drops; every statement
// must be a DROP TABLE.
func droppedTables(label string, stmts []string) ([]string, error) {
	var tables []string
	for i, s := range stmts {
		m := dropTableRE.FindStringSubmatch(normalizeStatement(s))
		if m == nil {
			return nil, fmt.Errorf("%s: statement %d is not a DROP TABLE: %s", label, i+1, normalizeStatement(s))
		}
		tables = append(tables, m[1])
	}
	return tables, nil
}

// createdTables returns the tables the DDL statements create.
func createdTables(stmts []string) []string {
	var tables []string
	for _, s := range stmts {
		if m := createTableRE.FindStringSubmatch(normalizeStatement(s)); m != nil {
			tables = append(tables, m[1])
		}
	}
	return tables
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// checkDrift compares the DDL with the three migration texts of one dialect.
func checkDrift(ddl, migrateUp, migrateDown, goose string) error {
	ddlStmts := splitStatements(ddl)
	created := createdTables(ddlStmts)
	if len(created) == 0 {
		return errors.New("DDL creates no tables")
	}
	var errs []error
	errs = append(errs, compareStatements("golang-migrate up", ddlStmts, splitStatements(migrateUp)))

	gooseUp, gooseDown, err := parseGoose(goose)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	errs = append(errs, compareStatements("goose Up", ddlStmts, gooseUp))

	for _, down := range []struct {
		label string
		stmts []string
	}{{"golang-migrate down", splitStatements(migrateDown)}, {"goose Down", gooseDown}} {
		dropped, err := droppedTables(down.label, down.stmts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(dropped) != len(created) || !sameSet(dropped, created) {
			errs = append(errs, fmt.Errorf("%s drops %v, the DDL creates %v", down.label, dropped, created))
		}
	}
	return errors.Join(errs...)
}

type migrationTexts struct{ ddl, up, down, goose string }

func readMigrationTexts(t *testing.T, dialect lease.Dialect) migrationTexts {
	t.Helper()
	ddl, err := DDL(dialect)
	require.NoError(t, err)
	mfs, err := Migrations(dialect, "golang-migrate")
	require.NoError(t, err)
	gfs, err := Migrations(dialect, "goose")
	require.NoError(t, err)
	read := func(fsys fs.FS, name string) string {
		b, err := fs.ReadFile(fsys, name)
		require.NoError(t, err)
		return string(b)
	}
	return migrationTexts{
		ddl:   ddl,
		up:    read(mfs, "000001_create_lock_tables.up.sql"),
		down:  read(mfs, "000001_create_lock_tables.down.sql"),
		goose: read(gfs, "00001_create_lock_tables.sql"),
	}
}

// TestMigrationsMatchDDL is the drift test: the up migrations of both tools
// hold exactly the statements of the embedded DDL, and the down migrations
// drop exactly the tables the DDL creates.
func TestMigrationsMatchDDL(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		m := readMigrationTexts(t, d)
		assert.NoError(t, checkDrift(m.ddl, m.up, m.down, m.goose), "dialect %s: edit schema/sql/%s.sql and schema/migrations/%s/ together", d, d, d)
	}
}

// TestDriftCheckCatchesEdits proves that checkDrift notices an edit to one
// file that is not made to the others, and ignores pure re-indentation.
func TestDriftCheckCatchesEdits(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		m := readMigrationTexts(t, d)
		edit := func(src, old, repl string) string {
			t.Helper()
			out := strings.Replace(src, old, repl, 1)
			require.NotEqual(t, src, out, "%s: mutation %q -> %q did not apply", d, old, repl)
			return out
		}
		mustDrift := func(name string, mm migrationTexts) {
			t.Helper()
			assert.Error(t, checkDrift(mm.ddl, mm.up, mm.down, mm.goose), "%s: drift not detected: %s", d, name)
		}

		mm := m
		mm.ddl = edit(m.ddl, "generation", "generations")
		mustDrift("column renamed in DDL only", mm)

		mm = m
		mm.up = edit(m.up, "NOT NULL DEFAULT 0", "NULL DEFAULT 0")
		mustDrift("nullability changed in golang-migrate up only", mm)

		mm = m
		mm.goose = edit(m.goose, RequestTable+" (", RequestTable+"_v2 (")
		mustDrift("table renamed in goose Up only", mm)

		mm = m
		mm.up = edit(m.up, "CREATE TABLE IF NOT EXISTS", "CREATE TABLE")
		mustDrift("IF NOT EXISTS removed in golang-migrate up only", mm)

		mm = m
		last := strings.LastIndex(m.up, "CREATE ")
		mm.up = m.up[:last]
		mustDrift("last statement removed from golang-migrate up", mm)

		mm = m
		mm.ddl = m.ddl + "\nCREATE TABLE IF NOT EXISTS rowlease_extra (x INT);\n"
		mustDrift("table added to DDL only", mm)

		mm = m
		mm.down = edit(m.down, "DROP TABLE IF EXISTS "+RequestTable+";\n", "")
		mustDrift("table missing from golang-migrate down", mm)

		mm = m
		mm.goose = m.goose + "DROP TABLE IF EXISTS rowlease_other;\n"
		mustDrift("extra table in goose Down", mm)

		mm = m
		mm.goose = edit(m.goose, "-- +goose Down\n", "")
		mustDrift("goose Down section missing", mm)

		mm = m
		mm.down = edit(m.down, "DROP TABLE IF EXISTS "+SessionTable+";", "DELETE FROM "+SessionTable+";")
		mustDrift("golang-migrate down deletes instead of dropping", mm)

		mm = m
		var reindented strings.Builder
		for line := range strings.Lines(m.up) {
			if !strings.HasPrefix(strings.TrimSpace(line), "--") {
				line = strings.ReplaceAll(strings.ReplaceAll(line, "    ", "\t"), " (", "\n  (")
			}
			reindented.WriteString(line)
		}
		mm.up = reindented.String()
		require.NotEqual(t, m.up, mm.up)
		assert.NoError(t, checkDrift(mm.ddl, mm.up, mm.down, mm.goose), "%s: re-indentation must not count as drift", d)
	}
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

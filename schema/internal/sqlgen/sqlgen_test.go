package sqlgen

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fold folds the given up files and returns the statements of the DDL.
func fold(t *testing.T, ups ...string) ([]string, error) {
	t.Helper()
	m := newSchema()
	for _, up := range ups {
		if err := m.apply(up); err != nil {
			return nil, err
		}
	}
	return m.create(), nil
}

func TestFold(t *testing.T) {
	t.Parallel()
	const v1 = `-- a comment
CREATE TABLE IF NOT EXISTS a (
    id INTEGER NOT NULL,
    CONSTRAINT a_pk PRIMARY KEY (id),
    CONSTRAINT a_ck CHECK (id > 0)
);

CREATE TABLE b (
    id   TEXT NOT NULL,
    CONSTRAINT b_pk PRIMARY KEY (id)
) STRICT;

CREATE INDEX IF NOT EXISTS b_idx
    ON b (id);
`
	// Columns after the columns, a constraint in the place of the one the
	// statement drops, another after the constraints of its kind.
	const v2 = `ALTER TABLE a
    ADD COLUMN IF NOT EXISTS longer_name VARCHAR(10) NULL,
    DROP CONSTRAINT a_ck,
    ADD CONSTRAINT a_ck CHECK (id IN (1, 2)),
    ADD CONSTRAINT a_uq UNIQUE (longer_name);
`
	// The rebuild of a table keeps its place, and its indexes go with it.
	const v3 = `CREATE TABLE a_new (
    id INTEGER NOT NULL,
    CONSTRAINT a_pk PRIMARY KEY (id)
);
INSERT INTO a_new (id) SELECT id FROM a;
DROP TABLE a;
PRAGMA legacy_alter_table = ON;
ALTER TABLE a_new RENAME TO a;
CREATE UNIQUE INDEX a_idx
    ON a (id);
`
	got, err := fold(t, v1, v2)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"CREATE TABLE IF NOT EXISTS a (\n" +
			"    id          INTEGER     NOT NULL,\n" +
			"    longer_name VARCHAR(10) NULL,\n" +
			"    CONSTRAINT a_pk PRIMARY KEY (id),\n" +
			"    CONSTRAINT a_uq UNIQUE (longer_name),\n" +
			"    CONSTRAINT a_ck CHECK (id IN (1, 2))\n)",
		"CREATE TABLE IF NOT EXISTS b (\n    id TEXT NOT NULL,\n    CONSTRAINT b_pk PRIMARY KEY (id)\n) STRICT",
		"CREATE INDEX IF NOT EXISTS b_idx\n    ON b (id)",
	}, got)

	// A column dropped, one that is not there dropped IF EXISTS; a
	// column added by the same statement goes after the others.
	const v4 = `ALTER TABLE a
    DROP CONSTRAINT a_uq,
    DROP COLUMN longer_name;
ALTER TABLE a DROP COLUMN IF EXISTS gone;
ALTER TABLE b
    ADD COLUMN n INTEGER NOT NULL DEFAULT 0,
    DROP COLUMN IF EXISTS n2;
`
	got, err = fold(t, v1, v2, v4)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"CREATE TABLE IF NOT EXISTS a (\n" +
			"    id INTEGER NOT NULL,\n" +
			"    CONSTRAINT a_pk PRIMARY KEY (id),\n" +
			"    CONSTRAINT a_ck CHECK (id IN (1, 2))\n)",
		"CREATE TABLE IF NOT EXISTS b (\n    id TEXT    NOT NULL,\n    n  INTEGER NOT NULL DEFAULT 0,\n    CONSTRAINT b_pk PRIMARY KEY (id)\n) STRICT",
		"CREATE INDEX IF NOT EXISTS b_idx\n    ON b (id)",
	}, got)

	got, err = fold(t, v1, v2, v3)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"CREATE TABLE IF NOT EXISTS a (\n    id INTEGER NOT NULL,\n    CONSTRAINT a_pk PRIMARY KEY (id)\n)",
		"CREATE UNIQUE INDEX IF NOT EXISTS a_idx\n    ON a (id)",
		"CREATE TABLE IF NOT EXISTS b (\n    id TEXT NOT NULL,\n    CONSTRAINT b_pk PRIMARY KEY (id)\n) STRICT",
		"CREATE INDEX IF NOT EXISTS b_idx\n    ON b (id)",
	}, got)
}

// TestFoldRedefinesKey: a unique key defined again with one more column,
// as migration 6 does: in MySQL's ALTER TABLE by DROP INDEX and ADD UNIQUE
// KEY under the same name, on SQLite by DROP INDEX [IF EXISTS] and CREATE
// UNIQUE INDEX. The key keeps its place among the table's keys, the index
// its place among the indexes.
func TestFoldRedefinesKey(t *testing.T) {
	t.Parallel()
	const mysql1 = `CREATE TABLE a (
    id INTEGER NOT NULL,
    b  INTEGER NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY a_b_uq (b),
    KEY a_id_b_idx (id, b)
) ENGINE=InnoDB;
`
	const mysql2 = `ALTER TABLE a
    ADD COLUMN n INT NOT NULL DEFAULT 0,
    DROP INDEX a_b_uq,
    ADD UNIQUE KEY a_b_uq (b, n);
`
	got, err := fold(t, mysql1, mysql2)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"CREATE TABLE IF NOT EXISTS a (\n" +
			"    id INTEGER NOT NULL,\n" +
			"    b  INTEGER NOT NULL,\n" +
			"    n  INT     NOT NULL DEFAULT 0,\n" +
			"    PRIMARY KEY (id),\n" +
			"    UNIQUE KEY a_b_uq (b, n),\n" +
			"    KEY a_id_b_idx (id, b)\n) ENGINE=InnoDB",
	}, got)

	// A key dropped and not added again is gone.
	got, err = fold(t, mysql1, "ALTER TABLE a\n    DROP INDEX a_id_b_idx;\n")
	require.NoError(t, err)
	assert.Equal(t, []string{
		"CREATE TABLE IF NOT EXISTS a (\n" +
			"    id INTEGER NOT NULL,\n" +
			"    b  INTEGER NOT NULL,\n" +
			"    PRIMARY KEY (id),\n" +
			"    UNIQUE KEY a_b_uq (b)\n) ENGINE=InnoDB",
	}, got)

	const sqlite1 = `CREATE TABLE a (
    id INTEGER NOT NULL,
    b  INTEGER NOT NULL
);

CREATE UNIQUE INDEX a_b_uq
    ON a (b);

CREATE INDEX a_id_idx
    ON a (id);

CREATE INDEX a_gone_idx
    ON a (id, b);
`
	const sqlite2 = `ALTER TABLE a ADD COLUMN n INTEGER NOT NULL DEFAULT 0;

DROP INDEX IF EXISTS a_b_uq;

DROP INDEX IF EXISTS a_never_idx;

DROP INDEX a_gone_idx;

CREATE UNIQUE INDEX a_b_uq
    ON a (b, n);
`
	got, err = fold(t, sqlite1, sqlite2)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"CREATE TABLE IF NOT EXISTS a (\n" +
			"    id INTEGER NOT NULL,\n" +
			"    b  INTEGER NOT NULL,\n" +
			"    n  INTEGER NOT NULL DEFAULT 0\n)",
		"CREATE UNIQUE INDEX IF NOT EXISTS a_b_uq\n    ON a (b, n)",
		"CREATE INDEX IF NOT EXISTS a_id_idx\n    ON a (id)",
	}, got)

	// A dropped index no longer holds on to its columns.
	_, err = fold(t, sqlite1, sqlite2, "DROP INDEX a_b_uq;\nDROP INDEX a_id_idx;\nALTER TABLE a DROP COLUMN n;\n")
	require.NoError(t, err)
}

// TestFoldRefuses: a statement the fold does not understand, or one that
// cannot apply, stops the generator with an error naming it, instead of a
// DDL that silently misses what it does.
func TestFoldRefuses(t *testing.T) {
	t.Parallel()
	const base = "CREATE TABLE a (\n    id INTEGER NOT NULL\n);\n"
	for _, c := range []struct{ up, wants string }{
		{"UPDATE a SET id = 1;", "UPDATE a SET id = 1: statement not understood"},
		{"ALTER TABLE a DROP id;", "DROP id: ALTER TABLE clause not understood"},
		{"ALTER TABLE a DROP COLUMN x;", "DROP COLUMN x: no such column"},
		{"ALTER TABLE a ADD CONSTRAINT a_pk PRIMARY KEY (id);\nALTER TABLE a DROP COLUMN id;", "a_pk uses the column"},
		{"CREATE INDEX i\n    ON a (id);\nALTER TABLE a DROP COLUMN id;", "i uses the column"},
		{"ALTER TABLE a ADD COLUMN id TEXT;", "the column exists already"},
		{"ALTER TABLE b ADD COLUMN x TEXT;", "no table b"},
		{"ALTER TABLE a DROP CONSTRAINT a_ck;", "no such constraint"},
		{"CREATE TABLE a (\n    id INTEGER\n);", "the table exists already"},
		{"CREATE TABLE c (id INTEGER);", "statement not understood"},
		{"CREATE TABLE c (\n    id INTEGER);", "one definition per line"},
		{"CREATE INDEX i\n    ON b (id);", "no table b"},
		{"DROP TABLE b;", "no table b"},
		{"DROP INDEX i;", "no index i"},
		{"CREATE INDEX i\n    ON a (id);\nDROP INDEX i;\nDROP INDEX i;", "no index i"},
		{"ALTER TABLE a DROP INDEX k;", "DROP INDEX k: no such key"},
		{"ALTER TABLE a ADD CONSTRAINT a_ck CHECK (id > 0);\nALTER TABLE a DROP INDEX a_ck;", "no such key"},
		{"ALTER TABLE a DROP INDEX IF EXISTS k;", "ALTER TABLE clause not understood"},
	} {
		_, err := fold(t, base, c.up)
		require.Error(t, err, c.up)
		assert.Contains(t, err.Error(), c.wants, c.up)
	}
}

func TestReadMigrations(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	dir := MigrateDir("sqlite") + "/"
	ok := fstest.MapFS{
		dir + "000001_one.up.sql": file("CREATE TABLE a (\n    id INTEGER\n);\n"), dir + "000001_one.down.sql": file("DROP TABLE a;\n"),
		dir + "000002_two.up.sql": file("ALTER TABLE a ADD COLUMN b TEXT;\n"), dir + "000002_two.down.sql": file("-- none\n"),
	}
	migs, err := ReadMigrations(ok, "sqlite")
	require.NoError(t, err)
	require.Len(t, migs, 2)
	assert.Equal(t, Migration{Version: 2, Name: "two", UpFile: "000002_two.up.sql", DownFile: "000002_two.down.sql",
		Up: "ALTER TABLE a ADD COLUMN b TEXT;\n", Down: "-- none\n"}, migs[1])
	assert.Equal(t, "00002_two.sql", GooseName(migs[1]))
	assert.Equal(t, "-- Code generated from the golang-migrate files 000002_two.{up,down}.sql. DO NOT EDIT.\n\n"+
		"-- +goose Up\nALTER TABLE a ADD COLUMN b TEXT;\n\n-- +goose Down\n-- none\n", Goose(migs[1]))

	for name, c := range map[string]struct {
		drop, add string
		wants     string
	}{
		"gap":          {drop: dir + "000001_one.up.sql", wants: "needs both an up and a down file"},
		"missing one":  {drop: dir + "000001_one.down.sql", wants: "needs both an up and a down file"},
		"stray file":   {add: dir + "README.md", wants: "README.md is not a migration file"},
		"two names":    {add: dir + "000002_other.up.sql", wants: "migration 2 has two names"},
		"version hole": {add: dir + "000004_four.up.sql", wants: "migration 3 is missing"},
	} {
		fsys := fstest.MapFS{}
		for k, v := range ok {
			if k != c.drop {
				fsys[k] = v
			}
		}
		if c.add != "" {
			fsys[c.add] = file("")
		}
		_, err := ReadMigrations(fsys, "sqlite")
		require.Error(t, err, name)
		assert.True(t, strings.Contains(err.Error(), c.wants), "%s: %v", name, err)
	}
}

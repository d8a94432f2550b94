package schema

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// olderApply sets up db as Apply did before migration 2: the statements of
// migration 1, which were the DDL then.
func olderApply(t *testing.T, d lease.Dialect) func(db *sqlx.DB) { return applyOf(t, d, 1) }

// applyOf sets up db as the Apply of the given version did: the statements
// of migrations 1 to version, run one at a time.
func applyOf(t *testing.T, d lease.Dialect, version int) func(db *sqlx.DB) {
	return func(db *sqlx.DB) {
		for v := 1; v <= version; v++ {
			require.NoError(t, ApplyScript(t.Context(), db, migrationScript(t, d, "golang-migrate", v, true)))
		}
	}
}

// TestApplyUpgradesOlderTables: Apply, called by several sessions at once
// on the tables of an older Apply (of migrations 1, 2, 3, 5 and 6)
// with rows in them, upgrades them to exactly the schema of a fresh Apply,
// keeps every row, and afterwards runs nothing but the DDL's CREATE … IF
// NOT EXISTS statements.
func TestApplyUpgradesOlderTables(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		for _, version := range []int{1, 2, 3, 5, 6} {
			t.Run(fmt.Sprintf("from version %d", version), func(t *testing.T) {
				testApplyUpgradesFrom(t, d, version)
			})
		}
	})
}

func testApplyUpgradesFrom(t *testing.T, d lease.Dialect, version int) {
	{
		ctx := t.Context()
		want := freshDump(t, d, applyDDL(t, d))
		older := freshDump(t, d, applyOf(t, d, version))
		require.NotEqual(t, want, older)

		db := testdb.Open(t, d)
		applyOf(t, d, version)(db)
		seedRows(t, db, d)
		rows := tableRows(t, db)

		const workers = 8
		errs := make(chan error, workers)
		for range workers {
			go func() { errs <- Apply(ctx, db, d) }()
		}
		for range workers {
			require.NoError(t, <-errs, "concurrent Apply on older tables")
		}
		requireSameSchema(t, "a fresh Apply", want, "upgraded by Apply", dumpSchema(t, db, d))
		require.Equal(t, rows, tableRows(t, db), "the upgrade changed the rows")

		rec := &recordingDB{db: db}
		require.NoError(t, Apply(ctx, rec, d))
		stmts, err := Statements(d)
		require.NoError(t, err)
		assert.Equal(t, stmts, rec.execs, "Apply on upgraded tables must run the DDL only")
		assert.Len(t, rec.queries, len(steps), "one catalog query per upgrade step")
		requireStartedAllowed(t, db)
		requireQueueStatusesAllowed(t, db)
		requireMigration6Columns(t, db)
		requireMigration7Columns(t, db, d)
	}
}

// TestApplyUpgradesThroughEveryHandle: the upgrade works through each kind
// of handle Apply documents, including the caller's own transaction.
func TestApplyUpgradesThroughEveryHandle(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		ctx := t.Context()
		want := freshDump(t, d, applyDDL(t, d))
		handles := []struct {
			name  string
			apply func(db *sqlx.DB) error
		}{
			{"*sqlx.DB", func(db *sqlx.DB) error { return Apply(ctx, db, d) }},
			{"*sql.DB", func(db *sqlx.DB) error { return Apply(ctx, db.DB, d) }},
			{"*sql.Conn", func(db *sqlx.DB) error {
				conn, err := db.Conn(ctx)
				require.NoError(t, err)
				defer conn.Close()
				return Apply(ctx, conn, d)
			}},
			{"*sqlx.Conn", func(db *sqlx.DB) error {
				conn, err := db.Connx(ctx)
				require.NoError(t, err)
				defer conn.Close()
				return Apply(ctx, conn, d)
			}},
			{"*sql.Tx", func(db *sqlx.DB) error {
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				if err := Apply(ctx, tx, d); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			}},
			{"*sqlx.Tx", func(db *sqlx.DB) error {
				tx, err := db.BeginTxx(ctx, nil)
				require.NoError(t, err)
				if err := Apply(ctx, tx, d); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			}},
		}
		for _, h := range handles {
			db := testdb.Open(t, d)
			olderApply(t, d)(db)
			require.NoError(t, h.apply(db), h.name)
			requireSameSchema(t, "a fresh Apply", want, "upgraded through "+h.name, dumpSchema(t, db, d))
		}
	})
}

// recordingDB runs statements and queries on db and records them.
type recordingDB struct {
	db      *sqlx.DB
	mu      sync.Mutex
	execs   []string
	queries []string
}

func (r *recordingDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r.mu.Lock()
	r.execs = append(r.execs, query)
	r.mu.Unlock()
	return r.db.ExecContext(ctx, query, args...)
}

func (r *recordingDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	r.mu.Lock()
	r.queries = append(r.queries, query)
	r.mu.Unlock()
	return r.db.QueryContext(ctx, query, args...)
}

// execOnly has ExecContext and nothing else.
type execOnly struct{ db *sqlx.DB }

func (e execOnly) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return e.db.ExecContext(ctx, query, args...)
}

// TestApplyWithoutQueryDoesNotUpgrade pins the documented limit: through
// an Execer without QueryContext Apply cannot see an older table, and
// leaves it as it is, without an error.
func TestApplyWithoutQueryDoesNotUpgrade(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		db := testdb.Open(t, d)
		olderApply(t, d)(db)
		older := dumpSchema(t, db, d)
		require.NoError(t, Apply(t.Context(), execOnly{db}, d))
		// The DDL's CREATE TABLE IF NOT EXISTS adds StepTable, and on
		// PostgreSQL and SQLite its CREATE INDEX IF NOT EXISTS of the
		// request table's status index, whose columns the older table
		// has, adds it; nothing else changes.
		var after []string
		for _, line := range dumpSchema(t, db, d) {
			if strings.Contains(line, StepTable) {
				continue
			}
			if d == lease.MySQL || !strings.Contains(line, RequestStatusUpdatedIndex) {
				after = append(after, line)
			}
		}
		requireSameSchema(t, "the older Apply", older, "after Apply through ExecContext alone", after)
	})
}

// TestApplyUpgradeSQLiteNeedsOneConnection: on SQLite the rebuild must run
// on one connection; through a handle that is not a pool, a connection or
// a transaction Apply refuses with an error that says what to do, and
// changes nothing.
func TestApplyUpgradeSQLiteNeedsOneConnection(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, lease.SQLite)
	olderApply(t, lease.SQLite)(db)
	seedRows(t, db, lease.SQLite)
	older, rows := dumpSchema(t, db, lease.SQLite), tableRows(t, db)

	err := Apply(t.Context(), &recordingDB{db: db}, lease.SQLite)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "schema: upgrade sqlite "+ToolExecutionTable)
	assert.Contains(t, err.Error(), "*schema.recordingDB")
	assert.Contains(t, err.Error(), "run migration 2")
	requireSameSchema(t, "the older Apply", older, "after the refused upgrade", dumpSchema(t, db, lease.SQLite))
	require.Equal(t, rows, tableRows(t, db))
}

// TestApplyUpgradeSQLiteKeepsUserObjects: the SQLite rebuild keeps what
// the user built around the tool-execution table: a view that reads it, a
// trigger on it, rows of another table whose foreign key references it
// (foreign keys enforced, ON DELETE CASCADE), and the connection's
// foreign_keys and legacy_alter_table settings, with legacy_alter_table
// off (the default, under which a view of the dropped table would fail the
// RENAME) and on.
func TestApplyUpgradeSQLiteKeepsUserObjects(t *testing.T) {
	t.Parallel()
	for _, legacy := range []string{"0", "1"} {
		t.Run("legacy_alter_table="+legacy, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := testdb.Open(t, lease.SQLite)
			// One connection, so the PRAGMAs below hold for Apply's connection.
			db.SetMaxOpenConns(1)
			olderApply(t, lease.SQLite)(db)
			for _, s := range []string{
				"PRAGMA foreign_keys = ON",
				"PRAGMA legacy_alter_table = " + legacy,
				"CREATE TABLE app_audit (tool_id TEXT NOT NULL, status TEXT NOT NULL)",
				"CREATE TRIGGER app_tool_audit AFTER INSERT ON rowlease_tool_execution BEGIN INSERT INTO app_audit VALUES (NEW.id, NEW.status); END",
				"CREATE VIEW app_tool_status AS SELECT id, status FROM rowlease_tool_execution",
				"CREATE TABLE app_effect (id TEXT PRIMARY KEY, tool_id TEXT NOT NULL REFERENCES rowlease_tool_execution (id) ON DELETE CASCADE)",
				// The same around the request table, which migration 3 rebuilds.
				"CREATE TABLE app_request_audit (request_id TEXT NOT NULL, status TEXT NOT NULL)",
				"CREATE TRIGGER app_request_audit AFTER INSERT ON rowlease_request BEGIN INSERT INTO app_request_audit VALUES (NEW.id, NEW.status); END",
				"CREATE VIEW app_request_status AS SELECT id, status FROM rowlease_request",
				"CREATE TABLE app_reply (id TEXT PRIMARY KEY, request_id TEXT NOT NULL REFERENCES rowlease_request (id) ON DELETE CASCADE)",
			} {
				_, err := db.ExecContext(ctx, s)
				require.NoError(t, err, s)
			}
			require.NoError(t, insertTool(ctx, db, "t1", StoredProcessing))
			_, err := db.ExecContext(ctx, "INSERT INTO app_effect VALUES ('e1', 't1')")
			require.NoError(t, err)
			require.NoError(t, insertRequest(ctx, db, "r1", StoredSucceeded))
			_, err = db.ExecContext(ctx, "INSERT INTO app_reply VALUES ('p1', 'r1')")
			require.NoError(t, err)

			require.NoError(t, Apply(ctx, db, lease.SQLite))

			requireStartedAllowed(t, db)
			assert.Equal(t, []string{"e1 | t1"}, queryRows(t, db, "SELECT id, tool_id FROM app_effect"),
				"the rows referencing the tool execution must survive the rebuild")
			assert.Contains(t, queryRows(t, db, "SELECT tool_id, status FROM app_audit"), "started-ok | started",
				"the trigger must fire after the rebuild")
			assert.Contains(t, queryRows(t, db, "SELECT id, status FROM app_tool_status"), "started-ok | started",
				"the view must read the rebuilt table")
			requireQueueStatusesAllowed(t, db)
			assert.Equal(t, []string{"p1 | r1"}, queryRows(t, db, "SELECT id, request_id FROM app_reply"),
				"the rows referencing the request must survive the rebuild")
			assert.Contains(t, queryRows(t, db, "SELECT request_id, status FROM app_request_audit"), "req-queued | queued",
				"the trigger on the request table must fire after the rebuild")
			assert.Contains(t, queryRows(t, db, "SELECT id, status FROM app_request_status"), "req-queued | queued",
				"the view must read the rebuilt request table")
			assert.Equal(t, []string{"1"}, queryRows(t, db, "PRAGMA foreign_keys"))
			assert.Equal(t, []string{legacy}, queryRows(t, db, "PRAGMA legacy_alter_table"))
			_, err = db.ExecContext(ctx, "INSERT INTO app_effect VALUES ('e2', 'no-such-tool')")
			require.Error(t, err, "foreign keys must be enforced again")
		})
	}
}

// TestApplyUpgradeSQLiteRollsBack: a rebuild that fails part way leaves
// the older table, its rows and the connection's settings as they were,
// and names the failing statement.
func TestApplyUpgradeSQLiteRollsBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testdb.Open(t, lease.SQLite)
	db.SetMaxOpenConns(1)
	olderApply(t, lease.SQLite)(db)
	seedRows(t, db, lease.SQLite)
	// A leftover table under the rebuild's temporary name makes its first
	// statement fail.
	for _, s := range []string{"PRAGMA foreign_keys = ON", "CREATE TABLE rowlease_tool_execution_new (x INTEGER)"} {
		_, err := db.ExecContext(ctx, s)
		require.NoError(t, err, s)
	}
	older, rows := dumpSchema(t, db, lease.SQLite), tableRows(t, db)

	err := Apply(ctx, db, lease.SQLite)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "schema: upgrade sqlite")
	assert.Contains(t, err.Error(), "CREATE TABLE rowlease_tool_execution_new")
	requireSameSchema(t, "before", older, "after the failed upgrade", dumpSchema(t, db, lease.SQLite))
	require.Equal(t, rows, tableRows(t, db))
	assert.Equal(t, []string{"1"}, queryRows(t, db, "PRAGMA foreign_keys"))

	// Once the cause is gone, Apply completes the upgrade.
	_, err = db.ExecContext(ctx, "DROP TABLE rowlease_tool_execution_new")
	require.NoError(t, err)
	require.NoError(t, Apply(ctx, db, lease.SQLite))
	requireStartedAllowed(t, db)
}

// migration1Statuses are the values the status CHECKs of migration 1
// allow, sorted: the same on both tables.
var migration1Statuses = []string{StoredFailed, StoredProcessing, StoredSucceeded}

// migration3RequestStatuses are the values the request table's status
// CHECK of migration 3 allows, sorted.
var migration3RequestStatuses = []string{StoredFailed, StoredExpired, StoredInterrupted, StoredProcessing, StoredQueued, StoredSucceeded}

// migration6RequestStatuses are the values the request table's status
// CHECK of migrations 4 to 6 allows, sorted: the CHECK that migration 7
// replaces.
var migration6RequestStatuses = []string{StoredCancelled, StoredFailed, StoredExpired, StoredInterrupted, StoredProcessing, StoredQueued, StoredSucceeded}

// TestUpgradeStepsReadOldChecks: each upgrade step that finds an older
// table by its status CHECK reads, from its down file, the CHECK of the
// migration before it, on every dialect; the others find it by a column.
func TestUpgradeStepsReadOldChecks(t *testing.T) {
	t.Parallel()
	want := map[int][]string{2: migration1Statuses, 3: migration1Statuses, 4: migration3RequestStatuses, 7: migration6RequestStatuses}
	var versions []int
	byVersion := map[int]step{}
	for _, s := range steps {
		versions = append(versions, s.version)
		byVersion[s.version] = s
	}
	require.Equal(t, []int{2, 3, 4, 5, 6, 7}, versions, "one step per migration after 1, in order")
	// Migrations 5 and 6 change no CHECK: the column that 5 drops, and
	// those that 6 adds, find an older table.
	m5, m6 := byVersion[5], byVersion[6]
	assert.Equal(t, []string{"", RequestTable, oldStepsColumn}, []string{m5.check, m5.table, m5.column})
	assert.Nil(t, m5.added)
	assert.Equal(t, []string{"", RequestTable, ""}, []string{m6.check, m6.table, m6.column})
	assert.Equal(t, []tableColumn{{RequestTable, ColAgent}, {ToolExecutionTable, ColOccurrence}}, m6.added)
	// Migration 7 changes the request table's CHECK, as 4 does.
	m7 := byVersion[7]
	assert.Equal(t, []string{requestStatusCheck, RequestTable, ""}, []string{m7.check, m7.table, m7.column})
	assert.Nil(t, m7.added)
	for _, d := range dialects {
		for v, statuses := range want {
			got, err := byVersion[v].oldStatuses(d.String())
			require.NoError(t, err, "%s step %d", d, v)
			assert.Equal(t, statuses, got, "%s step %d", d, v)
		}
	}
}

func TestIsMigration1StatusCheck(t *testing.T) {
	t.Parallel()
	cases := []struct {
		def  string
		want bool
	}{
		{"`status` in ('processing','success','error')", true},                                           // MariaDB
		{`(` + "`status`" + ` in (_utf8mb4\'processing\',_utf8mb4\'success\',_utf8mb4\'error\'))`, true}, // MySQL 8
		{"CHECK (((status)::text = ANY ((ARRAY['processing'::character varying, 'success'::character varying, 'error'::character varying])::text[])))", true},
		{"CHECK (status IN ('processing', 'success', 'error'))", true},
		{"CHECK (STATUS IN ('error', 'processing', 'success'))", true},
		{"`status` in ('processing','started','success','error')", false},
		{"CHECK (status IN ('processing', 'started', 'success', 'error'))", false},
		{"CHECK (status IN ('processing', 'success', 'error', 'cancelled'))", false},
		{"CHECK (status IN ('processing', 'success'))", false},
		{"CHECK (state IN ('processing', 'success', 'error'))", false},
		{"", false},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, isStatusCheckOf(c.def, migration1Statuses), c.def)
	}
	// The request CHECK of migration 3, which migration 4 replaces.
	for def, want := range map[string]bool{
		"`status` in ('queued','processing','success','error','interrupted','expired')":                                  true,
		"CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'expired'))":                       true,
		"CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'cancelled', 'expired'))":          false,
		"CHECK (((status)::text = ANY ((ARRAY['queued'::character varying, 'processing'::character varying])::text[])))": false,
	} {
		assert.Equal(t, want, isStatusCheckOf(def, migration3RequestStatuses), def)
	}
	// The request CHECK of migrations 4 to 6, which migration 7 replaces.
	for def, want := range map[string]bool{
		"`status` in ('queued','processing','success','error','interrupted','cancelled','expired')":                        true,
		"CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'cancelled', 'expired'))":            true,
		"CHECK (status IN ('queued', 'processing', 'waiting', 'success', 'error', 'interrupted', 'cancelled', 'expired'))": false,
		"CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'expired'))":                         false,
	} {
		assert.Equal(t, want, isStatusCheckOf(def, migration6RequestStatuses), def)
	}
}

func TestConstraintClause(t *testing.T) {
	t.Parallel()
	const name = "rowlease_tool_execution_status_ck"
	cases := []struct {
		sql, want string
		ok        bool
	}{
		{"CREATE TABLE t (a TEXT, CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('a)', 'b')), CONSTRAINT x CHECK (1))",
			"CHECK (status IN ('a)', 'b'))", true},
		{"CREATE TABLE t (CONSTRAINT \"rowlease_tool_execution_status_ck\" check(status IN ('it''s', ')')))",
			"check(status IN ('it''s', ')'))", true},
		{"CREATE TABLE t (constraint rowlease_tool_execution_status_ck\n  CHECK\n (status <> 'x'))", "CHECK\n (status <> 'x')", true},
		{"CREATE TABLE t (CONSTRAINT rowlease_tool_execution_status_ck_v2 CHECK (1))", "", false},
		{"CREATE TABLE t (CONSTRAINT rowlease_tool_execution_status_ck UNIQUE (a))", "", false},
		{"CREATE TABLE t (CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('a')", "", false},
		{"CREATE TABLE t (a TEXT)", "", false},
	}
	for _, c := range cases {
		got, ok := constraintClause(c.sql, name)
		assert.Equal(t, c.ok, ok, c.sql)
		assert.Equal(t, c.want, got, c.sql)
	}
}

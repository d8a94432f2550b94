package schema

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/rowlease/rowlease/schema/internal/sqlscript"
)

// This file brings tables made by an earlier version of this package up to
// the current DDL, for Apply. There are six such changes so far:
// migration 2 lets a tool execution have status 'started', migration 3
// gives the request table the columns and statuses of the queue,
// interrupts and retention, migration 4 its recorded steps and status
// 'cancelled', migration 5 moves the recorded steps into a table of their
// own (rowlease_step), migration 6 gives requests their agent and
// metadata and counts identical tool calls (occurrence, in the call's
// unique key), and migration 7 lets a request be 'waiting' for a person's
// answer, with the columns of its open question. A table that an older
// Apply (or the migrations before) set up still has the status CHECK of
// the migration before (1 for migrations 2 and 3, 3 for migration 4, 4
// for migration 7: 5 and 6 keep it); for the migrations that change no
// CHECK, it still has the column that the migration drops (5: steps) or
// lacks one that it adds (6: agent, occurrence). upgrade finds that CHECK
// or column in the catalog and only then runs the statements of the
// migration's golang-migrate up file, the same statements that users of
// golang-migrate and goose run.

// step is one upgrade: the migration that changes one table. What the
// step runs, and the CHECK it finds an older table by, are read from the
// migration's golang-migrate files: the up file is run, and the down file
// restores the CHECK of the migration before (oldStatuses).
type step struct {
	version int
	file    string // the embedded golang-migrate up file
	table   string
	check   string // the name of the table's status CHECK; "" when column or added finds the older table
	column  string // a column that the table has only before the step (with check "")
	// added: columns that the step adds, each to an existing table; the
	// tables are older while one of them lacks its column (with check and
	// column ""). A table that does not exist yet is not older: the DDL
	// creates it as it is now.
	added []tableColumn
	what  string // what the migration does, for errors
	// exclusive: the up file runs on one connection, in one transaction
	// where the server has them, with other upgrading processes kept out
	// until it is done (see runExclusive). The other steps, one ALTER
	// TABLE each on MySQL and PostgreSQL, are atomic on their own; on
	// SQLite every step runs so.
	exclusive bool
}

// tableColumn names a column of a table.
type tableColumn struct{ table, column string }

// oldStepsColumn is the request table's column of recorded steps, which
// migration 4 adds and migration 5 moves into StepTable and drops.
const oldStepsColumn = "steps"

// steps are the upgrades, in order. Each one is run when its table still
// has the status CHECK of the migration before it, or the column that the
// migration drops, or lacks a column that the migration adds.
var steps = []step{
	{version: 2, file: "000002_tool_execution_started.up.sql", table: ToolExecutionTable,
		check: "rowlease_tool_execution_status_ck", what: "to allow status " + `"` + StoredStarted + `"`},
	{version: 3, file: "000003_request_queue.up.sql", table: RequestTable,
		check: "rowlease_request_status_ck", what: "for queued and interrupted requests and retention"},
	{version: 4, file: "000004_request_steps.up.sql", table: RequestTable,
		check: "rowlease_request_status_ck", what: "for recorded steps and cancelled requests"},
	{version: 5, file: "000005_step_journal.up.sql", table: RequestTable,
		column: oldStepsColumn, what: "to move the recorded steps into " + StepTable, exclusive: true},
	// Detected by both columns: on MySQL, whose statements commit one by
	// one, tables that an interrupted upgrade left with only one of them
	// are still older, and the file then fails on the column it finds,
	// changing nothing, rather than leaving the old unique key in place.
	{version: 6, file: "000006_agent_metadata_occurrence.up.sql", table: RequestTable,
		added: []tableColumn{{RequestTable, ColAgent}, {ToolExecutionTable, ColOccurrence}},
		what:  "for agents, metadata and repeated tool calls", exclusive: true},
	// Found by its CHECK, as migration 4: it changes the status CHECK, and
	// on SQLite rebuilds the table (triggers created again), which the
	// steps found by a column do not.
	{version: 7, file: "000007_request_wait.up.sql", table: RequestTable,
		check: "rowlease_request_status_ck", what: "for requests waiting for an answer"},
}

// migrationFile returns the text of the step's golang-migrate up or down
// file for dialect.
func (s step) migrationFile(dialect string, up bool) (string, error) {
	name := s.file
	if !up {
		name = strings.TrimSuffix(name, ".up.sql") + ".down.sql"
	}
	b, err := migrationFiles.ReadFile("migrations/" + dialect + "/migrate/" + name)
	if err != nil {
		// Unreachable unless the embedded files are missing.
		return "", fmt.Errorf("schema: read embedded %s migration %d: %w", dialect, s.version, err)
	}
	return string(b), nil
}

// oldStatuses returns the values that the table's status CHECK allows
// before the step, sorted: those of the CHECK that the step's down file
// restores.
func (s step) oldStatuses(dialect string) ([]string, error) {
	down, err := s.migrationFile(dialect, false)
	if err != nil {
		return nil, err
	}
	def, ok := constraintClause(down, s.check)
	if !ok {
		// Unreachable unless the embedded files lack the CHECK.
		return nil, fmt.Errorf("schema: the down file of %s migration %d restores no CHECK %s", dialect, s.version, s.check)
	}
	return statusLiterals(def), nil
}

// queryer reads rows. *sql.DB, *sql.Tx, *sql.Conn and their sqlx forms have
// it; Apply upgrades older tables only through a value that has it.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// sqliteConn is one connection (or one transaction) that both runs
// statements and reads rows: the upgrade's on SQLite, and of the exclusive
// steps elsewhere.
type sqliteConn interface {
	Execer
	queryer
}

// columnsQuery returns the catalog query that reads the columns of the
// tables, one row "table.column" each; a table that does not exist has
// none. The names are constants of this package, never input.
func columnsQuery(dialect string, tables ...string) string {
	quoted := make([]string, len(tables))
	for i, t := range tables {
		quoted[i] = "'" + t + "'"
	}
	switch dialect {
	case "postgres":
		// to_regclass finds each table as the status CHECK query does.
		return `SELECT t.name || '.' || a.attname
FROM (VALUES (` + strings.Join(quoted, "), (") + `)) AS t(name)
JOIN pg_attribute a ON a.attrelid = to_regclass(t.name)
WHERE a.attnum > 0 AND NOT a.attisdropped`
	case "mysql":
		return `SELECT CONCAT(TABLE_NAME, '.', COLUMN_NAME) FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (` + strings.Join(quoted, ", ") + `)`
	}
	selects := make([]string, len(tables))
	for i, t := range tables {
		selects[i] = `SELECT '` + t + `.' || name FROM pragma_table_info('` + t + `')`
	}
	return strings.Join(selects, "\nUNION ALL\n")
}

// tableColumns reads which of the tables exist and which columns they
// have, in one catalog query: the set of "table" and "table.column",
// lower-cased (the servers compare names without case).
func tableColumns(ctx context.Context, q queryer, dialect string, tables ...string) (map[string]bool, error) {
	rows, err := queryStrings(ctx, q, columnsQuery(dialect, tables...))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, r := range rows {
		r = strings.ToLower(r)
		out[r] = true
		table, _, _ := strings.Cut(r, ".")
		out[table] = true
	}
	return out, nil
}

// statusCheckQuery returns the catalog query that reads the definition of
// a table's status CHECK (on SQLite: the whole CREATE TABLE text, from
// which constraintClause cuts it). The names are constants of this
// package, never input.
func (s step) statusCheckQuery(dialect string) string {
	switch dialect {
	case "postgres":
		// to_regclass resolves the name through search_path as the DDL's
		// CREATE TABLE did; pg_get_constraintdef prints the CHECK as the
		// server keeps it, e.g. CHECK (((status)::text = ANY ((ARRAY['processing'::...]).
		return `SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
WHERE c.conrelid = to_regclass('` + s.table + `')
AND c.conname = '` + s.check + `' AND c.contype = 'c'`
	case "mysql":
		// MySQL's CHECK_CONSTRAINTS has no table_name column (MariaDB's
		// has): TABLE_CONSTRAINTS ties the constraint to its table on both.
		return `SELECT cc.CHECK_CLAUSE FROM information_schema.TABLE_CONSTRAINTS tc
JOIN information_schema.CHECK_CONSTRAINTS cc
ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = tc.CONSTRAINT_NAME
WHERE tc.TABLE_SCHEMA = DATABASE() AND tc.TABLE_NAME = '` + s.table + `'
AND tc.CONSTRAINT_TYPE = 'CHECK' AND tc.CONSTRAINT_NAME = '` + s.check + `'`
	}
	return `SELECT sql FROM sqlite_master
WHERE type = 'table' AND name = '` + s.table + `' COLLATE NOCASE AND sql IS NOT NULL`
}

// sqliteTriggersQuery reads the CREATE TRIGGER texts of the table.
func (s step) sqliteTriggersQuery() string {
	return `SELECT sql FROM sqlite_master
WHERE type = 'trigger' AND tbl_name = '` + s.table + `' COLLATE NOCASE AND sql IS NOT NULL
ORDER BY name`
}

// upgrade runs, in order, each migration whose table still has the status
// CHECK of the migration before it, or the column the migration drops, or
// lacks a column the migration adds. dialect is canonical ("mysql",
// "postgres" or "sqlite"). Through an Execer that cannot read rows it does nothing: it
// cannot tell an older table from a current one.
func upgrade(ctx context.Context, db Execer, dialect string) error {
	q, ok := db.(queryer)
	if !ok {
		return nil
	}
	for _, s := range steps {
		if err := s.run(ctx, db, q, dialect); err != nil {
			return err
		}
	}
	return nil
}

func (s step) run(ctx context.Context, db Execer, q queryer, dialect string) error {
	old, err := s.isOlder(ctx, q, dialect)
	if err != nil {
		return fmt.Errorf("schema: upgrade %s: read %s: %w", dialect, s.finds(), err)
	}
	if !old {
		return nil
	}
	script, err := s.migrationFile(dialect, true)
	if err != nil {
		return err
	}
	if dialect == "sqlite" || s.exclusive {
		err = s.runExclusive(ctx, db, dialect, script)
	} else {
		// One ALTER TABLE (and on PostgreSQL a CREATE INDEX IF NOT
		// EXISTS): the ALTER is atomic on its own. Two processes that both
		// saw the old CHECK run it one after the other (the table lock
		// orders them); the second one fails, having changed nothing, or
		// (PostgreSQL, migration 3) finds everything there.
		err = ApplyScript(ctx, db, script)
		if err != nil && dialect == "mysql" {
			// The other process upgraded the table while this one waited
			// for its lock: check again before reporting an error.
			if again, qerr := s.isOlder(ctx, q, dialect); qerr == nil && !again {
				err = nil
			}
		}
	}
	if err != nil {
		return fmt.Errorf("schema: upgrade %s %s %s (migration %d): %w", dialect, s.table, s.what, s.version, err)
	}
	return nil
}

// isOlder reports whether the table is as the migration before the step
// left it: it has the status CHECK of that migration, or the column that
// the step drops, or lacks a column that the step adds.
func (s step) isOlder(ctx context.Context, q queryer, dialect string) (bool, error) {
	if s.check != "" {
		return s.hasOldStatusCheck(ctx, q, dialect)
	}
	if len(s.added) == 0 {
		cols, err := tableColumns(ctx, q, dialect, s.table)
		return cols[s.table+"."+s.column], err
	}
	var tables []string
	for _, a := range s.added {
		tables = append(tables, a.table)
	}
	cols, err := tableColumns(ctx, q, dialect, tables...)
	if err != nil {
		return false, err
	}
	for _, a := range s.added {
		if cols[a.table] && !cols[a.table+"."+a.column] {
			return true, nil
		}
	}
	return false, nil
}

// finds names what isOlder reads, for errors.
func (s step) finds() string {
	switch {
	case len(s.added) > 0:
		tables := make([]string, len(s.added))
		for i, a := range s.added {
			tables[i] = a.table
		}
		return "the columns of " + strings.Join(tables, " and ")
	case s.check == "":
		return "the columns of " + s.table
	}
	return "the CHECK " + s.check
}

// hasOldStatusCheck reports whether the table has the status CHECK
// of the migration before the step exactly. A missing CHECK, the current
// one or one the user changed otherwise all report false.
func (s step) hasOldStatusCheck(ctx context.Context, q queryer, dialect string) (bool, error) {
	old, err := s.oldStatuses(dialect)
	if err != nil {
		return false, err
	}
	defs, err := queryStrings(ctx, q, s.statusCheckQuery(dialect))
	if err != nil {
		return false, err
	}
	for _, def := range defs {
		if dialect == "sqlite" {
			var ok bool
			if def, ok = constraintClause(def, s.check); !ok {
				continue
			}
		}
		if isStatusCheckOf(def, old) {
			return true, nil
		}
	}
	return false, nil
}

var (
	sqlStringRE   = regexp.MustCompile(`'((?:[^']|'')*)'`)
	statusIdentRE = regexp.MustCompile(`(?i)\bstatus\b`)
)

// isStatusCheckOf reports whether a CHECK definition, as a server prints
// it, tests the status column against exactly the string literals of
// statuses (sorted). It accepts the forms of all three dialects:
//
//	MariaDB:    `status` in ('processing','success','error')
//	MySQL 8:    (`status` in (_utf8mb4\'processing\',_utf8mb4\'success\',...))
//	PostgreSQL: CHECK (((status)::text = ANY ((ARRAY['processing'::character varying, ...
//	SQLite:     CHECK (status IN ('processing', 'success', 'error'))
func isStatusCheckOf(def string, statuses []string) bool {
	def = strings.ReplaceAll(def, `\'`, `'`)
	if !statusIdentRE.MatchString(def) {
		return false
	}
	return slices.Equal(statusLiterals(def), statuses)
}

// statusLiterals returns the string literals of a CHECK definition,
// unquoted and sorted.
func statusLiterals(def string) []string {
	var literals []string
	for _, m := range sqlStringRE.FindAllStringSubmatch(def, -1) {
		literals = append(literals, strings.ReplaceAll(m[1], "''", "'"))
	}
	slices.Sort(literals)
	return literals
}

// constraintClause cuts "CHECK (...)" of the named table constraint out of
// an SQLite CREATE TABLE text, parentheses balanced and string literals
// skipped.
func constraintClause(tableSQL, name string) (string, bool) {
	re := regexp.MustCompile("(?i)\\bCONSTRAINT\\s+[\"`\\[]?" + regexp.QuoteMeta(name) + "[\"`\\]]?\\s+(CHECK\\s*)\\(")
	loc := re.FindStringSubmatchIndex(tableSQL)
	if loc == nil {
		return "", false
	}
	start, open := loc[2], loc[1]-1
	end := -1
	sqlscript.Depths(tableSQL, open, func(i, depth int) bool {
		if tableSQL[i] == ')' && depth == 0 {
			end = i
			return false
		}
		return true
	})
	if end < 0 {
		return "", false
	}
	return tableSQL[start : end+1], true
}

// runExclusive runs the step's up file on one connection: on SQLite every
// step (SQLite cannot alter a CHECK, so migrations 2 to 4 and 7 rebuild
// their table, and the statements of a rebuild must share a connection and
// a transaction), elsewhere the steps whose file has several statements that
// must not interleave with another process's (exclusive). A pool (*sql.DB,
// *sqlx.DB) lends one of its connections; a transaction (*sql.Tx,
// *sqlx.Tx) is used as it is; a connection (*sql.Conn, *sqlx.Conn) gets a
// transaction of its own where the server has one for DDL.
func (s step) runExclusive(ctx context.Context, db Execer, dialect, script string) error {
	switch h := db.(type) {
	case interface {
		Conn(context.Context) (*sql.Conn, error)
	}:
		conn, err := h.Conn(ctx)
		if err != nil {
			return fmt.Errorf("take a connection from the pool: %w", err)
		}
		defer conn.Close()
		return s.runOnConn(ctx, conn, dialect, script)
	case interface{ Commit() error }:
		return s.runInTx(ctx, db.(sqliteConn), dialect, script)
	case interface {
		Raw(func(driverConn any) error) error
	}:
		return s.runOnConn(ctx, db.(sqliteConn), dialect, script)
	}
	return fmt.Errorf("the upgrade needs its statements on one connection, and %T is neither a pool, "+
		"a transaction nor a connection of database/sql: pass a *sql.DB, *sql.Conn or *sql.Tx, "+
		"or run migration %d (Migrations) yourself", db, s.version)
}

// runOnConn runs the step on the connection c, in a transaction of its
// own on SQLite and PostgreSQL (MySQL commits each DDL statement anyway).
func (s step) runOnConn(ctx context.Context, c sqliteConn, dialect, script string) error {
	switch dialect {
	case "sqlite":
		return s.rebuildSQLiteOnConn(ctx, c, script)
	case "postgres":
		b, ok := c.(interface {
			BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
		})
		if !ok {
			// Unreachable: the connections runExclusive passes are *sql.Conn
			// or wrap one.
			return fmt.Errorf("%T cannot begin a transaction", c)
		}
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("BEGIN: %w", err)
		}
		if err := s.runInTx(ctx, tx, dialect, script); err != nil {
			if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
				return errors.Join(err, fmt.Errorf("ROLLBACK: %w", rerr))
			}
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("COMMIT: %w", err)
		}
		return nil
	}
	return s.runInTx(ctx, c, dialect, script)
}

// runInTx keeps other upgrading processes out, checks again that the table
// is older (another process may have upgraded it meanwhile) and runs the
// step's file on c. On PostgreSQL c is a transaction, which LOCK TABLE
// holds the table for until it ends (ALTER TABLE would take the same lock
// later); on MySQL, which commits each DDL statement, a named lock of the
// database's (GET_LOCK) keeps the others out until the file has run.
func (s step) runInTx(ctx context.Context, c sqliteConn, dialect, script string) error {
	switch dialect {
	case "sqlite":
		return s.rebuildSQLiteInTx(ctx, c, script)
	case "postgres":
		if _, err := c.ExecContext(ctx, "LOCK TABLE "+s.table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return fmt.Errorf("LOCK TABLE %s: %w", s.table, err)
		}
		return s.runIfOlder(ctx, c, dialect, script)
	}
	return withMySQLUpgradeLock(ctx, c, func() error { return s.runIfOlder(ctx, c, dialect, script) })
}

// runIfOlder runs script on c if the table is still older.
func (s step) runIfOlder(ctx context.Context, c sqliteConn, dialect, script string) error {
	old, err := s.isOlder(ctx, c, dialect)
	if err != nil {
		return fmt.Errorf("read %s again: %w", s.finds(), err)
	}
	if !old {
		return nil // another process upgraded it first
	}
	return ApplyScript(ctx, c, script)
}

// mysqlUpgradeLock names the lock that upgrading processes take on MySQL:
// one per database (GET_LOCK names are the server's, and at most 64
// characters long).
const mysqlUpgradeLock = "CONCAT('rowlease_upgrade.', MD5(DATABASE()))"

// mysqlUpgradeLockWait is how long, in seconds, GET_LOCK waits for another
// process's upgrade: a day, as good as for ever (MariaDB has no infinite
// wait); a cancelled ctx ends the wait sooner, the driver closing the
// connection.
const mysqlUpgradeLockWait = "86400"

// withMySQLUpgradeLock runs fn holding the upgrade lock on the connection
// c. The lock ends with the connection if the process does; a connection
// whose lock could not be released is discarded.
func withMySQLUpgradeLock(ctx context.Context, c sqliteConn, fn func() error) error {
	rows, err := queryStrings(ctx, c, "SELECT GET_LOCK("+mysqlUpgradeLock+", "+mysqlUpgradeLockWait+")")
	if err != nil {
		return fmt.Errorf("GET_LOCK: %w", err)
	}
	if !slices.Equal(rows, []string{"1"}) {
		return fmt.Errorf("GET_LOCK returned %q, not 1 (0: still held by another process after %s seconds)", rows, mysqlUpgradeLockWait)
	}
	err = fn()
	if _, rerr := c.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK("+mysqlUpgradeLock+")"); rerr != nil {
		discardConn(c)
		err = errors.Join(err, fmt.Errorf("RELEASE_LOCK: %w", rerr))
	}
	return err
}

// rebuildSQLiteOnConn wraps the step in BEGIN IMMEDIATE … COMMIT on c,
// with foreign-key enforcement off for the while (PRAGMA foreign_keys has
// no effect inside a transaction), as the SQLite documentation prescribes
// for rebuilding a table: otherwise DROP TABLE would delete the rows of any
// table whose foreign key references this one. BEGIN IMMEDIATE takes the
// write lock first (waiting up to the connection's busy timeout), so of
// several processes upgrading at once one upgrades and the others find
// the table upgraded when they get the lock.
func (s step) rebuildSQLiteOnConn(ctx context.Context, c sqliteConn, script string) error {
	fk, err := queryInt(ctx, c, "PRAGMA foreign_keys")
	if err != nil {
		return fmt.Errorf("PRAGMA foreign_keys: %w", err)
	}
	if fk != 0 {
		if _, err := c.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
			return fmt.Errorf("PRAGMA foreign_keys = OFF: %w", err)
		}
	}
	// Undo on a context that outlives a cancelled ctx. A connection that
	// cannot be put back (still in the transaction, or without foreign
	// keys) is discarded rather than returned to the pool.
	undo := context.WithoutCancel(ctx)
	var errs []error
	broken := false
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		errs = append(errs, fmt.Errorf("BEGIN IMMEDIATE: %w", err))
	} else {
		err := s.rebuildSQLiteInTx(ctx, c, script)
		if err == nil {
			if _, cerr := c.ExecContext(ctx, "COMMIT"); cerr != nil {
				err = fmt.Errorf("COMMIT: %w", cerr)
			}
		}
		if err != nil {
			errs = append(errs, err)
			if _, rerr := c.ExecContext(undo, "ROLLBACK"); rerr != nil {
				errs = append(errs, fmt.Errorf("ROLLBACK: %w", rerr))
				broken = true
			}
		}
	}
	if fk != 0 {
		if _, ferr := c.ExecContext(undo, "PRAGMA foreign_keys = ON"); ferr != nil {
			errs = append(errs, fmt.Errorf("restore PRAGMA foreign_keys = ON: %w", ferr))
			broken = true
		}
	}
	if broken {
		discardConn(c)
	}
	return errors.Join(errs...)
}

// rebuildSQLiteInTx checks again, now inside the transaction, that the
// table is older, then runs the step. A step that rebuilds the table
// (check: migrations 2 to 4 and 7) is followed by the triggers on the
// table, created again (DROP TABLE drops them; the migration files leave
// that to the user), and legacy_alter_table, which the rebuild switches on and off
// around its RENAME, is put back if it was on. Migrations 5 and 6 alter
// their tables in place, which keeps their triggers.
func (s step) rebuildSQLiteInTx(ctx context.Context, c sqliteConn, script string) error {
	if s.check == "" {
		return s.runIfOlder(ctx, c, "sqlite", script)
	}
	old, err := s.isOlder(ctx, c, "sqlite")
	if err != nil {
		return fmt.Errorf("read %s again: %w", s.finds(), err)
	}
	if !old {
		return nil // another process upgraded it first
	}
	triggers, err := queryStrings(ctx, c, s.sqliteTriggersQuery())
	if err != nil {
		return fmt.Errorf("read the triggers on %s: %w", s.table, err)
	}
	legacy, err := queryInt(ctx, c, "PRAGMA legacy_alter_table")
	if err != nil {
		return fmt.Errorf("PRAGMA legacy_alter_table: %w", err)
	}
	if err := ApplyScript(ctx, c, script); err != nil {
		return err
	}
	if legacy != 0 {
		if _, err := c.ExecContext(ctx, "PRAGMA legacy_alter_table = ON"); err != nil {
			return fmt.Errorf("restore PRAGMA legacy_alter_table = ON: %w", err)
		}
	}
	for _, trigger := range triggers {
		if _, err := c.ExecContext(ctx, trigger); err != nil {
			return fmt.Errorf("create trigger again (%s): %w", sqlscript.FirstLine(trigger), err)
		}
	}
	return nil
}

// discardConn makes database/sql close c's driver connection instead of
// reusing it, if c is a *sql.Conn (or wraps one).
func discardConn(c any) {
	if r, ok := c.(interface {
		Raw(func(driverConn any) error) error
	}); ok {
		_ = r.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// queryStrings returns the first column of every row of query.
func queryStrings(ctx context.Context, q queryer, query string) ([]string, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s sql.NullString
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		if s.Valid {
			out = append(out, s.String)
		}
	}
	return out, rows.Err()
}

// queryInt returns the single integer that query (a PRAGMA) reads.
func queryInt(ctx context.Context, q queryer, query string) (int64, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	if rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
	}
	return n, rows.Err()
}

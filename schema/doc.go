// Package schema holds the DDL of the four tables the rowlease library keeps
// its locks, deduplication records and recorded steps in, for MySQL/MariaDB,
// PostgreSQL and SQLite, together with the same DDL as golang-migrate and
// goose migrations.
//
// The package imports no SQL driver. Apply runs the DDL through any value with
// an ExecContext method (*sql.DB, *sql.Tx, *sql.Conn, *sqlx.DB, ...); DDL,
// Statements and Migrations hand out the embedded text for you to run with
// your own tooling.
//
// Two helpers serve your own database setup, still without a driver:
// SQLiteDSN is the modernc.org/sqlite DSN with the settings the library
// needs on SQLite (WAL, a busy timeout, _txlock=immediate; options change
// the busy timeout and add synchronous=NORMAL and foreign keys; its doc
// gives mattn/go-sqlite3's spelling), and LeaseColumnsDDL the ALTER TABLE
// statements that add the lease columns to a table of yours, for a lease
// (package lease) or the session lock (package session) on your own rows.
//
// # Dialects
//
// Every function takes the dialect as a lease.Dialect (lease.MySQL,
// lease.Postgres or lease.SQLite), the same value the lease, session,
// request and toolexec packages take; lease.ParseDialect and
// lease.DetectDialect turn a driver name or a database handle into one. Any
// other value yields an error that wraps ErrUnknownDialect. The supported
// servers are MySQL 8.0.16 or later (earlier
// 8.0 releases parse but do not enforce CHECK constraints), MariaDB 10.6 or
// later, PostgreSQL 13 or later and SQLite 3.35 or later (the library's
// statements use RETURNING), as in the README. The package is tested
// against MariaDB 10.11, PostgreSQL 15 and the SQLite of modernc.org/sqlite.
//
// # Tables
//
// rowlease_session (SessionTable) has one row per session key and records
// who holds the lease on it:
//
//	session_key  VARCHAR(191)  primary key
//	holder       VARCHAR(191)  NULL when unleased
//	token        VARCHAR(36)   NULL when unleased; a UUID string
//	expires_at   time          NULL when unleased
//	generation   BIGINT        NOT NULL DEFAULT 0; fencing counter
//	created_at   time          NOT NULL, defaults to now
//	updated_at   time          NOT NULL, defaults to now
//
// rowlease_request (RequestTable) has one row per client request of a session
// and records its state and outcome, so that a retried request is answered
// from the stored outcome instead of running twice:
//
//	id                 VARCHAR(36)   primary key; a UUID string from the library
//	session_key        VARCHAR(191)  NOT NULL
//	client_request_id  VARCHAR(191)  NOT NULL
//	fingerprint        VARCHAR(64)   NOT NULL; hash of the request payload
//	status             VARCHAR(16)   NOT NULL; 'queued', 'processing', 'waiting',
//	                                 'success', 'error', 'interrupted', 'cancelled'
//	                                 or 'expired'
//	holder, token, expires_at, generation   as in rowlease_session
//	reply              large text    NULL
//	result             large text    NULL; JSON
//	error              text          NULL
//	created_at, updated_at                  as in rowlease_session
//	content            large text    NULL; the message (stored with every request
//	                                 since migration 4's version of the library)
//	queue_seq          BIGINT        NULL; arrival order of a queued request
//	on_busy            VARCHAR(16)   NULL; 'queue' or 'interrupt' for a queued request
//	interrupted_by     VARCHAR(191)  NULL; who asked the request to stop (its own
//	                                 client request id: it was cancelled)
//	deaths             INT           NOT NULL DEFAULT 0; runs that died holding
//	                                 the request's lease
//	agent              VARCHAR(128)  NULL; the agent that runs the request (NULL:
//	                                 the Runner's default agent)
//	metadata           large text    NULL; JSON the client sent with the message
//	wait_name          VARCHAR(128)  NULL; the name of the question a 'waiting'
//	                                 request asks (NULL unless waiting)
//	wait_question      large text    NULL; the question's JSON
//	wait_seq           INT           NULL; the position in the request's steps
//	                                 (rowlease_step seq) of the answer
//	wait_until         time          NULL; the question's deadline (NULL: none)
//	UNIQUE (session_key, client_request_id)   rowlease_request_session_client_uq
//	UNIQUE (session_key, queue_seq)           rowlease_request_session_queue_uq
//	INDEX (status, updated_at)                rowlease_request_status_updated_idx
//
// content, queue_seq, on_busy, interrupted_by, the last two keys and the
// statuses 'queued', 'interrupted' and 'expired' came with migration 3;
// the status 'cancelled' with migration 4 (and a column steps, the JSON
// array of the recorded steps, which migration 5 moved into
// rowlease_step); deaths with migration 5; agent and metadata with
// migration 6; wait_name, wait_question, wait_seq, wait_until and the
// status 'waiting' (a run stopped to wait for a person's answer, holding
// no lease) with migration 7; package request says what they mean. On PostgreSQL and SQLite the queue key is a table
// constraint (on SQLite its index is named sqlite_autoindex_…), because
// the DDL cannot create an index on queue_seq before Apply has upgraded a
// table of an earlier version.
//
// rowlease_tool_execution (ToolExecutionTable) has one row per tool call made
// while serving a request:
//
//	id               VARCHAR(36)   primary key; a UUID string from the library
//	session_key      VARCHAR(191)  NOT NULL
//	request_id       VARCHAR(36)   NOT NULL; the rowlease_request id
//	tool_name        VARCHAR(128)  NOT NULL
//	arguments_hash   VARCHAR(64)   NOT NULL; hash of the tool arguments
//	idempotency_key  VARCHAR(255)  NOT NULL
//	status           VARCHAR(16)   NOT NULL; 'processing', 'started', 'success' or 'error'
//	holder, token, expires_at, generation   as in rowlease_session
//	result           large text    NULL; JSON
//	error            text          NULL
//	created_at, updated_at                  as in rowlease_session
//	step_seq         INT           NULL; steps the run had recorded when it made
//	                               the call (since migration 5)
//	occurrence       INT           NOT NULL DEFAULT 0; the n-th identical call
//	                               (same request, tool and arguments) of a run is
//	                               occurrence n-1 (since migration 6)
//	UNIQUE (session_key, idempotency_key)                           rowlease_tool_execution_idem_uq
//	UNIQUE (request_id, tool_name, arguments_hash, occurrence)      rowlease_tool_execution_call_uq
//	INDEX (session_key, request_id)                                 rowlease_tool_execution_session_request_idx
//
// Before migration 6 the call's unique key was (request_id, tool_name,
// arguments_hash): one row per call, whatever the number of identical
// calls in a run.
//
// rowlease_step (StepTable, since migration 5) has one row per step that a
// request's runs recorded (request.Run.Step), appended with the request's
// lease:
//
//	request_id   VARCHAR(36)   NOT NULL; the rowlease_request id
//	seq          INT           NOT NULL; the step's position, from 0
//	name         VARCHAR(128)  NOT NULL
//	output       large text    NOT NULL; JSON
//	generation   BIGINT        NOT NULL; the request's generation when recorded
//	created_at   time          NOT NULL, defaults to now
//	PRIMARY KEY (request_id, seq)   rowlease_step_pk (MySQL: PRIMARY)
//
// There are no foreign keys: the library keeps the tables consistent, and the
// rows of one table can be deleted without touching the others. The column,
// table, index and status names are exported as constants.
//
// # Per-dialect types
//
// MySQL and MariaDB: strings are VARCHAR, large text is LONGTEXT, times are
// DATETIME(6) holding UTC, defaulting to UTC_TIMESTAMP(6). Tables are InnoDB
// with utf8mb4 and the binary collation utf8mb4_bin, so keys compare by their
// bytes and case matters, as on the other two dialects. utf8mb4_bin is a
// PAD SPACE collation: on MySQL and MariaDB two keys that differ only in
// trailing spaces are equal (and collide in a unique key), while PostgreSQL
// and SQLite keep them apart. The library therefore refuses session keys,
// holders and client request ids that end in a space, on every dialect,
// before any SQL (engine.CheckText); check text of your own that goes into
// these columns the same way. (A NO PAD collation has no name common to
// MariaDB and MySQL 8, and would not help tables of your own.) Open
// connections with
// parseTime=true and loc=UTC (the go-sql-driver default for loc) so that
// time.Time values go in and come out as UTC. Lengths are enforced only in
// strict SQL mode (the default of both servers); otherwise MySQL truncates
// with a warning.
//
// PostgreSQL: strings are VARCHAR, large text is TEXT, times are TIMESTAMPTZ
// defaulting to clock_timestamp(). The unique keys are named table
// constraints, so INSERT ... ON CONFLICT ON CONSTRAINT <name> works as well
// as ON CONFLICT (columns). Tables go into the first schema of the
// connection's search_path.
//
// SQLite: strings and large text are TEXT without length limits (check
// lengths yourself if you need the limits of the other dialects; see the Max*
// constants). Times are INTEGER microseconds since the Unix epoch, UTC, i.e.
// time.Time.UnixMicro; read them back with time.UnixMicro. The column
// defaults compute now with millisecond resolution,
//
//	CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000
//
// and a CHECK constraint on each table but rowlease_step (whose one time,
// created_at, only its default writes) rejects time values that are not
// integers, so a driver that writes a time.Time as text fails on insert
// instead of storing a value that compares wrongly. Unique keys are unique
// indexes with the names above.
//
// # Applying the DDL
//
// Apply runs the statements of the dialect's DDL one at a time, in order; no
// multi-statement support is needed from the driver. All statements use
// CREATE ... IF NOT EXISTS (MySQL declares its keys inside CREATE TABLE
// because MySQL 8 has no CREATE INDEX IF NOT EXISTS), so Apply may run at
// every start-up. What it does not do:
//
//   - It does not migrate in general: a table that already exists is left
//     as it is, even if its columns differ from this DDL. The one exception
//     is the upgrade below, from the tables of an earlier version.
//   - It is not atomic: if a statement fails, the tables created before it
//     stay. Calling Apply again after fixing the cause is safe.
//   - It takes no lock. Concurrent calls are nevertheless safe: MySQL and
//     SQLite serialise the DDL themselves, and on PostgreSQL, where two
//     sessions creating the same table at the same instant make one of them
//     fail with a duplicate-key error on a system catalog (SQLSTATE 23505,
//     42P07 or 42710), Apply runs the losing statement again, and it then
//     finds the table. A driver whose errors have no SQLState() string
//     method does not get this retry.
//
// Errors from Apply name the dialect and the failing statement and wrap the
// driver's error, so errors.As reaches driver error types.
//
// # Upgrading
//
// The DDL has changed six times. Since migration 2 the status CHECK of
// rowlease_tool_execution (rowlease_tool_execution_status_ck) also allows
// 'started' (StoredStarted: the intent of an effect outside the database is
// recorded, its result not yet). Since migration 3 rowlease_request has the
// columns content, queue_seq, on_busy and interrupted_by, the unique key
// rowlease_request_session_queue_uq, the index
// rowlease_request_status_updated_idx, and a status CHECK
// (rowlease_request_status_ck) that also allows 'queued', 'interrupted' and
// 'expired'. Since migration 4 its status CHECK also allows 'cancelled'
// (and it had a column steps). Since migration 5 the recorded steps are
// rows of rowlease_step instead of that column, which is dropped,
// rowlease_request has the column deaths and rowlease_tool_execution the
// column step_seq. Since migration 6 rowlease_request has the columns
// agent and metadata, and rowlease_tool_execution the column occurrence
// (0 for the rows of earlier versions), which its unique key
// rowlease_tool_execution_call_uq takes in as its fourth column. Since
// migration 7 the request table's status CHECK also allows 'waiting', and
// it has the columns wait_name, wait_question, wait_seq and wait_until (on
// SQLite its rowlease_request_time_ck also checks wait_until). Tables
// that an earlier Apply created, like tables of the earlier migrations
// alone, lack them.
//
// Apply upgrades them. Before its CREATE statements it reads, for each of
// the two tables, the definition of its status CHECK from the catalog
// (PostgreSQL pg_get_constraintdef, MySQL and MariaDB
// information_schema.CHECK_CONSTRAINTS, SQLite the CREATE TABLE text in
// sqlite_master) and, only if it is exactly the CHECK of the migration
// before, runs the statements of that table's migration (2 for the
// tool-execution table; 3 for the request table with the CHECK of
// migration 1, then 4 for the request table with the CHECK of migration
// 3, and 7, after 5 and 6, for the request table with the CHECK of
// migration 4, which 5 and 6 keep). Migrations 5 and 6 change no CHECK: 5 runs if the request table
// still has the column steps, 6 if the request table lacks the column
// agent or the tool-execution table the column occurrence (read from
// PostgreSQL pg_attribute, MySQL and MariaDB information_schema.COLUMNS,
// SQLite pragma_table_info). A missing CHECK, or one you have changed
// yourself, is left alone. What the upgrade does:
//
//   - PostgreSQL, MySQL and MariaDB: one ALTER TABLE per table, atomic (on
//     PostgreSQL migration 3 then creates its index). PostgreSQL holds an
//     ACCESS EXCLUSIVE lock on the table while it checks the rows; MariaDB
//     copies the table to check them (ALGORITHM=COPY) and blocks writes to
//     it meanwhile, and MySQL checks them too: on a large table that takes
//     a while. MySQL needs 8.0.19 or later (ALTER TABLE ... DROP
//     CONSTRAINT); on 8.0.16 to 8.0.18 the upgrade fails with a syntax
//     error, and you run the ALTER TABLE yourself with DROP CHECK instead.
//   - SQLite cannot alter a CHECK: the table is rebuilt (new table under a
//     temporary name, rows copied, old table dropped, new one renamed,
//     indexes created again) in one BEGIN IMMEDIATE transaction on one
//     connection, which Apply takes from the pool if db is one. Apply turns
//     foreign_keys off on that connection for the while (so that a foreign
//     key of yours that references the table does not delete rows when the
//     old table is dropped), creates the triggers on the table again, and
//     leaves foreign_keys and legacy_alter_table as it found them. Views
//     that read the table keep working. If db is a transaction, the rebuild
//     runs in it, and foreign_keys, which cannot change inside a
//     transaction, stays as it is. db must be a pool, a connection or a
//     transaction of database/sql (or sqlx's forms of them); through any
//     other Execer the upgrade fails with an error and changes nothing.
//     Give the connections a busy timeout: a second process waits for the
//     first one's rebuild and then finds the new CHECK.
//   - Migration 5, on every dialect: its statements (create rowlease_step,
//     add deaths and step_seq, copy each request's steps into rowlease_step
//     in order, drop steps) run on one connection, which Apply takes from
//     the pool if db is one (db must be a pool, a connection or a
//     transaction of database/sql, as for SQLite's rebuild), with other
//     upgrading processes kept out: on PostgreSQL in one transaction that
//     holds LOCK TABLE on rowlease_request, all or nothing; on MySQL and
//     MariaDB under a lock named after the database (GET_LOCK), each
//     statement committed by itself; on SQLite in one BEGIN IMMEDIATE
//     transaction that alters the table in place (its triggers stay; the
//     copy needs SQLite 3.38's -> operator). Stop the processes of the
//     older version first: they write the column that the upgrade drops.
//   - Migration 6, on every dialect, as migration 5 (one connection, other
//     upgrading processes kept out, each statement committed by itself on
//     MySQL and MariaDB): it adds agent and metadata to rowlease_request,
//     occurrence to rowlease_tool_execution, and makes the call's unique
//     key again with occurrence (PostgreSQL: DROP CONSTRAINT and ADD
//     CONSTRAINT in one ALTER TABLE; MySQL and MariaDB: DROP INDEX and ADD
//     UNIQUE KEY in one ALTER TABLE; SQLite: DROP INDEX and CREATE UNIQUE
//     INDEX, in place). Building the new key reads the whole
//     tool-execution table: on a large one that takes a while.
//
// Several processes may upgrade at once: on PostgreSQL and MySQL the table
// lock orders their ALTER TABLE statements, and a second one finds the
// table upgraded (on MySQL its ALTER fails, and Apply, reading the CHECK
// again, lets that pass); for migrations 5 and 6, and on SQLite, the
// second one checks again under the lock and does nothing. If an upgrade
// fails, its table stays as it was (one ALTER TABLE, or the transaction of
// SQLite and of PostgreSQL's migrations 5 and 6, is all or nothing) and
// Apply returns an error that names the failing statement; call it again
// after fixing the cause. The exception is migrations 5 and 6 on MySQL and
// MariaDB, whose statements commit one by one: after a failure part way,
// run the rest of its up file yourself. (Migration 6 is found by both of
// its columns, so tables left with only one of them are not taken for
// upgraded: Apply's next attempt fails on the column that is there,
// changing nothing, until you have run the rest.)
//
// The upgrade needs to read the catalog: db must also have QueryContext
// (*sql.DB, *sql.Tx, *sql.Conn and sqlx's forms of them do). Through an
// Execer that has only ExecContext, Apply creates missing tables as before
// but cannot see an older table and leaves it as it is (on PostgreSQL and
// SQLite it adds rowlease_request_status_updated_idx, whose columns an
// older table has); inserting 'started' or 'queued' then fails with a
// violation of the status CHECK.
//
// If you manage the tables with golang-migrate or goose instead, copy
// migrations 2 to 7 into your migration directory (or use Migrations,
// which has them) and run them: Apply's upgrade does not write your tool's
// version table.
//
// # Migrations
//
// Migrations(dialect, tool) returns an fs.FS rooted at the migration files of
// one dialect and tool:
//
//   - 1, create_lock_tables: creates the three tables as the first version of
//     the DDL had them (CREATE ... IF NOT EXISTS); down drops the three tables
//     and everything in them.
//   - 2, tool_execution_started: lets a tool execution have status 'started'
//     (the upgrade above); down restores the CHECK of migration 1 and fails,
//     changing nothing, while a row has status 'started' (PostgreSQL SQLSTATE
//     23514, MySQL error 3819, MariaDB error 4025, SQLite "CHECK constraint
//     failed"): finish or delete those executions first. On SQLite both
//     directions rebuild the table inside the transaction that both tools
//     wrap a file in (keep it: no x-no-tx-wrap, no goose NO TRANSACTION).
//     There, PRAGMA foreign_keys cannot change, so run it with foreign keys
//     off if a table of yours references rowlease_tool_execution; triggers on
//     the table are dropped with it (create them again), and
//     legacy_alter_table is left off.
//   - 3, request_queue: the request table's new columns, keys and statuses
//     (the upgrade above); on SQLite a rebuild as in migration 2, with the
//     same notes. Down restores the request table of migration 2, losing
//     the values of the new columns, and fails, changing nothing, while a
//     request is 'queued', 'interrupted' or 'expired' (the errors of
//     migration 2's down). Up runs once: on a table that already has the
//     new columns (Apply upgraded it) it fails on MySQL and MariaDB (error
//     1060, duplicate column) and on SQLite ("duplicate column name"),
//     changing nothing — record version 3 as applied instead — and on
//     PostgreSQL it changes nothing.
//   - 4, request_steps: the request table's steps column and the status
//     'cancelled' (the upgrade above); on SQLite a rebuild as in migration
//     2, with the same notes. Down restores the request table of migration
//     3, losing the recorded steps (a run resumed after that asks its model
//     again), and fails, changing nothing, while a request is 'cancelled'.
//     Up runs once, as migration 3's: on a table that already has the
//     column it fails on MySQL, MariaDB and SQLite, changing nothing
//     (record version 4 as applied instead), and on PostgreSQL it changes
//     nothing.
//   - 5, step_journal: creates rowlease_step, adds deaths and step_seq,
//     moves each request's steps from the steps column into rowlease_step
//     (seq from 0 in array order, generation the request's, each output's
//     JSON text as it was, except that MySQL writes it out again in its own
//     spacing and SQLite compact) and drops the column (the upgrade above;
//     MySQL 8.0.4+ or MariaDB 10.6+ for JSON_TABLE, SQLite 3.38+). Stop the
//     processes of the older version first. Down puts the steps back into
//     the column, a JSON array in seq order (NULL for a request without
//     steps), and drops rowlease_step, deaths and step_seq; on MySQL and
//     MariaDB its statements commit one by one. Up runs once: on tables
//     that already have it it fails, changing nothing (MySQL and MariaDB
//     error 1060, SQLite "duplicate column name", PostgreSQL column "steps"
//     does not exist): record version 5 as applied instead.
//   - 6, agent_metadata_occurrence: adds agent and metadata to the request
//     table and occurrence to the tool-execution table, and makes the
//     call's unique key (request_id, tool_name, arguments_hash,
//     occurrence) (the upgrade above). Down drops the three columns,
//     losing their values, and makes the key of migration 5 again; that
//     key has room for one row per call, so down first deletes the rows of
//     the second and later identical calls of a run (occurrence > 0),
//     keeping the first one's (occurrence 0), which the version before
//     migration 6 takes an identical call for. On MySQL and MariaDB the
//     statements of both directions commit one by one. Up runs once: on
//     tables that already have the columns it fails on MySQL, MariaDB
//     (error 1060) and SQLite ("duplicate column name"), changing nothing
//     (record version 6 as applied instead), and on PostgreSQL it makes
//     the same key again and changes nothing else.
//   - 7, request_wait: the request table's status 'waiting' and columns
//     wait_name, wait_question, wait_seq and wait_until (the upgrade
//     above); on SQLite a rebuild as in migration 2, with the same notes,
//     that keeps every column of migration 6. Down restores the request
//     table of migration 6, losing the open questions, and fails, changing
//     nothing, while a request is 'waiting' (the errors of migration 2's
//     down). Up runs once, as migration 4's: on a table that already has
//     the columns it fails on MySQL, MariaDB (error 1060) and SQLite
//     ("duplicate column name"), changing nothing (record version 7 as
//     applied instead), and on PostgreSQL it changes nothing.
//
// The golang-migrate files are the source of every statement: the goose
// file of a migration holds its up and down files as they are, and the DDL
// is the up files folded into one CREATE … IF NOT EXISTS per table and
// index, both generated (go generate) and committed. Migrations 1 to 7
// together build exactly what the DDL builds: a test applies them to real
// databases of each dialect and compares tables, columns, constraints and
// indexes. A database set up by any version of
// Apply can adopt the migrations: migration 1 creates nothing that exists,
// and migration 2 may run again on tables that already allow 'started' (it
// replaces the CHECK by the same one; on SQLite it rebuilds the table once
// more); for migrations 3 to 7, see above.
//
// With golang-migrate (github.com/golang-migrate/migrate/v4 and its
// source/iofs package):
//
//	fsys, err := schema.Migrations(lease.Postgres, "golang-migrate")
//	src, err := iofs.New(fsys, ".")
//	m, err := migrate.NewWithSourceInstance("iofs", src, databaseURL)
//	err = m.Up()
//
// golang-migrate sends a whole file in one Exec. On MySQL and MariaDB that
// needs the go-sql-driver option multiStatements=true: if you hand
// golang-migrate your own *sql.DB (mysql.WithInstance), open it with that
// option, as golang-migrate's MySQL driver documents. The PostgreSQL and
// SQLite drivers take several statements in one Exec as they are.
//
// With goose (github.com/pressly/goose/v3):
//
//	fsys, err := schema.Migrations(lease.MySQL, "goose")
//	goose.SetBaseFS(fsys)
//	err = goose.SetDialect("mysql")
//	err = goose.Up(db, ".")
//
// goose splits the file itself at semicolons that end a line, so no
// multi-statement option is needed. The golang-migrate files are numbered
// 000001 to 000007 and the goose files 00001 to 00007; add your own
// migrations after them, or copy the files into your own migration directory.
package schema

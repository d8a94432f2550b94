package schema

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"unicode/utf8"

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema/internal/sqlscript"
)

// Table names.
const (
	// SessionTable holds one row per session key: the current lease on it.
	SessionTable = "rowlease_session"
	// RequestTable holds one row per (session key, client request id): the
	// deduplicated record of a client request and its outcome.
	RequestTable = "rowlease_request"
	// ToolExecutionTable holds one row per tool call made while serving a
	// request, deduplicated both by idempotency key and by call identity.
	ToolExecutionTable = "rowlease_tool_execution"
	// StepTable holds the steps a request's runs recorded (request.Run.Step):
	// one row per step, keyed by (request_id, seq), appended with the
	// request's lease. Since migration 5.
	StepTable = "rowlease_step"
)

// Column names. A name used by several tables has a single constant; the
// package documentation lists which table has which column.
const (
	// ColID is the primary key of RequestTable and ToolExecutionTable: a UUID
	// string (36 characters) chosen by the library, not by the database.
	ColID = "id"
	// ColSessionKey is the session key: the primary key of SessionTable and a
	// NOT NULL column of the other two tables.
	ColSessionKey = "session_key"
	// ColHolder names the lease holder; NULL when no one holds the lease.
	ColHolder = "holder"
	// ColToken is the lease token (a UUID string); NULL when unleased.
	ColToken = "token"
	// ColExpiresAt is when the lease lapses; NULL when unleased. Its type
	// depends on the dialect (see the package documentation).
	ColExpiresAt = "expires_at"
	// ColGeneration is a counter (BIGINT, default 0) that the library bumps to
	// fence stale holders.
	ColGeneration = "generation"
	// ColCreatedAt is the row creation time; the database fills it by default.
	ColCreatedAt = "created_at"
	// ColUpdatedAt is the last update time; the database fills it on insert by
	// default, but nothing updates it automatically afterwards.
	ColUpdatedAt = "updated_at"
	// ColClientRequestID is the caller's request id in RequestTable.
	ColClientRequestID = "client_request_id"
	// ColFingerprint is a 64-character hash (hex SHA-256) of the request
	// payload in RequestTable.
	ColFingerprint = "fingerprint"
	// ColStatus is the state of a request (StoredQueued, StoredProcessing,
	// StoredWaiting, StoredSucceeded, StoredFailed, StoredInterrupted,
	// StoredCancelled or StoredExpired) or of a tool execution (StoredProcessing,
	// StoredStarted, StoredSucceeded or StoredFailed); a CHECK constraint on
	// each table rejects anything else.
	ColStatus = "status"
	// ColReply is the reply text stored for a request (large text).
	ColReply = "reply"
	// ColResult is a JSON result document (large text).
	ColResult = "result"
	// ColError is an error message (text).
	ColError = "error"
	// ColRequestID is the RequestTable id a tool execution belongs to.
	ColRequestID = "request_id"
	// ColToolName is the name of the executed tool.
	ColToolName = "tool_name"
	// ColArgumentsHash is a 64-character hash (hex SHA-256) of the tool
	// arguments.
	ColArgumentsHash = "arguments_hash"
	// ColIdempotencyKey is the idempotency key of a tool execution.
	ColIdempotencyKey = "idempotency_key"
	// ColContent is the message of a request (large text, NULL unless it
	// was queued): what the process that starts a queued request runs.
	// Since migration 3.
	ColContent = "content"
	// ColQueueSeq orders the queued requests of a session (BIGINT, NULL
	// unless the request was queued); unique per session. Since migration 3.
	ColQueueSeq = "queue_seq"
	// ColOnBusy is the busy-session policy a queued request came with
	// ('queue' or 'interrupt'; NULL otherwise). Since migration 3.
	ColOnBusy = "on_busy"
	// ColInterruptedBy is the client request id of the message that asked
	// a processing request to stop (NULL until one did). Since migration 3.
	ColInterruptedBy = "interrupted_by"
	// ColSteps is the column of RequestTable that held the steps a
	// request's runs recorded from migration 4 until migration 5 (large
	// text, NULL until the first): a JSON array of {"name": …, "output": …}
	// objects in run order, rewritten whole for each step. Migration 5
	// moves them into StepTable, one row per step, and drops the column;
	// the current tables do not have it.
	ColSteps = "steps"
	// ColSeq is a step's position in its request's runs, from 0 (StepTable,
	// INTEGER, part of the primary key with request_id). Since migration 5.
	ColSeq = "seq"
	// ColName is a step's name (StepTable, at most 128 bytes). Since
	// migration 5.
	ColName = "name"
	// ColOutput is a step's recorded output, JSON text (StepTable, large
	// text). Since migration 5.
	ColOutput = "output"
	// ColDeaths counts the runs of a request that died holding its lease
	// — a takeover of a lease that was not given back — (RequestTable,
	// INTEGER NOT NULL DEFAULT 0): the service's resume gives up after
	// request.ResumeConfig.MaxAttempts of them. Graceful give-backs (Close,
	// a cancelled caller) do not count. Since migration 5.
	ColDeaths = "deaths"
	// ColStepSeq is how many steps the run had recorded or replayed when it
	// made a tool call (ToolExecutionTable, INTEGER NULL): a failed
	// request keeps the steps that its committed calls followed. Since
	// migration 5.
	ColStepSeq = "step_seq"
	// ColAgent names the agent that runs a request (RequestTable, at most
	// MaxAgentNameLen bytes, NULL for the Runner's default agent): a Runner
	// resumes only the requests whose agent it has. Since migration 6.
	ColAgent = "agent"
	// ColMetadata is the JSON a client sent with a message (RequestTable,
	// large text, NULL when none): the user, attachments' references,
	// model settings. Since migration 6.
	ColMetadata = "metadata"
	// ColOccurrence numbers identical calls of a request (ToolExecutionTable,
	// INTEGER NOT NULL DEFAULT 0): the n-th call of a run with the same tool
	// and canonical arguments is occurrence n−1, an effect of its own. Part
	// of ToolExecutionCallUnique. Since migration 6.
	ColOccurrence = "occurrence"
	// ColWaitName names the question a waiting request asks
	// (RequestTable, VARCHAR(128), at most MaxWaitNameLen bytes, NULL unless the request
	// is StoredWaiting): the name its agent gave request.Await. Since
	// migration 7.
	ColWaitName = "wait_name"
	// ColWaitQuestion is the JSON of the question a waiting request asks
	// (RequestTable, large text, NULL unless waiting). Since migration 7.
	ColWaitQuestion = "wait_question"
	// ColWaitSeq is the position in the request's step journal
	// (StepTable's ColSeq) at which the answer to the open question is
	// recorded (RequestTable, INTEGER, NULL unless waiting). Since
	// migration 7.
	ColWaitSeq = "wait_seq"
	// ColWaitUntil is the deadline of the open question, by the database
	// clock, in the representation of the lease time columns
	// (RequestTable, NULL: no deadline, or not waiting). Since migration 7.
	ColWaitUntil = "wait_until"
)

// MaxWaitNameLen bounds the name of a question (ColWaitName), in bytes:
// less than the column's 128, so that the answer's step, recorded under
// "await:" and the name, fits the step table's name column (128).
const MaxWaitNameLen = 120

// MaxAgentNameLen bounds an agent's name (ColAgent), in bytes.
const MaxAgentNameLen = 128

// Index and constraint names of the unique keys and the secondary index.
const (
	// RequestSessionClientUnique is the unique key on RequestTable
	// (session_key, client_request_id).
	RequestSessionClientUnique = "rowlease_request_session_client_uq"
	// ToolExecutionIdemUnique is the unique key on ToolExecutionTable
	// (session_key, idempotency_key).
	ToolExecutionIdemUnique = "rowlease_tool_execution_idem_uq"
	// ToolExecutionCallUnique is the unique key on ToolExecutionTable
	// (request_id, tool_name, arguments_hash, occurrence): one row per
	// occurrence of an identical call. Before migration 6 it was
	// (request_id, tool_name, arguments_hash).
	ToolExecutionCallUnique = "rowlease_tool_execution_call_uq"
	// ToolExecutionSessionRequestIndex is the plain (non-unique) index on
	// ToolExecutionTable (session_key, request_id).
	ToolExecutionSessionRequestIndex = "rowlease_tool_execution_session_request_idx"
	// RequestSessionQueueUnique is the unique key on RequestTable
	// (session_key, queue_seq). On PostgreSQL and SQLite it is a table
	// constraint (SQLite names its index sqlite_autoindex_…). Since
	// migration 3.
	RequestSessionQueueUnique = "rowlease_request_session_queue_uq"
	// RequestStatusUpdatedIndex is the plain index on RequestTable
	// (status, updated_at), for the queue dispatcher and the retention
	// sweeper. Since migration 3.
	RequestStatusUpdatedIndex = "rowlease_request_status_updated_idx"
)

// Values allowed in the status column (ColStatus) of RequestTable and
// ToolExecutionTable: how each state is stored. The Go names are the
// states' names (request.StateSucceeded, request.StateFailed…); the stored
// text of two of them keeps the words of the first migration, "success"
// and "error", so that existing rows and CHECK constraints stay valid.
// StoredStarted is allowed in ToolExecutionTable only; StoredQueued,
// StoredInterrupted, StoredCancelled, StoredExpired and StoredWaiting in
// RequestTable only.
const (
	// StoredQueued marks a request stored to run when its session is free
	// (RequestTable, from migration 3 on).
	StoredQueued = "queued"
	// StoredProcessing marks work that has started and not yet finished.
	StoredProcessing = "processing"
	// StoredStarted marks a tool execution whose effect outside the database
	// has its intent recorded and its result not yet. Only ToolExecutionTable
	// allows it (from migration 2 on; Apply upgrades older tables).
	StoredStarted = "started"
	// StoredSucceeded marks work that finished successfully (stored as
	// "success").
	StoredSucceeded = "success"
	// StoredFailed marks work that finished with an error (stored as
	// "error").
	StoredFailed = "error"
	// StoredInterrupted marks a request that stopped because another
	// message of its session asked it to (RequestTable, from migration 3
	// on).
	StoredInterrupted = "interrupted"
	// StoredCancelled marks a request cancelled by its client (Cancel):
	// final, like StoredInterrupted (RequestTable, from migration 4 on).
	StoredCancelled = "cancelled"
	// StoredExpired marks the tombstone of a finished request whose
	// outcome the retention sweeper deleted (RequestTable, from migration 3
	// on).
	StoredExpired = "expired"
	// StoredWaiting marks a request whose run stopped to wait for a
	// person's answer (request.Await): no lease is held while it waits
	// (RequestTable, from migration 7 on).
	StoredWaiting = "waiting"
)

// Maximum lengths, in characters, of the VARCHAR columns on MySQL and
// PostgreSQL. SQLite does not enforce them; callers that want the same
// behaviour everywhere must check lengths themselves.
const (
	// MaxSessionKeyLen bounds session_key.
	MaxSessionKeyLen = 191
	// MaxHolderLen bounds holder.
	MaxHolderLen = 191
	// MaxClientRequestIDLen bounds client_request_id.
	MaxClientRequestIDLen = 191
	// MaxToolNameLen bounds tool_name.
	MaxToolNameLen = 128
	// MaxIdempotencyKeyLen bounds idempotency_key.
	MaxIdempotencyKeyLen = 255
	// UUIDLen is the length of id, request_id and token values.
	UUIDLen = 36
	// HashLen is the length of fingerprint and arguments_hash values.
	HashLen = 64
	// MaxStatusLen bounds status.
	MaxStatusLen = 16
)

// MaxErrorLen is the most bytes of an error message the library stores in
// an error column.
const MaxErrorLen = 4000

// ErrorText cuts msg to at most MaxErrorLen bytes, on a UTF-8 boundary, for
// an error column.
func ErrorText(msg string) string {
	n := MaxErrorLen
	if len(msg) <= n {
		return msg
	}
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return msg[:n]
}

// ErrUnknownDialect is wrapped by the error returned for a lease.Dialect
// that is not lease.MySQL, lease.Postgres or lease.SQLite.
var ErrUnknownDialect = errors.New("schema: unknown dialect")

// ErrUnknownMigrationTool is wrapped by the error Migrations returns for a migration
// tool other than golang-migrate (or migrate) and goose.
var ErrUnknownMigrationTool = errors.New("schema: unknown migration tool")

// Execer runs one SQL statement. *sql.DB, *sql.Tx, *sql.Conn and *sqlx.DB
// satisfy it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// ddlFiles hold the DDL of each dialect, generated from the golang-migrate
// files (generate.go).
//
//go:embed sql/*.sql
var ddlFiles embed.FS

// migrationFiles hold the migrations for golang-migrate (the source of
// every statement of this package) and for goose (generated from them).
// The files carry no note about this repository: users copy them into
// their own folders.
//
//go:embed migrations
var migrationFiles embed.FS

// canonicalDialect maps a dialect to the directory and file name used in
// this package: "mysql", "postgres" or "sqlite".
func canonicalDialect(d lease.Dialect) (string, error) {
	switch d {
	case lease.MySQL, lease.Postgres, lease.SQLite:
		return d.String(), nil
	}
	return "", fmt.Errorf("%w %s (want lease.MySQL, lease.Postgres or lease.SQLite)", ErrUnknownDialect, d)
}

// DDL returns the embedded DDL script for dialect, comments included. The
// script holds several statements; use Statements or Apply to run it on a
// connection that executes one statement at a time.
func DDL(dialect lease.Dialect) (string, error) {
	d, err := canonicalDialect(dialect)
	if err != nil {
		return "", err
	}
	b, err := ddlFiles.ReadFile("sql/" + d + ".sql")
	if err != nil {
		// Unreachable unless the embedded files are missing.
		return "", fmt.Errorf("schema: read embedded %s DDL: %w", d, err)
	}
	return string(b), nil
}

// Statements returns the statements of the DDL for dialect, in order, without
// comments and without the trailing semicolon, each suitable for a single
// ExecContext call. The slice is new on every call.
func Statements(dialect lease.Dialect) ([]string, error) {
	src, err := DDL(dialect)
	if err != nil {
		return nil, err
	}
	return sqlscript.Split(src), nil
}

// Apply creates the lock tables and their indexes for dialect if they do not
// exist yet, running the statements one at a time on db. It is idempotent:
// on a database that already has the current tables it changes nothing.
//
// Tables that an earlier version of Apply created are upgraded first: if the
// tool-execution table still has the status CHECK of migration 1 (without
// StoredStarted), Apply runs the statements of migration 2; if the request
// table does (without StoredQueued), those of migration 3; if the request
// table has the CHECK of migration 3 (without StoredCancelled), those of
// migration 4; if the request table still has the steps column
// (ColSteps), those of migration 5, which move its steps into StepTable
// and drop it; if the request table lacks ColAgent or the tool-execution
// table ColOccurrence, those of migration 6, which add ColAgent,
// ColMetadata and ColOccurrence and make ToolExecutionCallUnique with
// ColOccurrence; and if the request table has the CHECK of migration 4
// (without StoredWaiting), those of migration 7, which allow StoredWaiting
// and add ColWaitName, ColWaitQuestion, ColWaitSeq and ColWaitUntil (see
// the package documentation, "Upgrading"). For that it reads the catalog through db's QueryContext method, which
// *sql.DB, *sql.Tx, *sql.Conn and their sqlx forms have; a db with
// ExecContext alone gets no upgrade. On SQLite, and for migrations 5 and 6
// on every dialect, the upgrade runs on one connection, so db must then be a pool, a
// connection or a transaction of database/sql (or sqlx's forms). Apply
// does not check or alter tables that differ from the DDL in any other
// way.
//
// Several processes may call Apply at once: a statement that fails because
// another session created the same object at the same moment (PostgreSQL
// reports that as a duplicate-key error on a system catalog) is run again,
// up to three times, and then finds the object; an upgrade that two
// processes start together ends with the same table.
//
// Apply stops at the first failing statement and returns an error that names
// the dialect and the statement and wraps the driver's error. Statements that
// ran before it are not undone (MySQL commits DDL implicitly anyway); fix the
// cause and call Apply again.
func Apply(ctx context.Context, db Execer, dialect lease.Dialect) error {
	src, err := DDL(dialect)
	if err != nil {
		return err
	}
	d, _ := canonicalDialect(dialect)
	// Upgrade first: the DDL may index a column that the table of an
	// earlier version lacks until it is upgraded, and a refused upgrade
	// then leaves everything as it was.
	if err := upgrade(ctx, db, d); err != nil {
		return err
	}
	if err := ApplyScript(ctx, db, src); err != nil {
		return fmt.Errorf("schema: apply %s DDL: %w", d, err)
	}
	return nil
}

// ApplyScript runs an SQL script written in the style of the embedded
// files (a statement ends at a line ending in ';'; comments on lines of
// their own) one statement at a time, as Apply does, with the same retry of
// a statement that lost a creation race. It suits an application's own
// CREATE … IF NOT EXISTS tables next to the lock tables.
func ApplyScript(ctx context.Context, db Execer, script string) error {
	if db == nil {
		return errors.New("schema: Apply called with a nil Execer")
	}
	stmts := sqlscript.Split(script)
	for i, stmt := range stmts {
		var err error
		for attempt := 0; ; attempt++ {
			_, err = db.ExecContext(ctx, stmt)
			if err == nil || attempt == maxCreateRaceRetries || !isCreateRace(err) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("statement %d of %d (%s): %w", i+1, len(stmts), sqlscript.FirstLine(stmt), err)
		}
	}
	return nil
}

// maxCreateRaceRetries bounds how often Apply repeats a statement that lost a
// creation race.
const maxCreateRaceRetries = 3

// isCreateRace reports whether err is how PostgreSQL fails a CREATE ... IF
// NOT EXISTS whose object another session created at the same moment: the
// existence check passed in both, and the loser's catalog insert then hits
// the winner's committed row (SQLSTATE 23505 unique_violation on a catalog
// index, or 42P07 duplicate_table / 42710 duplicate_object). Repeating the
// statement then finds the object and does nothing. The error is recognised
// through the SQLState method that pgx's *pgconn.PgError and lib/pq's
// *pq.Error have, so no driver is imported.
func isCreateRace(err error) bool {
	var coded interface{ SQLState() string }
	if !errors.As(err, &coded) {
		return false
	}
	switch coded.SQLState() {
	case "23505", "42P07", "42710":
		return true
	}
	return false
}

// Migrations returns the migration files for dialect and tool, rooted at the
// directory that holds them, ready for the tool's fs.FS source:
//
//   - tool "golang-migrate" (or "migrate"): 000001_create_lock_tables.up.sql,
//     000001_create_lock_tables.down.sql, 000002_tool_execution_started.up.sql,
//     000002_tool_execution_started.down.sql, 000003_request_queue.up.sql,
//     000003_request_queue.down.sql, 000004_request_steps.up.sql,
//     000004_request_steps.down.sql, 000005_step_journal.up.sql,
//     000005_step_journal.down.sql, 000006_agent_metadata_occurrence.up.sql
//     and 000006_agent_metadata_occurrence.down.sql, for source/iofs with
//     path ".".
//   - tool "goose": 00001_create_lock_tables.sql,
//     00002_tool_execution_started.sql, 00003_request_queue.sql,
//     00004_request_steps.sql, 00005_step_journal.sql and
//     00006_agent_metadata_occurrence.sql, each
//     with -- +goose Up and -- +goose Down sections, for goose.SetBaseFS or
//     goose.NewProvider with directory ".".
//
// Tool names are case-insensitive.
func Migrations(dialect lease.Dialect, tool string) (fs.FS, error) {
	d, err := canonicalDialect(dialect)
	if err != nil {
		return nil, err
	}
	var dir string
	switch strings.ToLower(strings.TrimSpace(tool)) {
	case "golang-migrate", "migrate":
		dir = "migrate"
	case "goose":
		dir = "goose"
	default:
		return nil, fmt.Errorf("%w %q (want golang-migrate or goose)", ErrUnknownMigrationTool, tool)
	}
	sub, err := fs.Sub(migrationFiles, "migrations/"+d+"/"+dir)
	if err != nil {
		// Unreachable: fs.Sub only fails on an invalid path.
		return nil, fmt.Errorf("schema: open embedded %s %s migrations: %w", d, dir, err)
	}
	return sub, nil
}

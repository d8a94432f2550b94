package driver

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"time"
)

// Driver is one SQL dialect as the engine needs it: the text it writes,
// what its statements hand back, how its errors read, and its first-use
// check. A Driver is a stateless value, safe for concurrent use; the
// engine picks one per Lease, once, from the Lease's dialect.
//
// Statement text is a template: a parameter is written {name}, and
// Compile turns the template into the dialect's placeholders. Every
// identifier handed to a Driver has been validated (letters, digits and
// underscores); text it is given (assignments, conditions, values) is
// the engine's, already quoted, and is written as given.
type Driver interface {
	// Name is the dialect's name: "mysql", "postgres" or "sqlite".
	Name() string
	// Caps says what the dialect's statements can do (see Caps).
	Caps() Caps

	// Quote quotes one validated identifier (a part of a qualified name).
	Quote(ident string) string
	// Now is the database-clock instant of the statement in the lease
	// column representation (DATETIME(6) UTC, timestamptz, or integer
	// microseconds since the Unix epoch).
	Now() string
	// PlusMicros adds micros (an SQL expression of a microsecond count)
	// to the time expression t.
	PlusMicros(t, micros string) string
	// MicrosUntil is the number of whole microseconds from Now until t.
	MicrosUntil(t string) string
	// Compile turns a template's {name} parameters into placeholders and
	// returns the argument names in placeholder order (repeated where the
	// dialect's placeholders cannot be reused).
	Compile(tmpl string) (query string, names []string)
	// Rebind rewrites the ? placeholders of q into the dialect's. q must
	// not contain a literal ?.
	Rebind(q string) string
	// GenerationBack is the assignment that hands the new value expr of
	// the generation column col back without RETURNING (MySQL's
	// LAST_INSERT_ID), or "" where the dialect returns it with RETURNING.
	GenerationBack(col, expr string) string
	// Returning is " RETURNING " + cols, or "" where the dialect has no
	// RETURNING (Caps.Returning false).
	Returning(cols string) string
	// ForUpdate is the suffix that locks the rows a SELECT reads, or ""
	// where a transaction's first write locks the whole database.
	ForUpdate() string
	// InsertIgnore is the suffix of an INSERT that does nothing when a row
	// with the same key column (quoted) exists.
	InsertIgnore(keyCol string) string
	// Pairs writes the key list and the (key, token, generation) row
	// list of a batch, with its arguments in placeholder order.
	// Placeholders are the dialect's, not template parameters.
	Pairs(keys []any, toks []string, gens []int64) (keyList, pairList string, args []any)
	// Causal prefixes q so that the node it runs on first applies every
	// write its cluster committed before (MariaDB Galera's
	// wsrep_sync_wait); q itself where Caps.MultiPrimary is false.
	Causal(q string) string

	// Joint writes the token-checked writes parts in one statement
	// (Caps.Joint says how), a template; "" with JointNone.
	Joint(parts []JointPart) string
	// AcquireCreate writes an acquire and an insert in one statement
	// (Caps.AcquireCreate), a template; "" where the dialect has none.
	AcquireCreate(p AcquireCreateParams) string
	// ConfirmPut writes the write of a caller's row that ConfirmPut
	// makes, a template: with Caps.PutInOne, one statement that confirms
	// the grant and upserts the row only if it holds; else the upsert
	// alone, sent after a Confirm in the same transaction.
	ConfirmPut(p PutParams) string

	// Classify finds this driver's error in err's chain (errors.As) and
	// says what it is. ok is false when err holds none of its errors.
	Classify(err error) (kind ErrKind, ok bool)
	// UnavailableNode judges one error of a chain (not what it wraps):
	// ok is true when it is this driver's, and then unavailable says
	// whether it means the database cannot be reached or serve for now.
	UnavailableNode(err error) (unavailable, ok bool)

	// Probe is the first-use check of a database handle: it reads the
	// type of the expiry column (ErrColumnNotFound when the table or the
	// column is not in the catalog), or, where the column type needs no
	// check, the settings worth a warning, which it logs. Its error is
	// the database's, to be retried on a later use.
	Probe(ctx context.Context, db DB, p ProbeParams) (ProbeResult, error)
}

// Caps are what a dialect's statements can do, read once per Lease.
type Caps struct {
	// ClockResolution is the step of the database clock as the lease
	// statements read it.
	ClockResolution time.Duration
	// Returning: statements hand values back with RETURNING. Without it
	// (MySQL) the generation comes back as the OK packet's insert id
	// (GenerationBack), and a match is read from the rows affected.
	Returning bool
	// Joint is how several token-checked writes go in one statement.
	Joint JointKind
	// AcquireCreate: AcquireCreate and AcquireCreateUnless are one
	// statement (AcquireCreate), on a pool as well as in a transaction.
	AcquireCreate bool
	// PutInOne: ConfirmPut is one statement; else a Confirm and the
	// upsert in a transaction.
	PutInOne bool
	// RetryVictims: a deadlock or serialization victim in autocommit is
	// sent again. Not SQLite, whose busy timeout already waited.
	RetryVictims bool
	// PrepareByDefault: PrepareAuto prepares statements on a pool.
	PrepareByDefault bool
	// SingleWriter: one writer at a time for the whole database, so a
	// flow's renewals are routed into its open fenced transaction
	// (engine's FlowDB).
	SingleWriter bool
	// MultiPrimary: Options.MultiPrimary is allowed (MariaDB Galera).
	MultiPrimary bool
}

// JointKind is how a dialect writes several token-checked writes in one
// statement.
type JointKind uint8

const (
	// JointNone: one statement per write.
	JointNone JointKind = iota
	// JointWith: one data-modifying WITH per write, then one row of their
	// RETURNING generations, NULL for a write that matched nothing; the
	// writes that matched are made. JointPart.Alias, Update and
	// Generation are used.
	JointWith
	// JointMultiUpdate: a multi-table UPDATE, all writes or none: the rows
	// affected equal the number of writes only when every one matched.
	// JointPart.Table, Alias, Set and Where are used; a table may appear
	// once, and a coarse expiry column is not joined.
	JointMultiUpdate
)

// JointPart is one write of a joint statement, its parameters already
// named apart from the other parts'.
type JointPart struct {
	// Update is the write alone with RETURNING its generation (JointWith).
	Update string
	// Generation is the quoted generation column (JointWith).
	Generation string
	// Alias names the part in the statement (both kinds).
	Alias string
	// Table is the quoted table, Set its assignments and Where its
	// condition, columns qualified with Alias (JointMultiUpdate).
	Table, Set, Where string
}

// AcquireCreateParams are the two writes of AcquireCreate: an acquire on
// one table and an insert into another, its parameters named {a.…} and
// {c.…}, and optionally the read of AcquireCreateUnless.
type AcquireCreateParams struct {
	// AcquireTable is the acquire's quoted table, AcquireSet its
	// assignments, AcquireWhere its condition, AcquireGeneration its
	// quoted generation column.
	AcquireTable, AcquireSet, AcquireWhere, AcquireGeneration string
	// CreateTable is the insert's quoted table, CreateColumns and
	// CreateValues its column and value lists (comma-separated),
	// CreateGeneration its quoted generation column.
	CreateTable, CreateColumns, CreateValues, CreateGeneration string
	// Unless, when set, is a read of at most one row (its parameters
	// named {u.…}) that stops the acquire when it finds one; the result
	// then adds a found mark and the row's Columns.
	Unless *UnlessRead
}

// UnlessRead is the read of AcquireCreateUnless.
type UnlessRead struct {
	// Query is the SELECT of the row: a lead column "1 AS
	// rowlease_found", then Columns, at most one row.
	Query string
	// Columns are the quoted columns it reads, after the lead.
	Columns []string
}

// PutParams are the pieces of ConfirmPut's write.
type PutParams struct {
	// Into is "INSERT INTO t (columns)", Values the placeholders of the
	// row's values, comma-separated.
	Into, Values string
	// Key are the quoted columns of the row's key, Update the quoted
	// columns the upsert updates.
	Key, Update []string
	// Confirm is the grant's confirming UPDATE with RETURNING, and Held
	// a SELECT of 1 from the grant's row while it holds; a driver uses
	// the one its statement needs.
	Confirm, Held string
}

// ErrKind is what a database error says, as far as the engine acts on it.
// A lost or held lease is never a database error: it is a token-checked
// statement or an acquire that matched no row, which the engine reads
// from the rows matched.
type ErrKind uint8

const (
	// KindOther is any other error of the driver.
	KindOther ErrKind = iota
	// KindDuplicateKey is a unique-key violation.
	KindDuplicateKey
	// KindRetryable is a deadlock or serialization victim, or a
	// statement that could not run for another writer: nothing took
	// effect, and it may be run again (it is transient too).
	KindRetryable
	// KindTransient is an error after which the transaction it ended
	// took no effect and may be run again (a lock wait timeout, a locked
	// table), but that is not retried statement by statement.
	KindTransient
)

// DB is what a driver sends its probe on: *sql.DB, *sql.Tx, *sql.Conn,
// *sqlx.DB, …
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ProbeParams are what a first-use check needs of the Lease.
type ProbeParams struct {
	// Schema ("" when the name is not qualified) and Table are the
	// table's name, unquoted; QuotedTable is the name quoted.
	Schema, Table, QuotedTable string
	// Name is the table's name as given, for logs.
	Name string
	// ExpiresAt is the expiry column, unquoted.
	ExpiresAt string
	// PrepareAlways: the Lease prepares its statements on a pool, so a
	// connection setting that only matters to unprepared statements is
	// not worth a warning.
	PrepareAlways bool
	// Log receives the check's warnings.
	Log *slog.Logger
}

// ProbeResult is what a first-use check read.
type ProbeResult struct {
	// Checked: the expiry column's type was read, and Type, Precision and
	// Suggest say what it is.
	Checked bool
	// Type is the column's type name as the catalog gives it.
	Type string
	// Precision is the digits of a second the column stores, 0 to 6, or
	// -1 when it is not a date-time type the engine judges.
	Precision int
	// Suggest is the type to give the column for microseconds.
	Suggest string
}

// ErrColumnNotFound is Probe's error when the table or its expiry column
// is not in the catalog.
var ErrColumnNotFound = errors.New("lease: the expiry column is not in the catalog")

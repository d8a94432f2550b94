package lease

import (
	"context"
	"database/sql"

	"github.com/rowlease/rowlease/internal/engine"
)

// Key is the type of a row's key: a string or an integer
// (~string | ~int | ~int32 | ~int64 | ~uint32).
type Key = engine.Key

// Lease runs the operations on the lease rows of one table. Build it with
// New; it is safe for concurrent use. Every operation takes the database
// to run on (DB), so a lease can be taken inside a transaction of yours.
//
// Its methods: Acquire, AcquireWith (reentry, a state condition, extra
// columns in the same statement), AcquireWait (poll a held lease until it
// is free or ctx ends), Renew, Release, Transition (a token-checked change
// of state, keeping or releasing the lease), Create (insert a new row,
// held), Delete, Confirm (prove inside a transaction that a grant holds),
// Inspect (read a row, by the database clock), Fence (a grant as a Fence
// for RunFenced), Ensure (insert the row free unless it exists) and Close
// (the kept prepared statements).
type Lease[K Key] = engine.Lease[K]

// New builds a Lease of the table t (see NewTable) for the dialect d. It
// sends nothing: each database handle is checked on its first use (see
// the package doc, "First use").
func New[K Key](d Dialect, t Table, opts Options) (*Lease[K], error) {
	return engine.New[K](d, t, opts)
}

// Grant is the proof of a lease held, returned by Acquire, Renew and
// Create, and given back to Renew, Release, Transition, Confirm and Fence.
// It is a value: Renew and Transition return the updated grant. Its
// fields: Key; Holder; Token, the secret that proves the grant (it prints
// as [redacted]); Generation, the fencing generation, strictly increasing
// per row with every new grant (store it with your writes to refuse a
// stale holder's); TTL; and Deadline, the local trust deadline on the
// monotonic clock (the send time of the last acquire or renew + TTL −
// safety margin − expiry resolution), past which act as if the lease were
// lost. Grant.Trusted(now) says whether now is before Deadline.
type Grant[K Key] = engine.Grant[K]

// Token is a grant's random secret (a UUIDv4). It never prints: String,
// every fmt verb, slog and encoding as text give [redacted]; there is no
// way to read it from outside the library.
type Token = engine.Token

// Options configure a Lease; the zero value is valid. Fields:
// SafetyMargin (subtracted from each TTL for the trust deadline; zero
// means TTL/10), Clock (the local monotonic clock; nil means time.Now),
// Prepare (whether statements run on a pool are prepared once and kept:
// PrepareAuto, PrepareAlways or PrepareNever), ExpiryResolution (declare
// an expires_at column coarser than a microsecond), Observer (nil costs
// nothing), MultiPrimary (a MariaDB Galera cluster whose nodes one pool
// reaches in turn), Logger (the first-use check's warnings) and SkipCheck
// (no first-use check). See the package doc.
type Options = engine.Options

// PrepareMode says whether a Lease prepares its statements on a pool
// (Options.Prepare).
type PrepareMode = engine.PrepareMode

// The values of Options.Prepare. PrepareAuto (the zero value) prepares on
// MySQL and PostgreSQL pools and not on SQLite, where a statement is
// compiled in the process at no round trip; PrepareNever suits a pooler
// in transaction mode that cannot keep prepared statements.
const (
	PrepareAuto   = engine.PrepareAuto
	PrepareAlways = engine.PrepareAlways
	PrepareNever  = engine.PrepareNever
)

// Clock gives the local time used for trust deadlines (Now() time.Time).
// It must carry a monotonic reading, as time.Now does.
type Clock = engine.Clock

// TTL bounds. A TTL outside them is refused before any SQL is sent.
const (
	MinTTL = engine.MinTTL
	MaxTTL = engine.MaxTTL
)

// MaxHolderLen and MaxKeyLen are the longest holder and string key
// accepted, in bytes: a VARCHAR(191) utf8mb4 column, the widest that MySQL
// indexes by default.
const (
	MaxHolderLen = engine.MaxHolderLen
	MaxKeyLen    = engine.MaxKeyLen
)

// Snapshot is what Inspect reads of a row: Holder ("" when free),
// Generation, State, Held (a token is set and the row has not expired by
// the database clock) and Remaining (time left before expiry when held).
type Snapshot = engine.Snapshot

// AcquireOptions refine AcquireWith: Token (reentry with a grant already
// held: the token and generation are kept), InStates (acquire only rows in
// one of these states), SetState and Set (columns written in the same
// statement).
type AcquireOptions = engine.AcquireOptions

// WaitOptions bound how AcquireWait polls a held lease: MinDelay (zero
// means 50ms) and MaxDelay (zero means 2s) between attempts.
type WaitOptions = engine.WaitOptions

// CreateOptions refine Create: State and Set, the new row's state and
// extra columns.
type CreateOptions = engine.CreateOptions

// ChangeOptions describe a Transition: From (the states the row must be
// in), To (the new state), Keep and TTL (renew instead of releasing), Set
// (extra columns).
type ChangeOptions = engine.ChangeOptions

// Assignment sets an extra, non-lease column in the same statement as a
// lease operation. Build it with Set.
type Assignment = engine.Assignment

// Set builds an Assignment. The column is validated when it is used.
func Set(column string, value any) Assignment { return engine.Set(column, value) }

// DB is what every operation runs on: *sql.DB, *sql.Tx, *sql.Conn,
// *sqlx.DB, *sqlx.Tx, anything with ExecContext, QueryContext and
// QueryRowContext.
type DB = engine.DB

// TxBeginner is a database that begins transactions (*sql.DB, *sqlx.DB,
// *sql.Conn), for RunFenced.
type TxBeginner = engine.TxBeginner

// Fence proves, inside a transaction, that a grant still holds (build it
// with Lease.Fence). Its Check makes a token-checked write that always
// changes the row, so the row stays locked until the transaction ends; it
// returns a *LostError when the grant no longer holds.
type Fence = engine.Fence

// RunFenced runs fn in a new transaction on db, then checks every fence
// in order (session, then request: the one lock order), and commits only
// if fn succeeded and every fence still holds. Write a side effect in fn
// with tx: it commits only while the grants hold. The fences lock their
// rows only at the end, never while fn works. When a fence is lost the
// transaction rolls back and the error is its *LostError (ErrLost).
func RunFenced(ctx context.Context, db TxBeginner, fences []Fence, fn func(tx *sql.Tx) error) error {
	return engine.WithFences(ctx, db, fences, fn)
}

// Dialect is the SQL dialect of a database: MySQL (and MariaDB),
// Postgres or SQLite. Its String is the name ParseDialect reads.
type Dialect = engine.Dialect

// The dialects.
const (
	MySQL    = engine.MySQL
	Postgres = engine.Postgres
	SQLite   = engine.SQLite
)

// ParseDialect reads a dialect's name: "mysql" (or "mariadb"),
// "postgres" (or "postgresql", "pgx"), "sqlite" (or "sqlite3").
func ParseDialect(name string) (Dialect, error) { return engine.ParseDialect(name) }

// DetectDialect names the dialect of a *sql.DB (or *sqlx.DB, *sql.Tx,
// *sql.Conn) from its driver's type, sending nothing.
func DetectDialect(db any) (Dialect, error) { return engine.DetectDialect(db) }

// Table is a validated table spec: its name and its lease columns. Build
// it with NewTable; the zero Table is unusable.
type Table = engine.Table

// Columns names the lease columns of a table: Key (the primary key or a
// unique column), Holder, Token, ExpiresAt and Generation are required;
// State and UpdatedAt are optional.
type Columns = engine.Columns

// NewTable checks a table name and its columns (each a plain or
// schema-qualified identifier) and returns the Table.
func NewTable(name string, cols Columns) (Table, error) { return engine.NewTable(name, cols) }

// Observer is how rowlease reports what it does, for traces, metrics and
// logs (contrib/otel adapts it to OpenTelemetry): Start begins a unit of
// work and returns its context and end function, Op reports a finished
// lease operation, Event a point in time. Nil costs nothing. Nothing
// passed to it ever carries a token.
type Observer = engine.Observer

// Op describes one finished lease operation: Table, Name, Verdict, Start,
// Duration, Generation and Err. It never carries a token.
type Op = engine.Op

// Span names a unit of work reported through Observer.Start: Name and
// Attrs.
type Span = engine.Span

// Attr is one attribute (Key, Value) of a span, an operation or an event.
type Attr = engine.Attr

// Attribute keys of the lease's own operations and spans (Attr.Key).
// Values are strings, int64s or bools. Each package that reports spans or
// events names its own keys besides these.
const (
	AttrTable      = engine.AttrTable
	AttrLease      = engine.AttrLease // which lease of a flow: session, request, tool:<name>
	AttrGeneration = engine.AttrGeneration
	AttrVerdict    = engine.AttrVerdict // one of the Verdict… values
	AttrAttempt    = engine.AttrAttempt
)

// Verdicts: how lease operations, spans and tool calls ended (AttrVerdict,
// Op.Verdict).
const (
	VerdictOK       = engine.VerdictOK       // done (a renewal, a release, a confirmation…)
	VerdictAcquired = engine.VerdictAcquired // a new grant or a reentry
	VerdictHeld     = engine.VerdictHeld     // ErrHeld
	VerdictLost     = engine.VerdictLost     // ErrLost
	VerdictNotFound = engine.VerdictNotFound // ErrNotFound
	VerdictState    = engine.VerdictState    // ErrState
	VerdictExists   = engine.VerdictExists   // ErrExists
	VerdictInvalid  = engine.VerdictInvalid  // ErrInvalid: refused before any SQL
	VerdictError    = engine.VerdictError    // the driver's error: outcome unknown
)

// SpanFencedTx is the span of a fenced transaction (RunFenced, and the
// side effects of package toolexec).
const SpanFencedTx = engine.SpanFencedTx

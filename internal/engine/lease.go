package engine

import (
	"log/slog"
	"strings"
	"time"

	"github.com/rowlease/rowlease/internal/driver"
)

// Key is the type of a row's key: a string or an integer.
type Key interface {
	~string | ~int | ~int32 | ~int64 | ~uint32
}

// TTL bounds. A TTL outside them is rejected before any SQL is sent.
const (
	MinTTL = time.Millisecond
	MaxTTL = 24 * time.Hour
)

// MaxHolderLen is the longest holder accepted, in bytes (it fits a
// VARCHAR(191) utf8mb4 column, the widest that MySQL indexes by default).
const MaxHolderLen = 191

// MaxKeyLen is the longest key of a string kind accepted, in bytes, for the
// same reason.
const MaxKeyLen = 191

// Clock gives the local time used for trust deadlines. It must carry a
// monotonic reading, as time.Now does; tests may inject their own.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Options configure a Lease. The zero value is valid.
type Options struct {
	// SafetyMargin is subtracted from the TTL (with Lease.Resolution) to
	// give the local trust deadline. Zero means TTL/10. Every TTL used must
	// exceed it plus the resolution.
	// Distributed engines that let node clocks drift (up to ~500ms) need a
	// margin above that drift.
	SafetyMargin time.Duration
	// Clock is the local monotonic clock; nil means time.Now.
	Clock Clock
	// Prepare says whether statements run on a pool (*sql.DB, *sqlx.DB)
	// are prepared once and kept; see PrepareMode. Inside a transaction
	// the pool began, pass InTx(pool, tx) to run the kept statements
	// there; on a bare *sql.Tx or a *sql.Conn statements are sent as text.
	Prepare PrepareMode
	// ExpiryResolution declares an ExpiresAt column coarser than a
	// microsecond: time.Second for a MySQL DATETIME or a PostgreSQL
	// timestamptz(0), 10ms for DATETIME(2), and so on (a power of ten
	// between 1µs and 1s). The database truncates or rounds now+TTL to it,
	// so the stored expiry may fall up to one resolution early: every
	// trust deadline is moved that much earlier, and a TTL must exceed the
	// safety margin plus the resolution. Zero means a column that keeps
	// microseconds (DATETIME(6), timestamptz, SQLite's integer), as the
	// shipped tables do. An undeclared coarse column breaks the deadline
	// guarantee.
	ExpiryResolution time.Duration
	// Observer, when set, is told of every operation (see Observer); nil
	// costs nothing.
	Observer Observer
	// MultiPrimary declares a MySQL-protocol multi-primary cluster
	// (MariaDB Galera) whose nodes one pool's connections may reach in
	// turn, behind a load balancer or a round-robin connector. A node
	// applies the others' writes a little later, so a token-checked write
	// sent right after the holder's previous write (through another node)
	// can match no row although nothing changed. With MultiPrimary, such a
	// write that matched no row is run once more under wsrep_sync_wait
	// (MariaDB's SET STATEMENT), so that its node first applies every
	// write committed before it; only a second miss is ErrLost. Single
	// servers, and a cluster reached one node per pool or with
	// wsrep_sync_wait set in the DSN, do not need it and pay nothing
	// without it. MySQL dialect only; on Percona XtraDB Cluster, which has
	// no SET STATEMENT, set wsrep_sync_wait in the DSN instead.
	MultiPrimary bool
	// Logger receives the warnings of the first-use check (on SQLite, a
	// busy timeout of 0 or a journal mode other than WAL). Nil means
	// slog.Default(), as everywhere in rowlease.
	Logger *slog.Logger
	// SkipCheck turns off the first-use check of each database handle
	// (see the package doc, "First use"): for go-sqlmock tests that pin
	// every statement, or a database whose catalog the Lease may not
	// read. A wrong dialect or an undeclared coarse expiry column then
	// goes unnoticed.
	SkipCheck bool
}

// Assignment sets an extra, non-lease column in the same statement as a
// lease operation (for example a request's reply when it is marked done).
type Assignment struct {
	Column string
	Value  any
}

// Set builds an Assignment. The column is validated when it is used.
func Set(column string, value any) Assignment { return Assignment{Column: column, Value: value} }

// Grant is the proof of a lease held. It is a value: Renew and Transition
// return the updated grant.
type Grant[K Key] struct {
	Key        K
	Holder     string
	Token      Token // secret; prints as [redacted]
	Generation int64 // fencing generation: strictly increasing per row with every new grant
	TTL        time.Duration
	// Deadline is the local trust deadline on the monotonic clock: the send
	// time of the last successful acquire or renew + TTL − safety margin −
	// expiry resolution (see Lease.Resolution). Past it, act as if the
	// lease were lost.
	Deadline time.Time
}

// Trusted reports whether now is before the trust deadline.
func (g Grant[K]) Trusted(now time.Time) bool { return now.Before(g.Deadline) }

// Snapshot is what Inspect reads of a row.
type Snapshot struct {
	Holder     string        // current holder ("" when free)
	Generation int64         // generation of the last grant
	State      string        // the state column ("" when the table has none)
	Held       bool          // a token is set and expires_at is in the future (database clock)
	Remaining  time.Duration // time left before expiry when held, by the database clock
}

// AcquireOptions refine Acquire.
type AcquireOptions struct {
	// Token, when set, is the token of a grant the caller already holds:
	// the acquire is then a reentry that keeps the token and generation.
	// On a row that is free (released, or expired and taken over since)
	// it is a new grant under the same token, generation+1: use the grant
	// it returns, since a copy of the earlier one is lost to every
	// token-checked operation.
	Token Token
	// InStates restricts the acquire to rows whose state is one of these.
	InStates []string
	// SetState sets the state column in the same statement.
	SetState string
	// Set assigns extra columns in the same statement.
	Set []Assignment
}

// ChangeOptions describe a Transition.
type ChangeOptions struct {
	// From restricts the change to rows whose state is one of these.
	From []string
	// To sets the state column.
	To string
	// Keep renews the lease for TTL instead of releasing it.
	Keep bool
	// TTL is the renewal when Keep is set.
	TTL time.Duration
	// Set assigns extra columns in the same statement.
	Set []Assignment
}

// CreateOptions refine Create and Ensure.
type CreateOptions struct {
	State string       // the state column's value
	Set   []Assignment // extra columns
}

// Lease runs lease operations on one table in one dialect. It is safe for
// concurrent use. Every operation takes the database to run on, so a caller
// can use its own transaction.
type Lease[K Key] struct {
	dialect Dialect
	// drv is the dialect's driver, chosen once in New, and caps what its
	// statements can do: the rest of the package asks them, never which
	// dialect this is.
	drv     driver.Driver
	caps    driver.Caps
	table   Table
	margin  time.Duration
	clock   Clock
	prepare PrepareMode
	res     time.Duration // clock or column resolution, whichever is coarser
	coarse  bool          // a declared expiry column coarser than a microsecond
	stmts   stmtCache
	b       sqlBuilder
	// shape names what b writes (dialect, table, columns): Leases with
	// the same shape write the same SQL, so built statements are cached
	// under it (see jointSQL).
	shape string
	obs   Observer // nil: nothing is reported
	// multiPrimary: confirm a token-checked miss causally (Options.MultiPrimary).
	multiPrimary bool
	// probes remembers the first-use check of each database handle.
	probes    probeCache
	skipCheck bool
	log       *slog.Logger

	acquireQ, renewQ, releaseQ, deleteQ, verifyQ, verifyLockQ, inspectQ, createQ compiled
}

// New validates its input and returns a Lease for table in dialect.
func New[K Key](dialect Dialect, table Table, opts Options) (*Lease[K], error) {
	if !dialect.valid() {
		return nil, invalid("dialect", dialect.String()+" is not supported")
	}
	if table.name == "" {
		return nil, invalid("table", "zero Table; build it with NewTable")
	}
	if opts.SafetyMargin < 0 {
		return nil, invalid("safety margin", "negative")
	}
	if opts.SafetyMargin >= MaxTTL {
		return nil, invalid("safety margin", "not below the largest TTL")
	}
	if opts.Prepare < PrepareAuto || opts.Prepare > PrepareAlways {
		return nil, invalid("prepare mode", "unknown")
	}
	drv := dialect.driver()
	caps := drv.Caps()
	if opts.MultiPrimary && !caps.MultiPrimary {
		return nil, invalid("multi-primary", "only for the MySQL dialect (MariaDB Galera)")
	}
	if r := opts.ExpiryResolution; r != 0 && !powerOfTenMicros(r) {
		return nil, invalid("expiry resolution", "not a power of ten between 1µs and 1s")
	}
	l := &Lease[K]{dialect: dialect, table: table, margin: opts.SafetyMargin, clock: opts.Clock, prepare: opts.Prepare, drv: drv, caps: caps}
	l.res = caps.ClockResolution
	if opts.ExpiryResolution > l.res {
		l.res = opts.ExpiryResolution
	}
	l.coarse = opts.ExpiryResolution > time.Microsecond
	if l.clock == nil {
		l.clock = systemClock{}
	}
	l.obs = opts.Observer
	l.multiPrimary = opts.MultiPrimary
	l.skipCheck = opts.SkipCheck
	l.log = opts.Logger
	if l.log == nil {
		l.log = slog.Default()
	}
	l.b = sqlBuilder{drv: drv, t: table}
	c := table.cols
	l.shape = strings.Join([]string{dialect.String(), table.name, c.Key, c.Holder, c.Token, c.ExpiresAt, c.Generation, c.State, c.UpdatedAt}, "\x00")
	l.acquireQ = compile(dialect, l.b.acquire(nil, false, nil, true))
	l.renewQ = compile(dialect, l.b.renew())
	l.releaseQ = compile(dialect, l.b.release())
	l.deleteQ = compile(dialect, l.b.delete())
	l.verifyQ = compile(dialect, l.b.verify(false))
	l.verifyLockQ = compile(dialect, l.b.verify(true))
	l.inspectQ = compile(dialect, l.b.inspect())
	l.createQ = compile(dialect, l.b.create(false, nil))
	return l, nil
}

// powerOfTenMicros reports whether r is 1µs, 10µs, … or 1s.
func powerOfTenMicros(r time.Duration) bool {
	for p := time.Microsecond; p <= time.Second; p *= 10 {
		if r == p {
			return true
		}
	}
	return false
}

// Resolution is how far a stored expiry may fall short of the database
// clock's now + TTL: the clock's resolution (1µs on MySQL and PostgreSQL,
// 1ms on SQLite, whose clock reads whole milliseconds, up to 1ms behind) or
// the declared Options.ExpiryResolution, whichever is coarser. Every trust
// deadline is moved this much earlier, so that it still falls a whole
// safety margin before the database expiry.
func Resolution[K Key](l *Lease[K]) time.Duration { return l.res }

// DialectOf returns l's dialect.
func DialectOf[K Key](l *Lease[K]) Dialect { return l.dialect }

// TableOf returns l's table spec.
func TableOf[K Key](l *Lease[K]) Table { return l.table }

func (l *Lease[K]) marginFor(ttl time.Duration) time.Duration {
	if l.margin == 0 {
		return ttl / 10
	}
	return l.margin
}

// deadline is the trust deadline of a grant whose statement was sent at
// sent: a whole safety margin before the earliest expiry the database may
// have stored.
func (l *Lease[K]) deadline(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - l.marginFor(ttl) - l.res)
}

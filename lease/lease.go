package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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
	// are prepared once and kept; see PrepareMode. Statements inside a
	// transaction or on a *sql.Conn are always sent as text.
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
	table   Table
	margin  time.Duration
	clock   Clock
	prepare PrepareMode
	res     time.Duration // clock or column resolution, whichever is coarser
	coarse  bool          // a declared expiry column coarser than a microsecond
	stmts   stmtCache
	b       sqlBuilder
	obs     Observer // nil: nothing is reported
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
	if opts.MultiPrimary && dialect != MySQL {
		return nil, invalid("multi-primary", "only for the MySQL dialect (MariaDB Galera)")
	}
	if r := opts.ExpiryResolution; r != 0 && !powerOfTenMicros(r) {
		return nil, invalid("expiry resolution", "not a power of ten between 1µs and 1s")
	}
	l := &Lease[K]{dialect: dialect, table: table, margin: opts.SafetyMargin, clock: opts.Clock, prepare: opts.Prepare}
	l.res = dialect.clockResolution()
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
	l.b = sqlBuilder{d: dialect, t: table}
	l.acquireQ = compile(dialect, l.b.acquire(nil, false, nil))
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
func (l *Lease[K]) Resolution() time.Duration { return l.res }

// Dialect returns the lease's dialect.
func (l *Lease[K]) Dialect() Dialect { return l.dialect }

// Table returns the lease's table spec.
func (l *Lease[K]) Table() Table { return l.table }

// keyText is the key as text, for errors: a string kind as it is, an
// integer in decimal. It looks at the underlying kind, so a named type's
// String method plays no part.
func keyText[K Key](k K) string {
	v := reflect.ValueOf(k)
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Uint32:
		return strconv.FormatUint(v.Uint(), 10)
	}
	return strconv.FormatInt(v.Int(), 10)
}

// checkKey refuses a key of a string kind that CheckText refuses (the
// empty string among them). Every integer is a key, 0 and negative ones
// included: 0 is a valid primary key on every dialect.
func (l *Lease[K]) checkKey(k K) error {
	// Every type whose underlying type is string (type SessionID string),
	// not only string itself.
	if v := reflect.ValueOf(k); v.Kind() == reflect.String {
		return CheckText("key", v.String(), MaxKeyLen)
	}
	return nil
}

func checkHolder(h string) error { return CheckText("holder", h, MaxHolderLen) }

// CheckText checks text that the lease tables store and compare, so that
// it behaves alike on every dialect, and returns a *ValidationError (field
// names it) when it is:
//
//   - empty;
//   - longer than maxBytes bytes;
//   - not valid UTF-8;
//   - holding a NUL byte (PostgreSQL cannot store one);
//   - ending in a space: MySQL's and MariaDB's PAD SPACE collations (the
//     utf8mb4_bin of the shipped tables among them) compare "a" and "a "
//     as equal, so they would be one key there and two on PostgreSQL and
//     SQLite.
//
// The error never quotes s. Keys of a string kind and holders are checked
// with it (maxBytes MaxKeyLen and MaxHolderLen); use it for other text that
// takes part in a unique key, such as a client request id.
func CheckText(field, s string, maxBytes int) error {
	switch {
	case s == "":
		return invalid(field, "empty")
	case len(s) > maxBytes:
		return invalid(field, "longer than "+strconv.Itoa(maxBytes)+" bytes")
	case !utf8.ValidString(s):
		return invalid(field, "not UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return invalid(field, "contains a NUL byte")
	case s[len(s)-1] == ' ':
		return invalid(field, "ends with a space (MySQL would compare it equal to the text without it)")
	}
	return nil
}

func (l *Lease[K]) marginFor(ttl time.Duration) time.Duration {
	if l.margin == 0 {
		return ttl / 10
	}
	return l.margin
}

// ValidateTTL reports a TTL outside MinTTL..MaxTTL as a *ValidationError.
func ValidateTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return invalid("ttl", "must be positive")
	case ttl < MinTTL:
		return invalid("ttl", "below "+MinTTL.String())
	case ttl > MaxTTL:
		return invalid("ttl", "above "+MaxTTL.String())
	}
	return nil
}

func (l *Lease[K]) checkTTL(ttl time.Duration) error {
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	if m := l.marginFor(ttl); m+l.res >= ttl {
		return invalid("ttl", "not above the safety margin "+m.String()+" plus the expiry resolution "+l.res.String())
	}
	return nil
}

// deadline is the trust deadline of a grant whose statement was sent at
// sent: a whole safety margin before the earliest expiry the database may
// have stored.
func (l *Lease[K]) deadline(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - l.marginFor(ttl) - l.res)
}

func (l *Lease[K]) checkStates(field string, states ...string) error {
	for _, s := range states {
		if s == "" {
			continue
		}
		if l.table.cols.State == "" {
			return invalid(field, "the table spec has no State column")
		}
		if err := CheckText(field, s, 64); err != nil {
			return err
		}
	}
	return nil
}

// checkIn validates a state condition: no empty states.
func (l *Lease[K]) checkIn(field string, in []string) error {
	for _, s := range in {
		if s == "" {
			return invalid(field, "empty state in the condition")
		}
	}
	return l.checkStates(field, in...)
}

func (l *Lease[K]) checkSet(set []Assignment) error {
	seen := map[string]bool{}
	for _, a := range set {
		if !validIdent(a.Column) {
			return invalid("assignment", fmt.Sprintf("column %q is not a valid identifier", a.Column))
		}
		if l.table.isLeaseColumn(a.Column) {
			return invalid("assignment", fmt.Sprintf("column %q is a lease column", a.Column))
		}
		if seen[a.Column] {
			return invalid("assignment", fmt.Sprintf("column %q assigned twice", a.Column))
		}
		seen[a.Column] = true
	}
	return nil
}

func (l *Lease[K]) checkDB(db DB) error {
	if isNil(db) {
		return invalid("db", "nil")
	}
	return nil
}

func (l *Lease[K]) checkGrant(g Grant[K]) error {
	if err := l.checkKey(g.Key); err != nil {
		return err
	}
	if g.Token.IsZero() {
		return invalid("grant", "zero token")
	}
	return nil
}

// exec runs an UPDATE that hands back the generation and reports whether it
// matched the row. PostgreSQL and SQLite use RETURNING. MySQL reads the
// value that LAST_INSERT_ID(expr) put in the OK packet when rows affected
// is 1. Every successful statement changes a microsecond expiry column, so
// 1 is what a match reports in either affected-rows mode. Only on a
// declared coarser column (Options.ExpiryResolution) can a renewal in the
// same second leave the row unchanged; there, and only there, 0 rows
// affected with a non-zero insert id counts as a match (MySQL sends 0 when
// no row was evaluated; engines that misreport LAST_INSERT_ID(expr), as
// Vitess 16.0 did, must not be given a coarse column).
//
// A deadlock, serialization or certification victim in autocommit is sent
// again (see MaxAttempts). A token-checked statement (checked) that matched
// no row is, with Options.MultiPrimary, sent once more causally: only a
// second miss is a miss.
func (l *Lease[K]) exec(ctx context.Context, db DB, c compiled, m map[string]any, checked bool) (gen int64, ok bool, err error) {
	args := c.args(m)
	run := func(q string) error {
		return l.retry(ctx, db, func() error {
			var err error
			gen, ok, err = l.execOnce(ctx, db, q, args)
			return err
		})
	}
	err = run(c.query)
	if err == nil && !ok && checked && l.multiPrimary {
		err = run(causal(c.query))
	}
	return gen, ok, err
}

func (l *Lease[K]) execOnce(ctx context.Context, db DB, q string, args []any) (gen int64, ok bool, err error) {
	if l.dialect != MySQL {
		err = l.queryRow(ctx, db, q, args).Scan(&gen)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return gen, err == nil, err
	}
	res, err := l.execQ(ctx, db, q, args)
	if err != nil {
		return 0, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, false, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, false, err
	}
	if n == 1 || (n == 0 && id != 0 && l.coarse) {
		return id, true, nil
	}
	return 0, false, nil
}

func (l *Lease[K]) translate(k K, err error) error {
	if err == nil {
		return nil
	}
	if IsDuplicateKey(err) {
		return &DuplicateKeyError{Key: keyText(k), Err: err}
	}
	return err
}

// Acquire takes the lease on key for holder with a new random token. It wins
// when the row is free, or its lease has expired by the database clock. On
// an existing row it is one statement. On failure it reads the row once to
// say why: *ConflictError (ErrHeld), ErrNotFound, or *StateError.
func (l *Lease[K]) Acquire(ctx context.Context, db DB, key K, holder string, ttl time.Duration) (Grant[K], error) {
	return l.AcquireWith(ctx, db, key, holder, ttl, AcquireOptions{})
}

// AcquireWith is Acquire with options: reentry with a held token, a state
// condition, and columns set in the same statement.
func (l *Lease[K]) AcquireWith(ctx context.Context, db DB, key K, holder string, ttl time.Duration, o AcquireOptions) (out Grant[K], rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "acquire", VerdictAcquired, time.Now(), &out.Generation, &rerr)
	}
	if err := l.checkDB(db); err != nil {
		return Grant[K]{}, err
	}
	if err := l.checkKey(key); err != nil {
		return Grant[K]{}, err
	}
	if err := checkHolder(holder); err != nil {
		return Grant[K]{}, err
	}
	if err := l.checkTTL(ttl); err != nil {
		return Grant[K]{}, err
	}
	if err := l.checkIn("states", o.InStates); err != nil {
		return Grant[K]{}, err
	}
	if err := l.checkStates("state", o.SetState); err != nil {
		return Grant[K]{}, err
	}
	if err := l.checkSet(o.Set); err != nil {
		return Grant[K]{}, err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return Grant[K]{}, err
	}
	tok := o.Token
	if tok.IsZero() {
		var err error
		if tok, err = NewToken(); err != nil {
			return Grant[K]{}, err
		}
	}
	c := l.acquireQ
	if len(o.InStates) > 0 || o.SetState != "" || len(o.Set) > 0 {
		c = compile(l.dialect, l.b.acquire(o.InStates, o.SetState != "", o.Set))
	}
	m := vals("key", key, "tok", tok.Secret(), "holder", holder, "ttl", ttl.Microseconds(), "state", o.SetState)
	addStates(m, o.InStates)
	addSet(m, o.Set)
	sent := l.clock.Now()
	gen, ok, err := l.exec(ctx, db, c, m, false)
	if err != nil {
		return Grant[K]{}, l.translate(key, err)
	}
	if !ok {
		return Grant[K]{}, l.whyNot(ctx, db, key, o.InStates)
	}
	return Grant[K]{Key: key, Holder: holder, Token: tok, Generation: gen, TTL: ttl,
		Deadline: l.deadline(sent, ttl)}, nil
}

// whyNot classifies a failed acquire with one read.
func (l *Lease[K]) whyNot(ctx context.Context, db DB, key K, want []string) error {
	st, err := l.Inspect(ctx, db, key)
	if err != nil {
		return err
	}
	if len(want) > 0 {
		okState := false
		for _, w := range want {
			okState = okState || w == st.State
		}
		if !okState {
			return &StateError{Key: keyText(key), State: st.State, Want: want}
		}
	}
	if st.Held {
		return &ConflictError{Key: keyText(key), Holder: st.Holder, Generation: st.Generation, Remaining: st.Remaining}
	}
	// Free now but not a moment ago: another holder released in between.
	return &ConflictError{Key: keyText(key), Holder: st.Holder, Generation: st.Generation}
}

// Renew extends a held lease to now + ttl by the database clock (never
// backwards) and returns the grant with its new trust deadline. One
// statement. A grant whose token or generation no longer matches gives
// *LostError (ErrLost). A lease past its expiry that nobody has taken over
// can still be renewed.
func (l *Lease[K]) Renew(ctx context.Context, db DB, g Grant[K], ttl time.Duration) (out Grant[K], rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "renew", VerdictOK, time.Now(), &out.Generation, &rerr)
	}
	if err := l.checkDB(db); err != nil {
		return g, err
	}
	if err := l.checkGrant(g); err != nil {
		return g, err
	}
	if err := l.checkTTL(ttl); err != nil {
		return g, err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return g, err
	}
	sent := l.clock.Now()
	gen, ok, err := l.exec(ctx, db, l.renewQ, vals("key", g.Key, "tok", g.Token.Secret(), "gen", g.Generation, "ttl", ttl.Microseconds()), true)
	if err != nil {
		return g, err
	}
	if !ok {
		return g, &LostError{Key: keyText(g.Key), Op: "renew"}
	}
	g.Generation, g.TTL, g.Deadline = gen, ttl, l.deadline(sent, ttl)
	return g, nil
}

// Release gives the lease up: holder, token and expiry become NULL. One
// statement. A grant whose token or generation no longer matches gives
// *LostError: nothing was changed, and someone else (or a newer grant of
// the same token) may hold the lease.
func (l *Lease[K]) Release(ctx context.Context, db DB, g Grant[K]) (rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "release", VerdictOK, time.Now(), &g.Generation, &rerr)
	}
	if err := l.checkDB(db); err != nil {
		return err
	}
	if err := l.checkGrant(g); err != nil {
		return err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return err
	}
	m := vals("key", g.Key, "tok", g.Token.Secret(), "gen", g.Generation)
	var ok bool
	var err error
	if l.dialect == MySQL {
		_, ok, err = l.exec(ctx, db, l.releaseQ, m, true)
	} else {
		ok, err = l.execOne(ctx, db, l.releaseQ, m)
	}
	if err != nil {
		return err
	}
	if !ok {
		return &LostError{Key: keyText(g.Key), Op: "release"}
	}
	return nil
}

// Transition changes a held row in one token-checked (and, with From,
// state-checked) statement: it sets the state and extra columns, and either
// releases the lease or, with Keep, renews it for TTL. It returns the
// updated grant (with a new deadline when kept). A mismatch of token,
// generation or state gives *LostError.
func (l *Lease[K]) Transition(ctx context.Context, db DB, g Grant[K], o ChangeOptions) (out Grant[K], rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "transition", VerdictOK, time.Now(), &out.Generation, &rerr)
	}
	if err := l.checkDB(db); err != nil {
		return g, err
	}
	if err := l.checkGrant(g); err != nil {
		return g, err
	}
	if err := l.checkIn("from states", o.From); err != nil {
		return g, err
	}
	if err := l.checkStates("state", o.To); err != nil {
		return g, err
	}
	if err := l.checkSet(o.Set); err != nil {
		return g, err
	}
	if o.Keep {
		if err := l.checkTTL(o.TTL); err != nil {
			return g, err
		}
	} else if o.TTL != 0 {
		return g, invalid("ttl", "set without Keep")
	}
	if err := l.probe(ctx, db, false); err != nil {
		return g, err
	}
	c := compile(l.dialect, l.b.change(o.From, o.To != "", o.Set, o.Keep))
	m := vals("key", g.Key, "tok", g.Token.Secret(), "gen", g.Generation, "ttl", o.TTL.Microseconds(), "state", o.To)
	addStates(m, o.From)
	addSet(m, o.Set)
	sent := l.clock.Now()
	gen, ok, err := l.exec(ctx, db, c, m, true)
	if err != nil {
		return g, l.translate(g.Key, err)
	}
	if !ok {
		return g, &LostError{Key: keyText(g.Key), Op: "transition"}
	}
	g.Generation = gen
	if o.Keep {
		g.TTL, g.Deadline = o.TTL, l.deadline(sent, o.TTL)
	} else {
		g.Deadline = sent // released: no longer trusted
	}
	return g, nil
}

// Verify checks in one statement that g still holds: the token and the
// generation match and the lease has not expired by the database clock. Inside a transaction on
// MySQL and PostgreSQL it also locks the row (SELECT … FOR UPDATE) until the
// transaction ends, so no one can take the lease over before a side effect
// written in the same transaction commits. (On SQLite the transaction's
// database lock does the same.) It returns the generation, or *LostError.
func (l *Lease[K]) Verify(ctx context.Context, db DB, g Grant[K], lock bool) (rgen int64, rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "verify", VerdictOK, time.Now(), &rgen, &rerr)
	}
	if err := l.checkDB(db); err != nil {
		return 0, err
	}
	if err := l.checkGrant(g); err != nil {
		return 0, err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return 0, err
	}
	c := l.verifyQ
	if lock {
		c = l.verifyLockQ
	}
	var gen int64
	args := c.args(vals("key", g.Key, "tok", g.Token.Secret(), "gen", g.Generation))
	read := func(q string) error {
		return l.retry(ctx, db, func() error { return l.queryRow(ctx, db, q, args).Scan(&gen) })
	}
	err := read(c.query)
	if errors.Is(err, sql.ErrNoRows) && l.multiPrimary {
		err = read(causal(c.query))
	}
	if errors.Is(err, sql.ErrNoRows) {
		return 0, &LostError{Key: keyText(g.Key), Op: "check"}
	}
	return gen, err
}

// Inspect reads the row's holder, generation, state and remaining time, all
// judged by the database clock. A missing row gives ErrNotFound.
func (l *Lease[K]) Inspect(ctx context.Context, db DB, key K) (rst Snapshot, rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "inspect", VerdictOK, time.Now(), &rst.Generation, &rerr)
	}
	if err := l.checkDB(db); err != nil {
		return Snapshot{}, err
	}
	if err := l.checkKey(key); err != nil {
		return Snapshot{}, err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return Snapshot{}, err
	}
	var st Snapshot
	var held int
	var micros int64
	q := l.inspectQ.query
	if l.multiPrimary {
		q = causal(q) // what the cluster committed, not what this node applied
	}
	err := l.retry(ctx, db, func() error {
		return l.queryRow(ctx, db, q, l.inspectQ.args(vals("key", key))).
			Scan(&st.Holder, &st.Generation, &st.State, &held, &micros)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Snapshot{}, fmt.Errorf("%w (key %q)", ErrNotFound, keyText(key))
	}
	if err != nil {
		return Snapshot{}, err
	}
	st.Held = held == 1
	if st.Held && micros > 0 {
		st.Remaining = time.Duration(micros) * time.Microsecond
	}
	return st, nil
}

// Create inserts a new row already held by holder, with generation 1, in one
// statement. If the key (or another unique key of the table) exists it
// returns *DuplicateKeyError (ErrExists) and writes nothing. Columns that the
// table requires besides the lease columns go in o.Set.
func (l *Lease[K]) Create(ctx context.Context, db DB, key K, holder string, ttl time.Duration, o CreateOptions) (out Grant[K], rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "create", VerdictAcquired, time.Now(), &out.Generation, &rerr)
	}
	if err := l.checkDB(db); err != nil {
		return Grant[K]{}, err
	}
	if err := l.checkKey(key); err != nil {
		return Grant[K]{}, err
	}
	if err := checkHolder(holder); err != nil {
		return Grant[K]{}, err
	}
	if err := l.checkTTL(ttl); err != nil {
		return Grant[K]{}, err
	}
	if err := l.checkStates("state", o.State); err != nil {
		return Grant[K]{}, err
	}
	if err := l.checkSet(o.Set); err != nil {
		return Grant[K]{}, err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return Grant[K]{}, err
	}
	tok, err := NewToken()
	if err != nil {
		return Grant[K]{}, err
	}
	c := l.createQ
	if o.State != "" || len(o.Set) > 0 {
		c = compile(l.dialect, l.b.create(o.State != "", o.Set))
	}
	m := vals("key", key, "tok", tok.Secret(), "holder", holder, "ttl", ttl.Microseconds(), "state", o.State)
	addSet(m, o.Set)
	sent := l.clock.Now()
	if err := l.retry(ctx, db, func() error {
		_, err := l.execQ(ctx, db, c.query, c.args(m))
		return err
	}); err != nil {
		return Grant[K]{}, l.translate(key, err)
	}
	return Grant[K]{Key: key, Holder: holder, Token: tok, Generation: 1, TTL: ttl,
		Deadline: l.deadline(sent, ttl)}, nil
}

// Delete removes the row if g still holds it, in one token-checked
// statement: for a row the holder created and gives up before anything
// came of it. A grant whose token or generation no longer matches gives
// *LostError and deletes nothing.
//
// The row's generation goes with it: a later Create of the same key starts
// again at generation 1. Keeping it would need the deleted row to stay (a
// tombstone, which Create would then collide with) or a counter kept
// elsewhere (a second table and a second statement in every Create, on
// tables that may be the user's own). So generations order the grants of
// one row, not of one key across deletions: fence on the generation only
// where keys are not reused — the request and tool-execution rows of this
// module are keyed by fresh UUIDs — and do not Delete a row whose
// generation went out to another system.
func (l *Lease[K]) Delete(ctx context.Context, db DB, g Grant[K]) (rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "delete", VerdictOK, time.Now(), &g.Generation, &rerr)
	}
	if err := l.checkDB(db); err != nil {
		return err
	}
	if err := l.checkGrant(g); err != nil {
		return err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return err
	}
	ok, err := l.execOne(ctx, db, l.deleteQ, vals("key", g.Key, "tok", g.Token.Secret(), "gen", g.Generation))
	if err != nil {
		return err
	}
	if !ok {
		return &LostError{Key: keyText(g.Key), Op: "delete"}
	}
	return nil
}

// execOne runs a statement that needs nothing back and reports whether it
// affected exactly one row. Only for statements that always change the row
// they match (a token set to NULL, a row deleted), so that MySQL's
// changed-rows count is as good as a matched-rows count.
//
// Like exec, it sends a victim again in autocommit and, with
// Options.MultiPrimary, confirms a miss causally.
func (l *Lease[K]) execOne(ctx context.Context, db DB, c compiled, m map[string]any) (bool, error) {
	args := c.args(m)
	var n int64
	run := func(q string) error {
		return l.retry(ctx, db, func() error {
			res, err := l.execQ(ctx, db, q, args)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
	}
	err := run(c.query)
	if err == nil && n != 1 && l.multiPrimary {
		err = run(causal(c.query))
	}
	return n == 1, err
}

// Ensure inserts a free row for key (generation 0) unless one exists. It
// is one statement and never fails on an existing row.
func (l *Lease[K]) Ensure(ctx context.Context, db DB, key K, o CreateOptions) (rerr error) {
	if l.obs != nil {
		var none int64
		defer l.observe(ctx, "ensure", VerdictOK, time.Now(), &none, &rerr)
	}
	if err := l.checkDB(db); err != nil {
		return err
	}
	if err := l.checkKey(key); err != nil {
		return err
	}
	if err := l.checkStates("state", o.State); err != nil {
		return err
	}
	if err := l.checkSet(o.Set); err != nil {
		return err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return err
	}
	c := compile(l.dialect, l.b.ensure(o.State != "", o.Set))
	m := vals("key", key, "state", o.State)
	addSet(m, o.Set)
	return l.retry(ctx, db, func() error {
		_, err := resolve(db).ExecContext(ctx, c.query, c.args(m)...)
		return err
	})
}

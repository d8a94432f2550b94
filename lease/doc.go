// Package lease turns rows of your own SQL database into leases: exclusive,
// time-bounded rights taken, kept and given up by single atomic conditional
// statements (compare-and-swap), proved by a random token, ordered by a
// fencing generation, and timed by the database clock alone.
//
// It speaks MySQL 8 / MariaDB 10.6+, PostgreSQL 13+ and SQLite 3.35+, and
// links no database driver but go-sql-driver/mysql (PostgreSQL and SQLite
// errors are recognised through the methods their error types expose, or,
// for mattn/go-sqlite3, through its error's fields). On SQLite both
// modernc.org/sqlite ("sqlite") and mattn/go-sqlite3 ("sqlite3", cgo) are
// supported and tested: duplicate keys become ErrExists, SQLITE_BUSY is
// IsTransient.
//
// # The model
//
// A lease lives in five columns of a row (mapped with Columns, so it can sit
// on a table you already have): holder, token, expires_at, generation, and
// optionally a state. Every operation takes the database to run on (DB:
// *sql.DB, *sql.Tx, *sql.Conn, *sqlx.DB, *sqlx.Tx), so a lease can be taken
// inside your own transaction.
//
//	           Acquire (new token, generation+1)
//	┌──────┐ ─────────────────────────────────▶ ┌──────┐ ◀─┐ Renew, reentry
//	│ free │                                    │ held │ ──┘ (token and generation kept)
//	└──────┘ ◀──── Release / Transition ─────── └──────┘
//	   ▲           (token-checked)                 │  ▲
//	   │                                           │  │ Renew by the old holder
//	   │                 expires_at ≤ database now ▼  │ (nobody took it over)
//	   │  Release by the old holder           ┌─────────┐  Acquire by anyone else
//	   └───────────────────────────────────── │ expired │ ──────────────────────▶ held
//	                                          └─────────┘  (new token, generation+1)
//
// With a state column, Acquire and Transition can also require and set a
// state (processing → success | error), in the same statement.
//
// # Guarantees
//
//   - One statement, one round trip, for Acquire, Renew, Release, Transition,
//     and Create on an existing row; the generation comes back in it
//     (RETURNING on PostgreSQL and SQLite; LAST_INSERT_ID(expr) in the OK
//     packet on MySQL). A failed Acquire reads the row once more, to say who
//     holds it and for how long.
//   - Exactly one winner among any number of concurrent Acquires.
//   - The generation strictly increases with every new grant on a row and is
//     unchanged by reentry and renewal: hand it to systems outside the
//     database as a fencing token. It belongs to the row: Delete, then
//     Create of the same key, starts again at 1 (see Delete for why).
//   - Expiry is decided only in SQL against the database clock
//     (UTC_TIMESTAMP(6), statement_timestamp(), or SQLite's clock), at
//     microsecond precision (SQLite's clock ticks in milliseconds). The
//     application's wall clock is never compared with a stored time.
//     PostgreSQL uses the statement's time, not now(), so a lease taken late
//     in a long transaction still gets its full TTL.
//   - The grant's local trust Deadline — the send time of the last
//     successful acquire or renew + TTL − SafetyMargin − Resolution, on the
//     monotonic clock — falls at least SafetyMargin before the expiry the
//     database stored, as long as the two clocks run at the same rate.
//     Resolution covers how far the stored expiry may fall short of now +
//     TTL: SQLite's clock reads whole milliseconds (up to 1ms behind), and
//     a declared coarse column (Options.ExpiryResolution, e.g. a DATETIME
//     without fraction, which MariaDB truncates) loses up to its step. A
//     TTL must exceed SafetyMargin + Resolution.
//   - Correct under go-sql-driver/mysql's default changed-rows count: every
//     successful statement changes the row (a renewal never moves expires_at
//     backwards and, when it would not move it forward, adds a microsecond),
//     so success is 1 row affected in either mode; clientFoundRows makes no
//     difference. Only on a declared coarse column, where a renewal in the
//     same second leaves the row as it was, does a non-zero LAST_INSERT_ID
//     with 0 rows affected count as a match. MySQL evaluates SET left to
//     right on updated values, so the generation is assigned first; the
//     same SQL intent gives the same result on all three dialects.
//   - Bad input is a *ValidationError before any SQL is sent: an empty
//     string key or holder (an integer key may be anything, 0 and
//     negative numbers included); a key (of any type whose underlying type is string) or
//     holder longer than 191 bytes, not UTF-8, holding a NUL byte or ending
//     in a space; a TTL ≤ 0, below MinTTL or above MaxTTL;
//     a nil database; an invalid identifier.
//   - A key is one key on every dialect. MySQL's PAD SPACE collations
//     (utf8mb4_bin among them) compare "a" and "a " as equal, PostgreSQL
//     and SQLite do not: keys and holders ending in a space are refused
//     everywhere rather than meaning one row here and two there.
//   - A token prints as [redacted] everywhere (fmt, slog, JSON), and never
//     appears in an error.
//
// # What it does not do
//
//   - It does not block by default: a held lease is a conflict at once
//     (ErrHeld). AcquireWait waits instead, polling with a jittered backoff
//     (at most two statements per WaitOptions.MinDelay) until the lease is
//     free or the context ends.
//   - It does not renew by itself: see package heartbeat (heartbeat.Hold
//     acquires, keeps alive, runs your function and releases in one call).
//   - It fences only what checks the generation or commits in a fenced
//     transaction (RunFenced). A side effect outside the database that
//     ignores the generation can still be done twice by a holder that lost
//     its lease (package toolexec records such effects with a stable key).
//   - A holder whose lease expired but was not taken over can still renew
//     or release it: its token still matches. Trust the Deadline, not this.
//
// # Fenced transactions
//
// RunFenced runs a side effect in a transaction that ends
// by confirming every Fence — a token- and generation-checked write on each lease row
// (Confirm) that fails unless the grant still holds — and then commits. The
// side effect commits if and only if every grant held at the end. The lease
// rows are locked only from the confirmations to the commit, so a
// heartbeat renewing them on other connections never waits behind a long
// side effect; and because the check is a write, a multi-primary cluster
// (Galera) certifies it against a takeover on another node, which a
// SELECT … FOR UPDATE would not be.
//
// # Failure handling
//
//   - ErrHeld (*ConflictError): someone else holds the lease and it has not
//     expired; it carries the holder and the time left. Map it to HTTP 409.
//   - ErrLost (*LostError): the grant no longer matches — taken over,
//     released, or the row is in another state. Stop; write nothing more.
//     Nothing was changed by the failed call. Every operation on a grant
//     (Renew, Release, Transition, Delete, Confirm) checks the
//     token and the generation: a token can be granted again (a reentry
//     with AcquireOptions.Token, such as session.Reenter, that finds the
//     row free is a new grant, generation+1, under the same token), and a
//     copy of the earlier grant is then lost, never a way to renew,
//     release, change or delete the newer one.
//   - ErrNotFound: no row has the key. ErrState (*StateError): the row is
//     free but in a state the operation does not accept.
//   - ErrExists: Create hit a unique key; duplicate-key errors of all
//     three drivers are translated (IsDuplicateKey says the same of an
//     error of your own statements).
//   - ErrInvalid (*ValidationError): rejected before any SQL — or, at the
//     first use of a database handle, after the one read of the first-use
//     check and before any write (see First use): a Lease of another
//     dialect than the database (the error names both), or an expiry
//     column coarser than a microsecond that Options.ExpiryResolution does
//     not declare (the error names the column and the setting). Every
//     later operation on that handle returns the same error at once.
//   - On SQLite, a busy timeout of 0 or a journal mode other than WAL is
//     logged as a warning (Options.Logger) at first use, not refused: see
//     First use.
//   - *TimeoutError: a wait that the library bounds itself (not the
//     caller's deadline) ran out, such as a clean-up write bounded by a
//     ReleaseTimeout. It names the wait, its bound and its setting, and
//     says what to do; it matches context.DeadlineExceeded. The packages
//     above lease return it from their bounded waits, so that a bare
//     "context deadline exceeded" comes only from the caller's own
//     context.
//   - Any other error is the driver's, returned as it is: the outcome of a
//     write that failed this way is unknown (it may have committed). Never
//     treat it as loss, and never treat loss as a transient error; retry
//     until the grant's Deadline, then act as if lost. IsTransient picks out
//     a deadlock or serialization victim, which took no effect;
//     IsUnavailable a database that cannot be reached or serve for now (a
//     broken connection, a server down, shutting down or read-only), after
//     which a retry later may succeed.
//   - A deadlock, serialization or certification victim (MySQL/Galera
//     1213, PostgreSQL 40001 or 40P01) of an operation run on a pool, in
//     autocommit, took no effect: the operation sends it again, up to
//     four sends in all with a jittered pause that doubles from 5ms
//     (rowlease's internal retry package), and returns the error only
//     after the last. Every operation is safe to send again
//     after such an error — Acquire with the same token, Create with the
//     same key, the token-checked ones — because nothing of the first
//     send was applied. Inside a transaction (a *sql.Tx, a *sql.Conn) the
//     whole transaction was rolled back: the
//     error is returned at once, for the caller to run the transaction
//     again (package toolexec and request.Run.InTx do). SQLite's busy
//     errors are not sent again: the busy timeout already waited.
//
// # First use
//
// A Lease reads the database once per handle before the first operation's
// own statement on it, to find what the constructor cannot see:
//
//   - the dialect: the driver's type, where DetectDialect can see it
//     (*sql.DB, *sqlx.DB: no statement), and in any case the check's one
//     statement, which only its own dialect can run — when it fails, the
//     driver error's type says which database answered. A Lease of the
//     wrong dialect is refused with ErrInvalid naming both, instead of
//     sending SQL the database cannot parse;
//   - MySQL and PostgreSQL: the precision of the expiry column, from
//     information_schema.COLUMNS (DATETIME_PRECISION; the schema is the
//     qualified one or DATABASE()) or from pg_attribute (atttypmod, the
//     table found with to_regclass through the search path, as the lease
//     statements find it). A column coarser than a microsecond (a MySQL
//     DATETIME or DATETIME(3), a PostgreSQL timestamptz(0)) stores an
//     expiry up to one step short of now + TTL, before the holder's trust
//     deadline (another holder could take the lease while the first still
//     trusts it), and on MySQL a renewal within the same step leaves the
//     row unchanged and would read as lost. Unless
//     Options.ExpiryResolution declares at least that step, the Lease
//     refuses the handle with ErrInvalid naming the column and the value
//     to declare. It refuses rather than adapting by itself: the
//     resolution decides every trust deadline, which TTLs are valid and
//     (on MySQL) when an unchanged row counts as renewed, and should not
//     change under a running program from one handle to the next. A
//     column or table the catalog does not show (not created yet, not
//     readable) is left to the statements themselves, and looked for
//     again on the next operations, at most three times;
//   - MySQL through go-sql-driver: whether the DSN has
//     interpolateParams=true. On a pool (*sql.DB, *sqlx.DB) whose driver
//     is go-sql-driver's, the check's statement is sent with one argument
//     that changes nothing, on one of the pool's connections directly
//     (sql.Conn.Raw): with interpolateParams the driver runs it in one
//     round trip and its row is the check's answer; without, the driver
//     declines it before sending anything, the check is sent as usual,
//     and a warning is logged, once per pool however many Leases use it
//     (and not when Options.Prepare is PrepareAlways, which keeps the
//     statements prepared). Without interpolateParams every lease
//     statement is prepared, executed and closed: 2 round trips where 1
//     does, measured at 0.6-0.7 of the acquire+release pairs per second
//     with (1 and 16 workers, MariaDB on loopback; make bench-report,
//     "MySQL DSN"). It is a warning, not a refusal: leases are as correct
//     either way, and interpolation refuses some charsets (big5, gbk,
//     sjis and the like). A handle whose driver the Lease cannot see (a
//     transaction, a *sql.Conn, a wrapper) is not judged and logs nothing;
//   - SQLite: PRAGMA busy_timeout and journal_mode (one statement through
//     the table-valued pragmas). SQLite has no precision to read: the
//     lease statements store integer microseconds whatever the column's
//     declared type. A busy timeout of 0 (a writer that finds the
//     database locked fails at once with SQLITE_BUSY instead of waiting;
//     modernc.org/sqlite's default) and a journal mode other than WAL
//     (readers and the writer block each other) are logged as warnings,
//     once per handle, not refused: neither makes a lease unsafe (a busy
//     error took no effect and is transient), a program with one
//     connection or no contention works without them, and an in-memory
//     database cannot use WAL at all. The transaction mode cannot be
//     read: whether BEGIN takes the write lock at once (_txlock=immediate)
//     is the driver's choice, and no PRAGMA shows it. Without it, a
//     transaction that reads first and writes later can fail with
//     SQLITE_BUSY at its first write, whatever the busy timeout (SQLite
//     cannot wait there without risking a deadlock), so set it in the DSN.
//
// What it costs: one statement (a catalog read or two pragma reads), once
// per pool — a *sql.DB or *sqlx.DB (each a handle of its own, even around
// one pool) — and once for all the other handles
// of the Lease together (*sql.Tx, *sql.Conn, *sqlx.Tx, wrappers), whose
// pool cannot be seen: the first of them runs the check inside itself (a
// read; on PostgreSQL it cannot fail on a PostgreSQL database), and its
// result stands for every later one. So a Lease used with a new
// transaction per operation is checked once, not per transaction; a Lease
// used with the transactions of two different databases checks only the
// first. After the check an operation costs a lookup of its handle in a
// concurrent map and an atomic load, and no statement. A check that fails with a driver error (a lost connection)
// lets the operation go on — its own statement reports the database's
// error — and is tried again on a later operation, at most three times
// per handle. A Lease remembers at most 64 handles; beyond them, handles
// are not checked. Acquire, Renew, Release, Transition, Inspect, Create,
// Delete and Ensure run the check; Confirm, which runs inside a fenced
// transaction that a failed statement would abort on PostgreSQL, relies
// on one of them having run first. To fail at start-up rather than at the
// first request, run one of them then (an Inspect of any key reads
// nothing else).
// Options.SkipCheck turns it off (go-sqlmock tests that pin every
// statement).
//
// # Dialect notes
//
// MySQL: expires_at is DATETIME(6) holding UTC. A column of your own with
// fewer fractional digits must be declared with Options.ExpiryResolution
// (DATETIME: time.Second): undeclared, its truncated expiry can fall before
// the holder's trust deadline, and a renewal in the same second reads as
// ErrLost, so the first-use check refuses it (see First use). Use interpolateParams=true in the DSN, or go-sql-driver
// prepares, runs and closes a statement for every query with arguments
// (two round trips and a close instead of one round trip); the first-use
// check logs a warning for a pool without it. Package schema's MySQLDSN
// sets it (and parseTime) on any go-sql-driver DSN in one line; it is one
// field of go-sql-driver's own configuration:
//
//	cfg, err := mysql.ParseDSN(dsn) // or mysql.NewConfig()
//	cfg.InterpolateParams = true    // the DSN: ?interpolateParams=true
//	db, err := sql.Open("mysql", cfg.FormatDSN())
//
// A pool is opened by the program, not by the Lease. On engines that speak the MySQL
// protocol but are not MySQL (Vitess, TiDB), keep the expiry at
// microsecond precision: rows affected is then always 1 on success, and
// the LAST_INSERT_ID fallback of coarse columns, which such an engine may
// misreport (Vitess 16.0 did), is never used. Every lease statement sets
// the session's LAST_INSERT_ID(): read your own insert id before running a
// lease operation on the same connection. Ensure uses ON DUPLICATE KEY UPDATE, which on MySQL also
// swallows a conflict on another unique key of the table.
//
// Prepared statements: on SQLite a Lease prepares its statements once per
// pool (*sql.DB, *sqlx.DB) and keeps them: parsing a statement there costs
// as much as running it. On MySQL and PostgreSQL it sends text by default
// (Options.Prepare). A MySQL prepared statement lives on the server, once
// per connection, and counts against max_prepared_stmt_count (16382 by
// default), one limit shared by every client of the server: measured on
// MariaDB 10.11, the request flow keeps about 6 per connection (224 for a
// 40-connection pool), so about 70 such pods exhaust the default and other
// applications' prepares start failing; preparing saved about 25µs per
// statement on loopback. PrepareAlways turns it on where the budget allows.
// Statements on a *sql.Tx or a *sql.Conn are sent as text (the library's
// own fenced transactions run the pool's kept statements bound to the
// transaction; on SQLite that cut the client's CPU per message of the
// whole flow by about a third). Close releases the kept statements; it is safe while operations
// run (one racing it finishes on its statement or sends text), and the
// Lease sends text after it.
//
// # Multi-primary clusters (MariaDB Galera)
//
// Every lease operation is one write that Galera certifies like any other,
// and the fence (Confirm) is a write too: a takeover on another node and
// the holder's fenced commit cannot both succeed; the loser gets error
// 1213, which took no effect and is sent again (see Failure handling). A
// Galera user must configure:
//
//   - Read-your-writes. A node applies the others' writes a little later.
//     A token-checked write that reaches a node which has not yet applied
//     the holder's previous write (through a load balancer, or a pool
//     whose connections reach several nodes) matches no row although
//     nothing changed. Either keep each pool on one node, or set
//     wsrep_sync_wait in the DSN (&wsrep_sync_wait=7 with go-sql-driver;
//     every read and write then waits for its node to catch up), or set
//     Options.MultiPrimary: a token-checked write that matched
//     no row is sent once more under wsrep_sync_wait (MariaDB's SET
//     STATEMENT, one statement), and only a second miss is ErrLost;
//     Inspect always reads that way. Single servers need none of this and,
//     without MultiPrimary, pay nothing for it.
//   - Clocks. Expiry is judged by the clock of the node that runs the
//     statement: keep the nodes' clocks in step (NTP) well below
//     SafetyMargin, which must exceed the largest skew between any two
//     nodes.
//   - wsrep_retry_autocommit (default 1) may stay: the library retries
//     beyond it.
//
// Tested on a 3-node MariaDB 10.11 Galera cluster (make test-galera):
// clients spread over the nodes per goroutine and per statement, fenced
// writes against takeovers on other nodes, the three-level flow.
//
// # Other engines (from their documentation; not tested)
//
// None of these is in the test suite; what follows is what their
// documentation says, held against what this package relies on.
//
//   - TiDB (MySQL protocol). New clusters use pessimistic transactions
//     (the default since v3.0.8): writes take row locks as InnoDB does,
//     and a conflicting lease statement waits, then matches or not.
//     Under the optimistic model (tidb_txn_mode='optimistic') a conflict
//     is found only at commit and comes back as TiDB's "write conflict"
//     error (9007), not 1213: this package does not send it again and
//     IsTransient does not know it, and TiDB no longer retries optimistic
//     transactions itself (tidb_disable_txn_auto_retry is deprecated since
//     v8.0.0). Keep the pessimistic mode. LAST_INSERT_ID(expr) is
//     supported; keep expires_at at DATETIME(6). UTC_TIMESTAMP(6) is read
//     on the TiDB server that runs the statement: keep the servers' clocks
//     within SafetyMargin.
//   - Vitess (MySQL protocol). Keep a session's rows on one shard (every
//     table carries the session key, every unique key includes it), so
//     every lease statement and every fenced transaction stays on one
//     shard. heartbeat.Batcher (request.Runner's default) renews many
//     sessions' rows in one statement, which Vitess would
//     scatter to every shard: set request.Config.SeparateHeartbeats there.
//     vtgate's handling of LAST_INSERT_ID has changed across
//     releases (16.0 misreported LAST_INSERT_ID(expr); a later change made
//     it match MySQL when no row is updated): keep expires_at at
//     DATETIME(6), so that success is always 1 row affected and the
//     insert-id fallback of coarse columns is never used.
//   - CockroachDB (PostgreSQL protocol). Transactions are SERIALIZABLE by
//     default; a conflict the server cannot retry itself comes back as
//     SQLSTATE 40001 ("restart transaction"), which this package sends
//     again in autocommit and IsTransient reports. 40003 ("result is
//     ambiguous", statement_completion_unknown) means the outcome is
//     unknown: it is a driver error like any other, never sent again. A
//     node refuses to run with a clock more than --max-offset (500ms by
//     default) from the others: set SafetyMargin above that (1s, with TTLs
//     of several seconds). statement_timestamp() and RETURNING exist.
//   - YugabyteDB (PostgreSQL protocol). It retries conflicting statements
//     on the server where it can, and otherwise returns 40001 under
//     Serializable and Repeatable Read (sent again here in autocommit);
//     Read Committed raises no serialization errors. Keep node clocks
//     within SafetyMargin.
//
// PostgreSQL: expires_at is timestamptz. A timestamptz(p) with p < 6
// rounds to its step: declare it with Options.ExpiryResolution (the
// first-use check refuses it otherwise).
//
// SQLite: expires_at is an INTEGER of microseconds since the Unix epoch;
// the clock that fills it reads whole milliseconds, so TTLs must exceed the
// safety margin + 1ms and deadlines fall 1ms earlier.
// Open the file with WAL, a busy timeout and _txlock=immediate (e.g.
// file:app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate
// with modernc.org/sqlite), and more than one connection; the first-use
// check warns of the first two when they are missing and cannot see the
// third. A transaction holds the database's only write lock
// while it runs: the leases of the flow that owns it must be renewed
// inside it, or they wait behind it (package request routes a flow's
// renewals into its open transaction). A transaction begun deferred takes
// the lock at its first write, and a writer that started as a reader may
// then fail with SQLITE_BUSY (transient) instead of waiting.
package lease

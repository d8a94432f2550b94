// Package lease turns rows of your own SQL database into leases: exclusive,
// time-bounded rights taken, kept and given up by single atomic conditional
// statements (compare-and-swap), proved by a random token, ordered by a
// fencing generation, and timed by the database clock alone.
//
// It speaks MySQL 8 / MariaDB 10.6+, PostgreSQL 13+ and SQLite 3.35+, and
// links no database driver but go-sql-driver/mysql (PostgreSQL and SQLite
// errors are recognised through the methods their error types expose).
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
//     Verify and Create on an existing row; the generation comes back in it
//     (RETURNING on PostgreSQL and SQLite; LAST_INSERT_ID(expr) in the OK
//     packet on MySQL). A failed Acquire reads the row once more, to say who
//     holds it and for how long.
//   - Exactly one winner among any number of concurrent Acquires.
//   - The generation strictly increases with every new grant on a row and is
//     unchanged by reentry and renewal: hand it to systems outside the
//     database as a fencing token.
//   - Expiry is decided only in SQL against the database clock
//     (UTC_TIMESTAMP(6), statement_timestamp(), or SQLite's clock), at
//     microsecond precision (SQLite's clock ticks in milliseconds). The
//     application's wall clock is never compared with a stored time.
//     PostgreSQL uses the statement's time, not now(), so a lease taken late
//     in a long transaction still gets its full TTL.
//   - The grant's local trust Deadline — the send time of the last
//     successful acquire or renew + TTL − SafetyMargin, on the monotonic
//     clock — falls at least SafetyMargin before the database expiry, as
//     long as the two clocks run at the same rate.
//   - Correct under go-sql-driver/mysql's default changed-rows count: every
//     successful statement changes the row (a renewal never moves expires_at
//     backwards and, when it would not move it forward, adds a microsecond),
//     and a matched-but-unchanged row (a user column of second precision) is
//     still recognised through LAST_INSERT_ID. clientFoundRows makes no
//     difference. MySQL evaluates SET left to right on updated values, so
//     the generation is assigned first; the same SQL intent gives the same
//     result on all three dialects.
//   - Bad input (empty key or holder, a TTL ≤ 0, below MinTTL or above
//     MaxTTL, a nil database, an invalid identifier) is a *ValidationError
//     before any SQL is sent.
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
// RunFenced (and WithFences) runs a side effect in a transaction that ends
// by confirming every Fence — a token- and generation-checked write on each lease row
// (Confirm) that fails unless the grant still holds — and then commits. The
// side effect commits if and only if every grant held at the end. The lease
// rows are locked only from the confirmations to the commit, so a
// heartbeat renewing them on other connections never waits behind a long
// side effect; and because the check is a write, a multi-primary cluster
// (Galera) certifies it against a takeover on another node, which a
// SELECT … FOR UPDATE would not be. On SQLite, where a write transaction
// excludes every other writer, a FlowDB routes the flow's renewals into the
// open transaction (and a failed side effect is rolled back to a savepoint,
// keeping them).
//
// # Failure handling
//
//   - ErrHeld (*ConflictError): someone else holds the lease and it has not
//     expired; it carries the holder and the time left. Map it to HTTP 409.
//   - ErrLost (*LostError): the token no longer matches — taken over,
//     released, or the row is in another state. Stop; write nothing more.
//     Nothing was changed by the failed call.
//   - ErrNotFound: no row has the key. ErrState (*StateError): the row is
//     free but in a state the operation does not accept.
//   - ErrExists (*DuplicateKeyError): Create hit a unique key; duplicate-key
//     errors of all three drivers are translated (see IsDuplicateKey).
//   - ErrInvalid (*ValidationError): rejected before any SQL.
//   - Any other error is the driver's, returned as it is: the outcome of a
//     write that failed this way is unknown (it may have committed). Never
//     treat it as loss, and never treat loss as a transient error; retry
//     until the grant's Deadline, then act as if lost. IsRetryable picks out
//     a deadlock or serialization victim, which took no effect.
//
// # Dialect notes
//
// MySQL: expires_at is DATETIME(6) holding UTC. Use interpolateParams=true
// in the DSN, or go-sql-driver prepares, runs and closes a statement for
// every query with arguments (three messages instead of one). On engines
// that speak the MySQL protocol but are not MySQL (Vitess, TiDB), keep the
// expiry at microsecond precision so that rows affected is always 1 on
// success. Every lease statement sets the session's LAST_INSERT_ID(): read
// your own insert id before running a lease operation on the same
// connection. Ensure uses ON DUPLICATE KEY UPDATE, which on MySQL also
// swallows a conflict on another unique key of the table.
//
// Prepared statements: on SQLite and MySQL a Lease prepares its statements
// once per pool (*sql.DB, *sqlx.DB) and keeps them (Options.Prepare; Close
// releases them). On SQLite parsing a statement costs as much as running
// it. Statements inside a transaction or on a *sql.Conn are sent as text.
//
// PostgreSQL: expires_at is timestamptz.
//
// SQLite: expires_at is an INTEGER of microseconds since the Unix epoch.
// Open the file with WAL, a busy timeout and _txlock=immediate, and more
// than one connection. A transaction holds the database's only write lock
// while it runs: renew the leases of the flow that owns it through a FlowDB
// (package request does), or they wait behind it.
package lease

// Package engine is the implementation of package lease, and the
// statement-saving machinery that only rowlease's own packages use:
// joint writes (Joint), a lease taken and a row created in one statement
// (AcquireCreate, AcquireCreateUnless), a row written only while a grant
// holds (ConfirmPut), batched renewals (RenewMany), SQLite's routing of a
// flow's writes into its open transaction (FlowDB), the first-use check
// (Check) and the causal checks of a multi-primary cluster. Package lease
// names the public part (the primitive, RunFenced, the error kinds) with
// aliases; session, toolexec, heartbeat and request use the rest from
// here. Its guarantees, failures and dialect notes are package lease's
// documentation.
//
// Everything that differs between databases is asked of the dialect's
// driver (internal/driver and its mysql, postgres and sqlite packages),
// chosen once per Lease in New: its SQL fragments and one-statement
// compounds, what its statements can do (driver.Caps), its error
// classification and its first-use check. No file here compares a
// Dialect with MySQL, Postgres or SQLite; dialect.go maps each Dialect to
// its driver.
//
// Files, for whoever changes it:
//
//	lease.go       the Lease type, its Options and values (Grant, Snapshot, …), New
//	ops.go         the operations on one row: Acquire, Renew, Release, Transition,
//	               Verify, Inspect, Create, Delete, Ensure
//	wait.go        AcquireWait
//	validate.go    input checks, made before any SQL (ErrInvalid)
//	exec.go        how one statement is sent: the generation handed back, victims
//	               sent again (internal/retry), a miss confirmed causally
//	stmt.go        the SQL of every statement, built once per table from the
//	               driver's fragments
//	prepare.go     prepared statements kept per pool; Close
//	intx.go        InTx: a pool's transaction that runs the kept statements
//	shape.go       the statements built per call, cached by shape
//	fence.go       Confirm, Fence, RunFenced and WithFences
//	joint.go       JointOp and Joint: token-checked writes on several rows in
//	               one statement (also the end of RunFenced)
//	acquirecreate.go AcquireOp, CreateOp and AcquireCreate: a lease taken and a
//	               new row inserted held, both or neither (one statement on
//	               PostgreSQL)
//	unless.go      AcquireCreateUnless: the same, unless a row exists, which
//	               is read instead (one statement on PostgreSQL)
//	put.go         ConfirmPut: a row of the caller's written only while a grant
//	               holds (one statement on PostgreSQL and SQLite)
//	flowdb.go      SQLite: FlowDB, which routes a flow's renewals into its open
//	               fenced transaction, and RunFenced's routed path
//	batch.go       RenewMany
//	probe.go       the first-use check of each database handle (the driver's
//	               Probe, judged here)
//	errors.go      sentinels, error types, IsDuplicateKey, IsRetryable,
//	               IsTransient (each driver's Classify)
//	unavailable.go IsUnavailable: a database that cannot be reached or serve
//	               (network errors here, each driver's UnavailableNode);
//	               IsUnavailableIn, ForeignError: whose network error it is
//	timeout.go     TimeoutError: a wait that rowlease bounds itself, named
//	onconn.go      OnConn: a Lease's operations on one of a pool's connections
//	dialect.go     Dialect, its driver, Now, Rebind, QuoteIdent, SyncWait
//	table.go       Columns, Table and QuotedTable
//	token.go       Token, which never prints its secret
//	db.go          the DB and TxBeginner interfaces
//	observe.go     Observer, Op, VerdictOf, the lease's span and attribute names
//
// # The machinery, beside the primitive
//
// What package lease's documentation says of the primitive holds here;
// these are the parts only rowlease's own packages reach.
//
//   - Joint makes token-checked writes (ConfirmOp, TransitionOp,
//     ReleaseOp) on rows of several tables in one statement where the
//     dialect has one: on PostgreSQL always (a data-modifying WITH that
//     reports each write), on MySQL when every grant holds (a multi-table
//     UPDATE, all or nothing; else each write is sent again alone), on
//     SQLite never (one statement per write). Each write succeeds or is
//     lost on its own, with the lone operation's checks and errors. The
//     end of a fenced transaction (RunFenced: the fences' confirmations
//     and FencedTx.Mark) is sent the same way on PostgreSQL, and one by
//     one on MySQL, where the multi-table UPDATE saves round trips but
//     costs the server more CPU than the writes alone (see Fenced
//     transactions).
//   - AcquireCreate takes a lease and inserts a new row already held (as
//     AcquireWith and Create), both or neither: on PostgreSQL in one
//     statement, a data-modifying WITH whose INSERT selects from the
//     UPDATE, so a miss inserts nothing and a duplicate key undoes the
//     acquire; on MySQL and SQLite, which cannot write two tables in one
//     INSERT or UPDATE, as the two statements inside a transaction of
//     yours (refused on a pool). AcquireCreateUnless first reads a row
//     (a unique key's) and, if it exists, returns it and writes nothing:
//     a lookup and a claim in one statement on PostgreSQL.

//   - RenewMany renews any number of grants of one table with one
//     statement per MaxBatch, each loss reported on its own, each deadline
//     from the send time: what heartbeat.Batcher uses to keep a process's
//     leases alive with a few statements per interval. A grant holds when
//     its token and generation match, as for Confirm; a grant given twice
//     is sent once, and both copies get its answer. On MySQL a renewal is
//     proved by the count of changed rows, never by a token still there
//     (except on a declared coarse column, after a statement that saw
//     every committed write): only when fewer rows changed than were sent
//     does a read of which grants still hold follow, and one statement
//     more that renews those again. With MultiPrimary that read waits
//     under wsrep_sync_wait, and the statement follows on its connection
//     (MariaDB does not wait inside the statement's READ COMMITTED
//     transaction).

// The end of the transaction — every fence's confirmation and the writes of
// FencedTx.Mark (a tool call's success mark, say) — is one statement on
// PostgreSQL when the fences were made by Lease.Fence (see Joint): a tool
// call's session fence, request fence and success mark cost one statement
// instead of three. Each write keeps what makes it a fence: it is token-
// and generation-checked, a confirmation requires expires_at after the
// database's now and always changes its row (so Galera certifies it), and
// the transaction commits only if every one was made. On MySQL/MariaDB
// and SQLite the writes are sent one by one (with Options.MultiPrimary,
// each miss is sent again causally first). SQLite has no statement that
// writes several tables; MariaDB's multi-table UPDATE, which Joint sends,
// costs the server more CPU than the writes alone (BenchmarkJointOrAlone:
// about 320 µs against 200 µs for three confirmations on the test
// server; on PostgreSQL the WITH costs about 80 µs against 145 µs), and in
// the whole flow of a message sending them alone cut the server's CPU per
// message by about a third and raised the throughput by about a quarter,
// though it costs two round trips more. A failing end gives the same errors as one by one: "lease: <name>
// fence: …" matching ErrLost for the first fence gone in order, a mark's
// own *LostError.
//
// What the joint end does not change: the rows are locked only from that
// statement to the commit; they are locked in the order given (session,
// request, tool execution), which is the order MySQL reads the joined
// rows and PostgreSQL runs the parts of the WITH — the engines' behaviour,
// not a documented promise, so a deadlock remains possible in principle
// against writers that lock several lease rows in another order: the
// database breaks it, the victim took no effect, and package toolexec runs
// its transaction again (IsTransient), as for any deadlock.
//
// A renewal routed into a transaction is undone if the transaction does
// not commit, so it counts only when it does: a renewer sends it through
// FlowDB.Route and hears how the transaction ended (package heartbeat moves
// the trust deadline back on a rollback). RunFenced tells the renewers
// before the rollback frees the write lock — also when the transaction
// ends because its context did, which RunFenced handles itself instead of
// leaving it to database/sql — so a flow whose last committed renewal is
// too old stops its work before anyone else can take its leases. A routed
// transaction takes the write lock at its start, whatever the DSN's
// transaction mode, so renewals only ever go into the one of a flow's
// transactions that holds it. What RunFenced cannot order: when a write
// of fn is interrupted by its context, SQLite rolls the whole transaction
// back at once, and the renewers hear of it a moment later, when RunFenced
// does; in that moment another holder can take a lease whose last
// committed expiry has passed.
//

//   - Joint returns one error per write: nil, or the lone operation's
//     (*LostError for a grant gone, *ValidationError for bad input, which
//     sends nothing at all). A driver error of its joint statement is every
//     write's error: each outcome is unknown.
//
// An error of code that ran on a transaction and also called other
// services (a tool that sends mail) is told apart by IsUnavailableIn,
// which asks the transaction's connection whether the database's network
// failed; a ForeignError (an error that carries another service's
// failure) is never looked below. AcquireCreate and AcquireCreateUnless
// are never sent again: whatever their error, their caller decides (see
// AcquireCreate for finding out after a driver error). With
// Options.MultiPrimary, a joint statement (Joint, the end of RunFenced)
// is sent as it is; when it does not change every row, each write is
// sent again alone, and each miss of those is confirmed causally. On
// SQLite, RunFenced with a FlowDB takes the write lock at BEGIN even
// without _txlock=immediate (one no-op UPDATE of a fence's table, sent
// with its savepoint), so that several fenced transactions of one flow at
// once (parallel tool calls) queue for the lock before anything is routed
// into them. Inside a transaction, InTx(pool, tx) runs the pool's kept
// statements bound to it (RunFenced does for its fences and marks).
package engine

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
package engine

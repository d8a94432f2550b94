// Package toolexec is the third of rowlease's lock levels: a tool call's
// side effect commits at most once, however often the call is retried,
// replayed, or taken over after a crash.
//
// A tool execution is keyed by the request, the tool name, the SHA-256
// (hex) of its arguments in RFC 8785 canonical JSON (Canonicalize): nested
// keys sorted, numbers in canonical form, so {"amount":35} and
// {"amount":3.5e1} are one call — and its occurrence (Call.Occurrence),
// which numbers identical calls of a request from 0: a model that books 5
// twice for two coffees makes occurrences 0 and 1, two effects, and a
// retry or a resumed run that makes occurrence n again finds occurrence
// n's row. request.Run.CallTool counts them; a direct caller that leaves
// it 0 gets one call per (request, tool, arguments), as before
// occurrences. The row carries a lease (package lease) and a status.
//
// Numbers are IEEE-754 doubles in RFC 8785, so a number the double rounds
// would make two different calls one. The rule (CanonicalArguments): a
// number written as an integer — digits only, no fraction, no exponent — is
// accepted only if a double holds it exactly: any integer of magnitude up
// to 2^53 (9007199254740992), and a larger one only if it is a double (such
// as 2^54). {"id":9007199254740993} gives *ArgumentsError, saying to
// send the value as a string ({"id":"9007199254740993"}), because RFC 8785
// would read it as 9007199254740992 and give it the key of that id. A number
// written with a fraction or an exponent is a real number and is rounded to
// the nearest double as RFC 8785 specifies: 0.1, 35.0, 3.5e1 and 1e30 are
// accepted, and 35, 35.0 and 3.5e1 are one value. Every call accepted
// before keeps its hash; only those whose integer was silently changed are
// refused.
//
// # Two forms of tool
//
// In the database (Store.Execute, Registry.Register): the side effect writes in
// the transaction it is given (Exec.Tx), which ends by confirming the
// session's and the request's leases and marking the call success. It
// commits if and only if the current owner of all three marks it done.
// Use it whenever the effect is a write to the same database, however
// long it takes.
//
// Outside the database (Store.ExecuteExternal, Registry.RegisterExternal): a
// payment provider, e-mail, a webhook. There is no shared transaction, so
// the call is recorded in three steps: the intent (status started, with
// the effect key) in a fenced transaction, then the act with no
// transaction open, then the result, fenced. The effect key (External.
// EffectKey, the execution id) is the same for every attempt of the call —
// across retries, takeovers and restarts — so send it as the remote side's
// idempotency key. A call that carries its client request id
// (Call.ClientRequestID; request.Run.CallTool sets it) has a key derived
// from the session key, that id, the tool and the canonical arguments
// (ExecutionID, a name-based UUID), so the key also survives the loss of
// the call's row and of its request's row, as with the tail an
// asynchronous failover loses: the resent message makes the same call
// under the same key. Without a client request id the key is random and
// lives only as long as the row. A run that finds the intent without a
// result does not know whether the effect happened: it gets
// *UnknownOutcomeError unless the tool was registered with a way to reconcile
// (ExternalOptions.Reconcile asks the remote side; Repeat acts again under
// the same key, for remote sides that honour it). It never acts again
// under another key.
//
// # States
//
//	          INSERT (held by the caller)
//	(none) ───────────────────────────▶ processing ── side effect + fences + mark, one tx ──▶ success
//	                                     │  ▲  ▲  │                                          (result stored;
//	       tool failed, or the remote    │  │  │  │ external: intent recorded                 replayed, never
//	       side refused (NotPerformed)   ▼  │  │  ▼ (fenced)                                  run again)
//	                                   error ┘  │ started ── act with the effect key, then ──▶ success
//	                                 retried,   │  │  ▲      the result recorded (fenced)
//	                                 same key   │  │  │
//	          lease expired: taken over ────────┘  │  └── lease expired or given back: taken over
//	                                               │      (Again: Reconcile, Repeat, or
//	                                               └───── *UnknownOutcomeError; never a new key)
//
// Execute and ExecuteExternal take these branches on an existing row: success → the
// stored result, nothing run; error → run again; processing and expired →
// taken over; started and free or expired → reconciled (ExecuteExternal) or
// *UnknownOutcomeError (Execute); any live lease → *BusyError.
//
// # Guarantees
//
//   - In the database: the side effect runs first; then the transaction
//     confirms every fence (session, request) with a token-checked write
//     (lease.Lease.Confirm) and marks the call success, checked against the
//     tool's own token; then it commits. The confirmations and the mark
//     are one statement on PostgreSQL (lease.RunFenced with
//     FencedTx.Mark), three on MySQL and SQLite: a new call on PostgreSQL
//     costs the insert that claims it, BEGIN, that statement and COMMIT. An external call's
//     intent and result are fenced the same way. The lease rows are locked only for
//     that end, so the flow's heartbeat renews them while a long side
//     effect works (on SQLite, where one writer excludes all others, it
//     renews inside the transaction: pass ExecOptions.Flow, as request does).
//     A side effect of any length commits if the flow keeps its leases, and
//     never after a takeover.
//   - Outside the database: nothing acts for a flow that lost its session or
//     request (the intent is fenced); an effect is performed under one key
//     only; a recorded result is never overwritten; an intent without a
//     result is reported, never silently repeated.
//   - With Call.ClientRequestID set, the effect key is a function of the
//     session key, the client request id, the tool name, the canonical
//     arguments and the occurrence only (ExecutionID; occurrence 0 leaves
//     it out, so its keys are those of calls made before occurrences): a
//     call whose row was lost — deleted, or acknowledged by a primary that
//     died before its standby had it — and made again by the resent
//     message gets the same key, whatever request id the resend was
//     given. A remote side that honours the key then acts once. The same
//     call made twice in one request with the same occurrence is one call
//     (the second gets the first's result): the unique key on request,
//     tool, arguments and occurrence finds the first. Another occurrence
//     is another call, with another key.
//   - Exec.Generation and External.Generation are the tool execution's
//     fencing generation, for systems outside the database that fence.
//   - A transient database error inside a side effect's transaction
//     (deadlock, serialization failure, lock wait timeout, SQLite busy
//     other than a write outside Exec.Tx, below) is
//     not the tool's failure: the transaction is run again, a few times
//     with backoff, and then reported as *TransientError. Each run is watched
//     (ExecOptions.Watch) until its final mark, so a run after a transient
//     error at the mark or at the commit is supervised as the first was.
//   - Nor is a database that cannot be reached (the connection broke, the
//     server died or is shutting down) inside the side effect: nothing
//     committed, the call is not marked error and is left free, and
//     Execute returns the database's error, so that the run ends rather
//     than show the model a failure it did not cause. It is decided by
//     where the error came from (engine.IsUnavailableIn): a driver's error
//     of a broken connection is the database's; a network error (a
//     *net.OpError, a *net.DNSError, io.ErrUnexpectedEOF), which a mail,
//     Redis or gRPC client the side effect calls gives too, is the
//     database's only if the transaction's own connection is broken as
//     well — one SELECT 1 on it, bounded by ExecOptions.ReleaseTimeout,
//     tells. With the connection working, it is the tool's failure
//     (*FailedError), shown to the model.
//   - Invalid arguments (not JSON, not an object, duplicate keys, lone
//     surrogates, an integer a double does not hold exactly) give
//     *ArgumentsError and write nothing. An unknown
//     tool gives ErrUnknownTool, never a success.
//
// # What it does not do
//
// A stored success is returned without checking the fences: reading it
// writes nothing, so a flow that lost its locks may still see it.
//
// The side effect of an in-database tool runs before its fences are
// confirmed: a flow that lost its locks moments ago may run it, and its
// writes roll back. A side effect that itself writes the session or
// request row holds that row's lock until commit, and the heartbeat waits.
//
// On SQLite a side effect's transaction holds the database's only write
// lock for as long as it runs: every other writer waits (busy timeout),
// including other flows' heartbeats. Keep SQLite side effects short, or do
// the slow part outside the database with ExecuteExternal.
//
// # Writes outside Exec.Tx
//
// A side effect's database writes must go through Exec.Tx. A write
// through the pool (another connection) is outside the fence, and what
// happens to it depends on the dialect:
//
//   - SQLite: the side effect's transaction already holds the database's
//     only write lock (with ExecOptions.Flow, which request.Run sets), so
//     the pool's write waits for its connection's busy timeout (10 s with
//     schema.SQLiteDSN's default) and fails with SQLITE_BUSY. Inside that
//     transaction Exec.Tx never waits for the lock, so a busy error from
//     the side effect can only be such a write: Execute returns it at
//     once as *OutsideTxError, "write through x.Tx",
//     without running the transaction again and without calling it
//     transient. Nothing committed; the call is not marked error and is
//     left free. The one busy timeout is still waited: it is the pool's
//     own setting, the wait every other writer on the file (other flows'
//     claims and heartbeats behind a side effect) relies on, and toolexec
//     cannot tell this write from theirs before it fails; shortening it
//     for everyone would turn their waits into errors. Without
//     ExecOptions.Flow (Execute called directly) toolexec cannot tell
//     whether the transaction held the lock (a deferred BEGIN takes it at
//     its first write), and a busy error stays transient.
//   - PostgreSQL and MySQL/MariaDB: nothing refuses it. The write commits
//     at once, on its own: it stays when the tool fails, when a fence
//     fails, and it is made again when the call runs again (a retry, a
//     takeover). A write through the pool to a row that Exec.Tx has
//     already written waits for that transaction, which waits for the
//     side effect: on PostgreSQL until ctx ends (or lock_timeout), on
//     MySQL until innodb_lock_wait_timeout, whose error is transient (the
//     transaction is run again, then *TransientError).
//
// An external effect is exactly-once only if the remote side honours the
// effect key (or is reconciled); toolexec cannot undo an effect whose
// result it failed to record. When a call's row is lost, so is the
// knowledge that it acted: the call made again acts again (External.Again
// is false), under the same key if it carries a client request id, under
// a new one if not. A resent message whose agent decides differently makes
// a different call, with a different key: that is another effect, and no
// key can make it the first one.
//
// # Failure handling
//
// A call's error is one of lease's kinds (a busy call lease.ErrHeld, bad
// arguments lease.ErrInvalid, a failed fence lease.ErrLost, transient
// lease.IsTransient, unavailable lease.IsUnavailable) with this package's
// detail, or one of the outcomes only a tool has (the first three below):
//
//   - *FailedError: the tool itself failed (or the remote
//     side refused: NotPerformed), a network error of another service it
//     called included; nothing committed, the call is marked error, and
//     the text is for the model. A retry runs it again. It is a
//     engine.ForeignError: lease.IsUnavailable (httpapi's 503) does not
//     look below it.
//   - *UnknownOutcomeError: an external effect may have
//     happened; the call is left started and free. It carries the effect
//     key; reconcile before acting again. It is a engine.ForeignError: the
//     error it wraps is the remote side's, even a refused or reset
//     connection, and lease.IsUnavailable does not look below it.
//   - *OutsideTxError, on SQLite: the side effect
//     wrote through another connection instead of Exec.Tx (see "Writes
//     outside Exec.Tx"); nothing committed, the call is left free, and
//     every run fails the same way until the tool is fixed. Not
//     transient; httpapi answers it 500 without Retry-After.
//   - *TransientError (lease.IsTransient): the database kept failing
//     transiently; nothing committed, the call is left free; retry.
//   - An error engine.IsUnavailableIn finds the database's, returned by
//     the side effect: the database went away mid-transaction; nothing
//     committed, the call is left free (its lease given back if the
//     database lets it); resend once it is back.
//   - lease.ErrLost: a fence failed ("lease: session fence: …", the first
//     in order when several did), or the tool's own mark did (its
//     *lease.LostError); nothing committed, and the call is left
//     processing (or started, after an act) and free for the flow that now
//     owns the request.
//   - A deadlock or serialization victim at the end of the transaction
//     (the joint statement locks the session, request and tool rows
//     together) is transient like any other: the transaction is run
//     again, as above.
//   - *BusyError (lease.ErrHeld): another live flow is running the same
//     call; it unwraps to the *lease.ConflictError that says how long.
//   - *ArgumentsError (lease.ErrInvalid): the arguments are not one JSON
//     object, or hold an integer a double does not hold exactly; nothing
//     is written.
//   - ErrUnknownTool: the name is not registered; nothing is written.
//   - *KeyTakenError (lease.ErrExists): the key derived
//     from the client request id is the call of another request that
//     still exists (rows written by hand). Nothing is written and nothing
//     acts. A call of a request that no longer exists (an asynchronous
//     failover's lost tail took the request row, and its run went on
//     against the new primary) is adopted instead: its row moves to the
//     new request, keeping its id, state and result. A request id that belongs to
//     another session gives an error matching lease.ErrExists too.
//   - A commit error means the outcome is unknown; a retry of the same call
//     finds either the success or a call to take over.
//   - an error matching context.DeadlineExceeded, joined to
//     the call's error: the write that records a failed call (marking it
//     error, or giving its lease back) ran past ExecOptions.ReleaseTimeout.
//     The call stays held until its lease expires; a retry before then
//     gets a *BusyError.
package toolexec

// Package heartbeat keeps every lease of one flow alive — the session, the
// request, the running tool execution — and cancels the flow's work as soon
// as ownership of any of them is lost.
//
// A Supervisor runs one goroutine. Every Config.Interval it renews each
// lease, in the order the leases were added (session, request, tool: the
// project's one lock order), each renewal under a context whose deadline is
// the lease's local trust deadline. (Precisely: a lease is due one Interval
// after its last successful renewal, or after half its remaining trust if
// that is sooner; when one lease is due, every lease due within a quarter
// Interval is renewed with it, in order, so leases added together stay in
// step.) The work runs under the context Start returns; when a lease is
// lost, that context is cancelled with a *LostError as its cause:
//
//	sup, err := heartbeat.New(heartbeat.Config{Interval: ttl / 3, TTL: ttl, Logger: log})
//	if err != nil { ... }
//	sup.Add(heartbeat.ForLease("session", sessions, db, sessionGrant))
//	sup.Add(heartbeat.ForLease("request", requests, db, requestGrant))
//	work, err := sup.Start(ctx)
//	if err != nil { ... }
//	defer sup.Stop()
//	tool := heartbeat.ForLease("tool:create_transaction", tools, db, toolGrant)
//	removeTool := sup.Add(tool)
//	err = runTool(work)          // stops when work is done
//	removeTool()                 // before releasing the tool lease
//	toolGrant = tool.Grant()     // the renewed grant: toolGrant itself was not updated
//	if errors.Is(context.Cause(work), lease.ErrLost) { ... write nothing more ... }
//
// Each lease is renewed for the TTL it was granted for (ForLease takes it
// from the grant), which must also be Config.TTL; a lease whose TTL
// disagrees is refused before any SQL. The renewals update the
// LeaseRenewer's copy of the grant, not the caller's: read the current
// one, with its trust deadline, from LeaseRenewer.Grant.
//
// Many flows in one process share a Batcher (Config.Batcher): it renews
// the LeaseRenewers of every Supervisor that uses it together, one
// statement per table per interval (engine.RenewMany), while each
// Supervisor keeps its own work context, deadlines and Stop. A thousand
// flows of two leases cost two statements per interval instead of two
// thousand. See Batcher for what it guarantees, and for SQLite.
//
// For a single plain lease, Hold does all of that in one call: acquire (or,
// with HoldOptions.Wait, wait for it), supervise, run fn under the work
// context, release.
//
//	err := heartbeat.Hold(ctx, jobs, db, "nightly-report", "worker-1",
//		heartbeat.HoldOptions{TTL: 30 * time.Second},
//		func(ctx context.Context, g lease.Grant[string]) error { return run(ctx, g.Generation) })
//
// Hold returns fn's error, or a *LostError (matching lease.ErrLost) joined
// with it when the lease was lost while fn ran — even if fn returned nil.
// A release at the end that runs past HoldOptions.ReleaseTimeout is joined
// as an error matching context.DeadlineExceeded that says
// so: fn's work is done, and the lease stays held until its TTL.
//
// # Guarantees
//
//   - The work context is cancelled with a *LostError (errors.Is(cause,
//     lease.ErrLost)) by the first renewal that finds a token gone, and no
//     later than a few milliseconds of scheduling after the earliest trust
//     deadline of the supervised leases when no renewal succeeded before it
//     — even while a renewal is blocked (on a row lock held by a long
//     transaction, say), and even when the renewal that is slow belongs to
//     another lease: a renewal's context expires at the earliest trust
//     deadline of all leases, and a timer wakes the goroutine for that
//     deadline as well as for the renewals due.
//   - A renewal that succeeds only after its lease's trust deadline does not
//     rescue it: the lease is lost, since the work ran untrusted meanwhile.
//   - A trust deadline moves only on a committed renewal. A renewal that a
//     engine.FlowDB routes into the flow's open transaction (SQLite) moves
//     it provisionally, and only while that transaction holds the write
//     lock (nobody else can take the lease then). If the transaction does
//     not commit, the deadline goes back to the last committed renewal's
//     before the write lock is free; if that has passed, the work context
//     is cancelled there and then (ReasonDeadline, ErrRolledBack).
//   - Once a loss is recorded, nothing is renewed any more.
//   - One clock: every instant the supervisor compares — trust deadlines,
//     due renewals, now — is read on Config.Clock, which must be the clock
//     the leases compute their deadlines with (lease.Options.Clock; both
//     default to time.Now). Timers and renewal contexts wait the real
//     durations between that clock's readings, so a clock set off real
//     time neither cancels every run at once (behind) nor hides a real
//     loss (ahead).
//   - The goroutine never sleeps in a loop; it waits on a timer, the work
//     context and a change signal. Stop joins it.
//   - Tokens are never logged nor put in errors (grants print them as
//     [redacted]).
//
// # What it does not do
//
//   - It cannot stop work that ignores its context. The work must watch the
//     context, and every side effect must still be fenced in its own
//     transaction (lease.Fence): cancellation is prompt, not atomic, and a
//     fence is the only check that holds at commit.
//   - A renewal sent after the lease expired by the database clock but
//     before anyone took it over still succeeds (lease.Lease.Renew allows
//     it). Ownership was then never lost, but there was a moment when
//     another holder could have won it; only the local trust deadline, kept
//     a safety margin inside the TTL, protects against that.
//   - It does not release leases; Stop leaves them to expire or to the
//     caller's Release.
//   - A Renewer must return once its context is done; the supervisor does
//     not run renewals on other goroutines to work around one that does
//     not.
//
// # States
//
//	        New
//	         │
//	         ▼      Stop
//	      created ─────────────────────────────────┐
//	         │ Start                               │
//	         ▼                                     ▼
//	      running ──────────── Stop ──────────► stopped
//	       │    │                                  ▲
//	lease  │    │ parent done                      │
//	lost   │    └──► exited (cause: the parent's) ─┤ Stop
//	       ▼                                       │
//	      lost ─────────────── Stop ───────────────┘
//	(cause: *LostError, Lost() != nil)
//
// In running, the goroutine renews. In lost, exited and stopped, it has
// returned: lost keeps the *LostError as the work context's cause, exited
// the parent's cause; Stop from running cancels the work context with cause
// ErrStopped. A Supervisor is not restarted: Start works once.
//
// # Failure handling
//
// Every loss is a *LostError, which matches lease.ErrLost whatever its
// Reason, and unwraps to the renewal's error (another kind of lease's,
// then, too). ErrStopped and ErrStarted are the Supervisor's own
// life cycle, none of lease's kinds.
//
//   - lease.ErrLost from a renewal (the token no longer matches: taken
//     over, released, or moved to another state) → lost at once, reason
//     ReasonGone.
//   - lease.ErrInvalid (bad grant, TTL or DB) → lost at once, reason
//     ReasonInvalid: a retry would fail the same way. The cause then matches
//     both lease.ErrLost and lease.ErrInvalid. A LeaseRenewer whose TTL
//     disagrees with its grant's or with Config.TTL is lost the same way
//     as soon as the supervisor runs, without any SQL.
//   - Any other error (a dropped connection, a deadlock victim, a timeout)
//     is transient: retried after a quarter of the trust left, at most one
//     Interval, at least a few milliseconds, until the trust deadline. If
//     that passes first → lost, reason ReasonDeadline, LostError.Err the
//     last renewal's error.
//   - A renewal that waits for a free connection of its pool until the
//     trust deadline (every connection held by the work, say) → lost,
//     reason ReasonPoolExhausted; the cause matches lease.ErrPoolExhausted
//     as well as lease.ErrLost. A Batcher with BatchConfig.Pool renews on
//     a connection it keeps, and waits only to take it (again).
//   - A renewal blocked past the trust deadline (row locks of a long
//     transaction, a hung connection) is cancelled by its context → lost,
//     reason ReasonDeadline. A blocked renewal that is released in time (the
//     transaction commits) simply succeeds.
//   - The parent context done → the goroutine returns; no loss is
//     recorded.
//   - A lease removed (remove func from Add) is no longer renewed nor
//     checked; the result of a renewal in flight for it is ignored.
//
// Interval must be at most TTL/3: with the default safety margin (TTL/10)
// a lease renewed on time then still has more than 1.5 Intervals of trust
// left for retries when a renewal fails.
package heartbeat

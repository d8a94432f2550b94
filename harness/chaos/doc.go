// Package chaos proves rowlease's guarantees under faults: it records
// histories of lease operations while package faults breaks connections,
// and checks them for linearizability with porcupine; it runs the whole
// request flow in worker processes that are killed and paused, and checks
// the invariants of the three-level lock afterwards.
//
// # Lease histories
//
// Workers (goroutines, several per key) run random operations on a few
// lease rows: Acquire with a new token (sometimes only in a state),
// reentry with the token held, Renew, Release, Transition (from one state
// to the other, kept or released), Inspect, and a fenced write — a row of
// the ledger table, carrying the generation the worker holds, written in a
// lease.RunFenced transaction fenced by the grant. Each worker also keeps a
// few grants it held before and uses them now and then, so that stale
// tokens and generations are tried. Every operation is recorded with its
// call and return times (monotonic clock) and its result: ok (with the
// generation handed back), refused (held, in another state, lost), or
// unknown (any other error: a cut connection, a timeout, a restarted
// server).
//
// Expiry is made checkable: every TTL is an hour, so no lease expires by
// time during a round; instead the test expires a random row now and then
// with one statement (expires_at set into the past) and records it as an
// operation, OpExpire. The model therefore needs no clock: a row is free,
// held, or held but expired, and only operations change that.
//
// The model (Step) is the sequential specification of one row: token,
// generation, expired, state. An acquire wins when the row is free, its
// own, or expired, and a new token bumps the generation; renew, release and
// transition need the token; a fenced write needs the token and an
// unexpired lease, and its ledger row must carry the current generation —
// so "a write with a stale generation never commits" is part of what
// porcupine checks. An operation of unknown outcome may have taken effect
// or not, at any time after its call: it returns at the end of the round,
// after the server has finished every statement sent (Env.Quiesce), and
// the model allows both (porcupine's nondeterministic model). A fenced
// write's outcome is settled from the ledger: a row means it committed,
// none after an error means it did not; a success without a row, or a
// refusal with one, is a violation of its own. Histories are partitioned
// by key (porcupine's Partition) and checked round by round, which keeps
// each partition a few hundred operations long.
//
// Each worker runs on a connection of its own and knows its server
// session. After an operation of unknown outcome it ends that session
// from a direct connection (KILL, pg_terminate_backend) and waits until
// the server shows it no more: from then on nothing of the operation can
// land, so its return time is known (History.Settle) instead of the end
// of the round (SQLite, which has no server session, keeps the end of the
// round). Then it waits until the database answers again, so that one
// outage gives each worker at most one unknown operation; the expirer
// does the same. Unknown operations are what make porcupine's search
// expensive.
//
// Faults (package faults): statements and commits cut mid-flight,
// latency with jitter, blackholes, connection resets, server restarts
// (make chaos only) on MySQL/MariaDB and PostgreSQL; contexts cancelled
// mid-statement on every dialect, SQLite included.
//
// TestModel and TestUnfencedWritesCaught show that the check fails when it
// should: hand-made illegal histories, and a run whose ledger writes skip
// the fence.
//
// # Crash matrix
//
// RunCrash starts worker processes — the test binary run again with
// WorkerEnv set (WorkerMain) — that send requests through
// request.Runner.Handle with two tools: "post" writes a row of
// EffectsTable in its transaction, "notify" calls a Receiver (an HTTP
// server in the test) with the effect key, which performs an effect once
// per key. A worker announces each stage on stdout; some are killed with
// SIGKILL at a chosen stage (in the tool's transaction, after the
// external act, a few microseconds after the agent returns — during the
// success mark and the release — or after Handle) or at a random instant
// by the parent, which logs where each kill landed. Other workers resend
// every request until it is answered. checkInvariants then requires: no
// call committed or performed twice, every request answered with its own
// reply, no lease still held one TTL after the last worker ended, no tool
// execution left processing or started. TestInvariantsCatch plants each
// fault and expects it counted.
//
// For package failover, RunCrash also restarts the database at chosen
// instants (CrashConfig.Restart, RestartDelay, Restarts: a failover), and
// optionally: keeps each worker a random while at every stage (Dwell) and
// waits for a worker inside the flow before each restart (InFlow), so
// that restarts land in the tool's transaction, after a commit, after the
// external act, while leases are renewed; spreads workers over a
// cluster's nodes (Env.WorkerDSNs, Env.MultiPrimary); resends every
// answered request once more at the end (Verify: a request whose stored
// reply was lost runs again, and is counted). It also counts the effect
// rows whose tool execution is not a recorded success (a fenced write
// that committed without its execution: stale), the committed post calls
// a worker saw whose row is gone, and every lost lease a worker answered,
// with its node and whether the token was found gone or the trust
// deadline passed.
//
// runPaused stops a worker with SIGSTOP (sent to its own thread, so that
// it stops exactly there) at a stage, has others take its request over,
// continues it and requires that it answers nothing.
//
// # Sizes
//
// go test runs short versions (a few seconds per dialect). TestChaos is
// the long run behind make chaos (ROWLEASE_CHAOS_LONG, sized by
// ROWLEASE_CHAOS_OPS and ROWLEASE_CHAOS_KILLS), with server restarts
// through the scripts scripts/test.sh exports (faults.Restarter); it
// prints one summary line per dialect.
package chaos

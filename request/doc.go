// Package request is the second of rowlease's lock levels, and the whole
// message flow in one call: a request (one user message, identified by the
// session and the client's request id) never runs twice, and a finished one
// replays its stored reply.
//
// Runner.Handle wires session, request and tool-execution locks, the
// heartbeat and the final marks together:
//
//	runner, err := request.New(request.Config{DB: db, Tools: tools})
//	// a new session's first message creates its row in the shipped table
//	...
//	out, err := runner.Handle(ctx, request.Message{
//		SessionKey: sessionID, ClientRequestID: clientID, Content: text,
//	}, func(ctx context.Context, run *request.Run) (request.Answer, error) {
//		// each model round a step: recorded once, replayed on a resume
//		call, err := request.Step(ctx, run, "model-1", askModel)
//		// ...; run.CallTool(ctx, "create_transaction", call.Args)
//		return request.Answer{Reply: reply}, nil
//	})
//	switch {
//	case err == nil && out.Queued:
//		// 202: queued at out.Position (Message.OnBusy: request.Queue)
//	case errors.As(err, new(*session.BusyError)), errors.Is(err, request.ErrInFlight),
//		errors.Is(err, request.ErrTakenOver), errors.As(err, new(*request.InterruptedError)),
//		errors.Is(err, request.ErrCancelled):
//		// 409
//	case errors.Is(err, request.ErrFingerprintMismatch):
//		// 422
//	}
//
// The three tables are the ones package schema ships; Config renames them
// (Session.Table, RequestTable, ToolExecutionTable), and Session.Columns
// maps the session lock onto columns of your own session table.
//
// # States of a request
//
//	            busy session, Queue or Interrupt:
//	            INSERT queued (its arrival number; the session's
//	            processing requests asked to stop, for Interrupt)
//	(none) ─────────────────────────────────────▶ queued
//	  │                                             │ the session is free: the run that freed it, a
//	  │ INSERT (born held by its run, with the      │ dispatcher, or the interrupting Handle takes the
//	  │ session: one transaction or one statement)  │ session and the request (queued → processing),
//	  ▼                                             ▼ in one transaction
//	processing ◀─────────────────────────────────────┘
//	 │  │  ▲  ▲ ╰─ Step: each recorded output appended as a row of the step
//	 │  │  │  │    table (fenced by the request lease), replayed by every
//	 │  │  │  │    later run of the request
//	 │  │  │  └── lease expired or given back: taken over (by a resend, or by a
//	 │  │  │      dispatcher: after the grace and back-off, see "Resume"), with
//	 │  │  │      the session, in one transaction
//	 │  │  └───── failed: retried by a resend (with the session, in one transaction)
//	 │  ▼ agent failed (token-checked), or a dispatcher gave up after
//	 │ error   ResumeConfig.MaxAttempts runs that died (steps after the
//	 │  │     last one a committed tool call followed are deleted first)
//	 │  │
//	 │  └─ Cancel (no lease held) ──────────────────────────────────────────▶ cancelled
//	 ├─ asked to stop by another message (interrupted_by set) and it stopped
//	 │  (token-checked), or its run is gone (marked by the next claim of the
//	 │  session, by a resend, or by a dispatcher) ──▶ interrupted
//	 ├─ cancelled by its client (interrupted_by = its own client request id):
//	 │  as an interrupt, but it ends ──▶ cancelled
//	 └─ mark success (token-checked, reply stored) ──▶ success ─▶ replayed, no lock taken
//
//	queued ── Cancel ──▶ cancelled
//
//	processing ── Await with no answer recorded: marked waiting with its
//	 ▲            question (token-checked), both leases given back ──▶ waiting
//	 │                                                                  │
//	 │  Answer: the answer recorded as the wait's step and the request  │
//	 └─ made processing and free, in one transaction; then taken over ◀─┤
//	    at once (a resend of the stored message), steps replayed        │
//	 ▲                                                                  │
//	 └─ deadline passed (Within): a Started Runner records the expiry ◀─┤
//	    the same way and runs it on; Await returns *WaitExpiredError    │
//	                                                                    ├─ Cancel ──▶ cancelled
//	                                                                    ├─ a message of the session
//	                                                                    │  with OnBusy Interrupt ──▶ interrupted
//	                                                                    └─ older than the retention
//	                                                                       (Sweep) ──▶ expired
//
//	success, error, interrupted, cancelled ── older than the retention (Sweep) ──▶ expired
//	                       (a tombstone: reply, result, steps, tool calls deleted)
//
// A resend of a queued message answers its position; of an interrupted
// one, *InterruptedError; of a cancelled one, ErrCancelled; of an expired
// one, ErrExpired. None of them runs anything.
//
// # The flow
//
//  1. Read the request by (session, client request id): one statement.
//  2. Existing: another fingerprint → ErrFingerprintMismatch (422), nothing
//     changed. success → replay, no lock. processing under a live lease →
//     ErrInFlight (409), nothing changed.
//  3. New: in one transaction, take the session for it, then insert the
//     request already held by this run. Session busy → the transaction
//     rolls back, nothing was written, *session.BusyError (or ErrInFlight, when
//     the session is busy with this very message, sent a moment ago by a
//     duplicate; with Queue or Interrupt, see below). On PostgreSQL a new
//     message with OnBusy Reject does both in one autocommit statement
//     instead (engine.AcquireCreateUnless: a data-modifying WITH), both or
//     neither as well, and that statement is also step 1's read: it reads
//     the request first and writes nothing if it exists; when it does not
//     take the session (busy, or the session's lock row missing) it wrote
//     nothing, and the transaction above gives the answer. On MySQL a new
//     message with OnBusy Reject makes no read first and no transaction:
//     it inserts the request, held by this run (a duplicate's insert is
//     refused by the key, writes nothing, and step 2 answers it), then
//     takes the session in the request's name, two autocommit statements.
//     When the session is busy or has no lock row, the request is deleted
//     again, token-checked, and the transaction's path gives the answer. A
//     process that dies between the two leaves a request held by a run
//     that is gone and no session: it is resumed as any dead run. (MySQL
//     and SQLite cannot write two tables in one INSERT or UPDATE, and
//     Queue and Interrupt read the messages ahead between the two, so
//     they keep the transaction.) Existing and
//     failed or stale: take the session, then the request, in one
//     transaction. Either way both or neither: a session is never left
//     held by a request that does not exist. One claim does this for
//     every path that takes a request — a new message, a resend of a
//     failed or dead run, the head of a queue. (When the commit's outcome
//     is unknown — the connection dropped, or ctx was cancelled, with the
//     reply on the wire — both are given back at once, token-checked, the
//     session first, on every path: a new request is deleted, a taken-over
//     one stays processing and free for a retry to resume. After the
//     single statement, whose generation did not come back, the session's
//     row is read first: it is released only if the new request's id
//     holds it.)
//  4. On a takeover, in the same transaction, free the leases of the
//     request's tool executions still marked running (processing or
//     started; toolexec.Store.ReleaseForRequest) and read the tool calls
//     that already committed (Run.Prior; toolexec.Store.Succeeded) and the
//     recorded steps. A dead run's tool lease can
//     outlive its request lease by up to one heartbeat interval; freed,
//     the new run claims the same call at once instead of being refused
//     with *toolexec.BusyError, and the dead run can mark none of them.
//  5. Run the agent under a heartbeat (session, request, and the running
//     tool), with a context that is cancelled as soon as a lease is lost,
//     or another message interrupts the run. The Runner's runs share one
//     heartbeat.Batcher: every interval, one statement per table renews
//     the leases of every run in flight and one read finds the runs asked
//     to stop (1,000 runs: 3 statements per interval, where a heartbeat
//     per run costs 2,000; TestHeartbeatOfAThousandRuns), each run still
//     losing its own work context when one of its leases is lost.
//     Config.SeparateHeartbeats gives every run its own.
//  6. Mark success with the reply, or error, token-checked; release the
//     session. Clean-up writes use a bounded timeout that survives the
//     caller's cancellation.
//  7. The run that frees the session starts the session's next queued
//     message (see "The queue"), if it may have one.
//
// One new request with two model rounds and one tool call costs, against
// about 29 statements in the design of the article this project comes
// from (TestLockPathStatements, BenchmarkLockPath): on PostgreSQL 4
// statements and one transaction (BEGIN/COMMIT, the tool's side effect),
// 6 round trips — the read of the request and the claim are one statement
// (engine.AcquireCreateUnless) for a new message with OnBusy Reject; on
// MySQL 8 statements and one transaction (the side effect's), 10 round
// trips — a new message with OnBusy Reject inserts its request (which
// refuses a duplicate by its key, so no read comes first) and then takes
// the session, two autocommit statements; on SQLite 9 statements and two
// transactions (the claim's and the side effect's), 13 round trips:
// SQLite has no statement that writes two tables, and a commit, not a
// round trip, is what costs there. On MariaDB the multi-table UPDATE
// costs the server more than the writes one by one, so the ends are sent
// one write at a time. A replay takes no lock and writes nothing: one
// statement (on MySQL, the refused insert and the read).
//
// The code follows a message's path, each file once: runner.go (Config,
// New, Handle: the checks before any SQL, with agents.go and metadata.go,
// then what Handle does with what begin came to), claim.go (steps 1 to 4:
// begin; the claimer that New chose by the dialect, one statement on
// PostgreSQL and two autocommit statements on MySQL for a Reject message,
// a transaction elsewhere; claim, the one
// transaction that takes a request on every path, and claimHead),
// existing.go (a request that exists: read it, replay it or say why it
// does not run, or hand claim.go its takeover), queue.go (the busy
// policies: the queue stores a message and says where, and Handle acts on
// it), dispatch.go (a queued message's answer, an interrupting one's wait;
// step 7, and the dispatcher), run.go (step 5: the heartbeat, and the Run
// handed to the agent), step.go (Run.Step) and finish.go (step 6: mark the
// request, free the session). Each step returns what it came to, and its
// caller acts on it: an answer from a request hands back the takeover it
// calls for, the queue where it put a message, and neither claims nor
// starts anything. Beside the path: status.go (Status, Wait), await.go
// (Await, Answer, and park, which finish calls for a run that stopped at
// a wait), cancel.go, interrupt.go, resume.go, sweep.go, observe.go, and
// statements.go, which
// holds every statement of this package (the lease operations are package
// lease's; the tool-execution table is package toolexec's).
//
// # Guarantees
//
//   - One lock order everywhere: session → request → tool execution.
//   - A loser changes nothing: a duplicate gets its conflict and leaves the
//     owner's session, request and tool rows as they were. No path releases,
//     marks or restores a lock it does not hold: every write is
//     token-checked. A few writes touch rows nobody holds a live lease on,
//     each conditional on that: the claim (or the dispatcher) that marks a
//     dead run interrupted or cancelled (its lease free or expired, as for
//     a takeover), the dispatcher's mark of a run that died MaxAttempts
//     times (the same, and its generation unchanged), Cancel of a queued
//     or failed request (its status unchanged, no lease), the sweeper
//     (finished rows, no lease); and one kind of write to a row another
//     run holds: an interrupting message, or Cancel, sets interrupted_by
//     on processing requests, which only asks them to stop (no lease
//     column, no status).
//   - A failed request frees its session at once, not after the TTL.
//   - Loss stops the work: the agent's context is cancelled with a cause
//     that matches lease.ErrLost within one heartbeat interval — also while
//     a tool's transaction is open, because the fences lock the lease rows
//     only at its end (on SQLite the heartbeat renews inside it, and no one
//     else can write meanwhile), and while a tool's transaction is run
//     again after a transient error at its mark or commit (its tool lease
//     is watched again, from its last renewal) — and the run's later
//     writes are refused.
//   - A slow tool keeps its run's locks: a side effect of any length
//     commits if nobody took the run over, and never after a takeover
//     (tested with five TTLs of work). Effects outside the database go
//     through CallTool too, with a stable effect key (toolexec.ExecuteExternal).
//
// # Steps: a resumed run does not decide twice
//
// A tool call is exactly-once per (request, tool, canonical arguments,
// occurrence), where the occurrence counts the identical calls of a run in
// the order it makes them (Run.CallTool: the model that books 5 twice for
// two coffees books twice, and a resumed run's second identical call meets
// the second effect): that holds for the conversation only if a resumed
// run asks for the same calls, in the same order, and a model asked again
// does not promise it (other words, another note, a category chosen
// otherwise: another call, and the money written twice). Run.Step(ctx,
// name, fn) — and the typed Step[T] — records what a run decided:
//
//   - fn runs once per position of the request's run, and its output
//     (JSON, at most Config.MaxStepOutput bytes) is appended as one row of
//     the step table (schema.StepTable: request id, position, name,
//     output) by engine.ConfirmPut, fenced by the run's request lease: one
//     statement per recorded step on PostgreSQL (the confirmation of the
//     lease, a write of its row, and the insert, in one WITH) and on
//     SQLite (the insert, checking the lease; one writer at a time), a
//     transaction of the confirmation and the insert on MySQL: a write of
//     the lease row, which a multi-primary cluster certifies against a
//     takeover (TestStepStatements, BenchmarkStep, and, on a Galera
//     cluster, TestConfirmPutAgainstTakeovers). A step costs the same at
//     every position (BenchmarkStepJournal). A stale run records nothing:
//     its Step fails with ErrTakenOver (and lease.ErrLost).
//   - A recorded step is committed on its own when Step returns: it never
//     rides in another fenced transaction of the run (an InTx, a tool
//     call on another goroutine), whose rollback would undo it. On SQLite
//     it waits for such a transaction, which holds the write lock.
//   - A run that takes the request over (a resend after a crash or a
//     failure, a dispatcher's resume) reads the recorded steps in the
//     takeover's transaction and gets their outputs back, in order,
//     without calling fn: 0 statements per replayed step. The tool calls
//     it makes from them are the same calls in the same order, so CallTool
//     returns their stored results (the n-th identical call the n-th
//     one's).
//   - Steps are at-least-once, effects exactly-once: a step whose output
//     was not recorded before its run died (the model answered, the
//     process died before the UPDATE) runs again. The model is asked at
//     most once per recorded step, plus once per death inside a step.
//   - A replay is checked: a step asked for at a recorded position under
//     another name is a *StepDivergedError, never the
//     output of another step; the run fails with it, even if the agent
//     goes on or returns an error that does not wrap it, the request is
//     marked error with the steps from the diverged position on deleted,
//     and a resend replays those before it and asks for the rest afresh.
//   - A run that fails (its agent returned an error) keeps the steps that
//     a tool call whose effect may have happened followed (a succeeded
//     call, or an external effect started; toolexec stores with each call
//     how many steps its run had), and deletes the others, in a
//     transaction fenced by its leases, before the request is marked
//     error. Its resend replays the steps that decided an effect, so the
//     effect is not repeated in another form, and asks again for the rest:
//     a model output the agent could not use is not replayed forever.
//
// What the agent must keep deterministic between steps: the code between
// two steps may depend only on the message (Run.Content), the outputs of
// the steps before it, and the results of the tool calls it made (which a
// resumed run gets back from CallTool). Anything else that can change
// between runs — the clock, random numbers, a read of data another
// request may change, the model itself — goes inside a step. Take steps
// one after the other (Step serializes them), with names that say what
// they are ("model-1", "classify"), and record a step before acting on it.
//
// # Resume: no accepted message is left behind
//
// Every accepted message stores its content with its request (in the
// INSERT the flow already makes). A Started Runner with an Agent resumes,
// through the same takeover (steps replayed, tool calls reused), every
// processing request whose run died — one that came through the queue, and
// one accepted at once (Reject, or started at once) whose client never
// came back:
//
//   - after its lease expired (or was given back) plus ResumeConfig.Grace
//     (0: the TTL; the time its client has to resend it itself; a message
//     of the queue has no grace), plus (n−1)·Backoff after its n-th run
//     died;
//   - ahead of the session's queue: no queued message starts while a dead
//     run of the session waits for its grace, and Queue and Interrupt
//     messages queue behind it;
//   - at most ResumeConfig.MaxConcurrent resumed runs at once per Runner;
//   - after ResumeConfig.MaxAttempts of its runs died (schema.ColDeaths:
//     a claim that takes over a lease its holder never gave back counts
//     one; a run that gave its leases back — Close, a caller that gave up —
//     does not) it is no longer resumed: one conditional UPDATE marks it
//     error, with the cause in its error text; a resend of the message
//     still retries it.
//
// Status and Wait show the outcome. ResumeConfig.Disabled leaves a run
// accepted at once to its client's resend, as before, without holding up
// the queue behind it.
//
// # Agents: a resumed run runs with the agent that accepted it
//
// A Runner's agents are Config.Agent (the default) and the named ones of
// Config.Agents (NewAgents, Register; a name is text of at most
// schema.MaxAgentNameLen bytes). A message names its agent
// (Message.Agent; empty: the default), and the name is stored with its
// request (schema.ColAgent; NULL for the default, so rows written before
// agents had names, and single-agent services, read as the default's).
// Handle with a nil agent runs the named one; with an agent of its own it
// runs that, and stores the message's name all the same: name the agent
// registered for the same work. A name that is not registered is an
// *UnknownAgentError (lease.ErrInvalid), before any SQL.
//
// A Runner starts from the queue, and resumes, only the requests whose
// agent it has, on every path: its dispatcher's sessions are those with a
// request of one of its agents (the names bound in the statement); the
// head of a session's queue (read by a continuation, the dispatcher, a
// waiting interrupter) whose agent it does not have is left alone, and
// nothing behind it overtakes it; a Runner that has its agent starts it.
// Each request so left is logged once per Runner (Info, with the request
// and the agent's name), reported to the Observer (EventAgentSkipped) and
// counted (Runner.SkippedForAgent); the dispatcher also looks for them
// among the requests ready to run on its first poll and every 30 polls
// after it (one statement), so that a request whose agent no Runner of
// the service has is seen. Two programs with different agents, or one
// service with a chat agent and a summarizer, share the tables so.
//
// # Metadata: more than text
//
// A message may carry a JSON object besides its content
// (Message.Metadata: the user, attachments' references, model settings).
// It is stored with the request by the statement that creates it (the
// INSERT of the flow, or of the queue), handed to every run's agent
// (Run.Metadata: a resumed run and a run started from the queue read it
// from the request's row), and shown by Status (Status.Metadata). It is
// part of the default fingerprint: the SHA-256 of the content, a NUL byte
// and the metadata's canonical form (RFC 8785), so the same object written
// otherwise (members in another order, other white space) is the same
// message, and other metadata under the same client request id is
// ErrFingerprintMismatch; a message without metadata keeps the fingerprint
// of the content alone, as stored rows have it. Metadata larger than
// Config.MaxMetadata (default 64 KiB) is a *MetadataTooLargeError
// (*MetadataTooLargeError), and anything but one JSON object an error
// matching lease.ErrInvalid: both before any SQL. The sweeper empties it
// with the content.
//
// # Cancel
//
// Runner.Cancel(ctx, session, client request id) cancels a queued message
// (at once: it never runs), a running one (as an interrupt without a new
// message: interrupted_by is set to the request's own client request id,
// which no other message of the session can have; its run's context is
// cancelled with cause ErrCancelled at once in this process and within a
// heartbeat interval elsewhere, and the run marks itself cancelled,
// token-checked, and frees the session), one whose run died (at once: a
// resend or a dispatcher that is taking it over at that moment reads the
// flag in its claim's transaction, gives the request back and settles it,
// so no replay and no effect follows the cancel), or a failed one. The
// tool calls it committed stay; cancelled is final, and every resend of
// its id gets ErrCancelled (409 "cancelled" in httpapi). A running one
// that another message asked to stop first ends interrupted, as that
// message asked, also when its run is in the Cancel's own process (Cancel
// stops it at once, with the interrupt). A running one whose process dies
// after the cancel, before its heartbeat read it, is never resumed: the
// dispatcher of a Started Runner with an Agent marks it cancelled once its
// lease has expired (an interrupted one alike), and a resend does the
// same.
//
// # When the session is busy: Message.OnBusy
//
//   - Reject (the default): *session.BusyError (409), nothing written. It
//     costs nothing more than before: no statement of the flow above reads
//     the queue.
//   - Queue: the message is stored as queued (one transaction: the
//     session's queue is counted against QueueConfig.Max, beyond which it
//     is *QueueFullError and nothing is written, and the message gets the
//     next arrival number, unique per session) and Handle returns at once
//     with Outcome.Queued and Outcome.Position (how many run before it).
//     Its agent (Config.Agent, or the one of Config.Agents that
//     Message.Agent names) runs it later, exactly once, in arrival
//     order. A Queue message that finds the session free but messages
//     queued before it is queued behind them.
//   - Interrupt: in the same transaction as its insert, every processing
//     request of the session is asked to stop (its interrupted_by column
//     is set; nothing else of its row is touched). The running run reads
//     that column at each heartbeat renewal (one more statement per
//     interval) and cancels its agent's context with an *InterruptedError
//     (matching *InterruptedError): within one heartbeat interval. When its
//     agent returns, the run marks itself interrupted, token-checked, and
//     frees the session. Its tool calls that committed stay (never undone,
//     never repeated: the request never runs again); one inside its
//     transaction is rolled back by the cancelled context, or commits if
//     it was already committing; CallTool and InTx refuse every write
//     after the interruption, whatever context the agent passes. The
//     interrupting message is queued ahead of the plain queued messages
//     (behind earlier interrupting ones) and Handle waits, polling (see
//     QueueConfig.PollMin), until it can start it and run it with its own
//     agent, or until another process has run it (then it returns that
//     outcome, Replayed). If the running run is dead, the interrupter
//     waits for its leases to expire, like any takeover — the request
//     lease too, not only the session lease, which lapses a moment
//     earlier (it was taken a statement before); the claim that then
//     takes the session marks the dead request interrupted.
//
// # The queue
//
// Queued messages live in the request table (status queued, with their
// content and arrival number), so they survive a crash of every process.
// A message is started by claiming it: in one transaction, the session
// (free or expired) for it, the dead interrupted runs of the session
// marked interrupted, then the request, queued → processing (or, for a
// message started from the queue whose run died, taken over with its tool
// calls, as a resend would). No claim starts a message while a run of
// the session that was asked to stop, or that came from the queue, still
// holds its request lease. Any process may claim; the transaction makes
// one win. Claims come from:
//
//   - the run that frees the session, if it may have queued messages: it
//     came from the queue, or was interrupted, or this Runner queued
//     messages for the session or saw them (a continuation, in a
//     goroutine of the Runner, with a bounded context);
//   - Handle itself, right after queueing, if the session was freed in
//     between (one read of the session lock);
//   - the interrupting Handle, while it waits;
//   - the dispatcher (Start), every QueueConfig.DispatchInterval: one read
//     of the sessions with a message to start (queued, or a dead run due
//     for its resume) and no live run (a busy session is not read until
//     its run has ended), at most DispatchBatch, in the order of
//     their keys, each poll going on after the last session of the one
//     before and starting from the first again after a short one; then
//     one read of the lock of each, and a claim of those that are free or
//     expired. It starts what no running process will: the queue of a
//     session whose holder crashed (after the TTL), or one that another
//     process freed without knowing of it. It also marks the runs asked
//     to stop (Cancel, an interrupt) whose process died before they
//     stopped: cancelled or interrupted, one statement for the session,
//     once their lease has expired. Every session it could start is
//     visited within ceil(N/DispatchBatch)+1 polls (N: the sessions with a
//     message to start and no live run), however many sessions are busy,
//     and whatever sessions it cannot start (a deleted session's
//     leftovers, runs waiting for a resume slot) sort first.
//
// A claimed message runs with its agent (see "Agents") in a goroutine of
// the Runner (owned: Close lets it finish, then cancels it and waits for
// it), or, when an interrupting Handle of the same process is waiting for
// it, in that call with the agent of that call.
//
// Races, and how they end:
//
//   - Interrupt against the run finishing: the flag and the final mark
//     are two writes of one row. If the mark comes first, the flag (set
//     only on processing rows) misses and the answer stands; if the flag
//     comes first and the agent still returns an answer, the answer is
//     stored: an interrupt never throws a finished answer away. Either
//     way the interrupting message runs next.
//   - Two interrupters: both are queued in arrival order; the first one's
//     flag stays on the running request, which stops once; they then run
//     one after the other, neither interrupting the other: an interrupt
//     stops what runs when it arrives.
//   - Interrupt against the queue: interrupting messages go before plain
//     queued ones; a plain message queued later waits behind them.
//   - A Reject message that finds the session free takes it, even if
//     messages are queued (only Queue and Interrupt messages look at the
//     queue): queue order holds among queued messages.
//   - Two claims of one head (continuation, dispatcher, interrupter): the
//     session's conditional UPDATE lets one win; the other changes nothing.
//
// # Waiting for a person: Await and Answer
//
// An agent that must ask a person (approve a booking above a threshold,
// choose between two accounts) calls Await (or Run.Await) with a name and
// a question:
//
//	ok, err := request.Await[Approval](ctx, run, "approve-1", question)
//	if err != nil {
//		return request.Answer{}, err // ErrWaiting: the run stops here
//	}
//
// A wait is a step of the run's journal: its answer is recorded at the
// position where the run asks, and replayed by every later run. With no
// answer recorded, Await returns ErrWaiting; when the agent returns, the
// request is marked waiting (token-checked), with the wait's name, its
// question, its position in the journal and its deadline (Within; by the
// database clock), and both leases are given back in the same breath:
// nothing holds, renews or polls anything for it while the person thinks
// (1,000 waiting requests cost 0 statements per heartbeat interval:
// TestThousandWaitsCostNothing). Handle returns an Outcome whose Waiting is
// the question; Status shows it (Status.Waiting), Wait returns on it, and
// a resend of the message answers it again without running anything.
// Once Await said ErrWaiting the run's later Step, Await, CallTool and
// InTx are refused with it, and the request waits whatever the agent
// returns.
//
// Runner.Answer(ctx, session, client request id, name, answer), from any
// process: in one transaction, conditional on the request waiting for
// that name with its deadline not passed, the request is made processing
// (its lease free) and the answer inserted as the wait's step; then the
// request is taken over at once, as a resend of its stored message would
// (the same claim), and its agent — the one that accepted it — runs it
// on: its steps replayed, Await returning the answer, the tool calls
// committed before the wait returned from their records. Answer returns
// that run's Outcome. Two answers at once serialize on the request's row:
// one records, the other finds the answer recorded. The same answer again
// (the same JSON value, RFC 8785) is idempotent: it waits for the run in
// flight, or replays its outcome, or takes over a run that died; another
// answer is an *AnsweredError, a name the request does not wait for a
// *NotWaitingError, and an answer after the deadline a *WaitExpiredError;
// none of them writes anything. A name is asked once per request: it
// names one wait, so a late duplicate of a first answer can never answer
// a second question.
//
// While a request waits, its session holds no lease. A new message of
// the session gets, by its OnBusy:
//
//   - Reject: it runs at once (the session is free), and the wait stays
//     open; Reject reads no queue and sees no wait, at no cost. An answer
//     that comes while that message runs records the answer and returns
//     the *session.BusyError: the request runs on when a Started Runner
//     resumes it (it is processing and free) or the answer is sent again.
//   - Queue: it is queued behind the waiting request (a waiting request
//     counts ahead of it, as a queued one does) and runs after it has
//     finished; nothing of the session's queue starts while a request of
//     the session waits.
//   - Interrupt: the waiting request is marked interrupted in the
//     message's own transaction (interrupted_by: the message), and the
//     message runs in its place; an answer after it is a
//     *NotWaitingError, a resend of the waiting message an
//     *InterruptedError.
//
// Cancel of a waiting request marks it cancelled at once; the queue
// behind it goes on. With a deadline, a Started Runner with an Agent runs
// the request on when it passes (its dispatcher reads it with the other
// runnable requests, ahead of the session's queue: no statement of its
// own), recording the expiry as the wait's step, so that every replay
// sees the same *WaitExpiredError. Without one, the request waits until
// it is answered, cancelled, interrupted, or swept: the sweeper treats a
// waiting request as finished once it has waited longer than the
// retention, and the resend of a swept one gets ErrExpired.
//
// A run that fails after its answer keeps the answer's step (the person
// is not asked again); a tool call that its answer decided is exactly-once
// as every other.
//
// # Waiting, status, retention
//
// Wait(session, client request id) waits until the request is final and
// returns its Status with the stored outcome, across processes: it reads
// the status (one statement) with a jittered backoff (QueueConfig.PollMin
// to PollMax), and is woken at once by requests that end in its own
// process. Status reads a request's state (with the position of a queued
// one), its outcome and whether a run holds it, in one statement, taking
// no lock.
//
// Sweep (and the sweeper Start runs when Retention.After is set) turns
// finished requests (success, error, interrupted, cancelled), and
// requests waiting for an answer, older than the retention into
// tombstones (status expired, reply, result, error, content, metadata and
// the question emptied) and deletes their recorded steps and tool executions (but not an external effect
// left started, whose outcome is unknown), in batches of
// Retention.Batch, one short transaction each; it never touches a queued
// or processing request. A resend of a swept id gets ErrExpired (410) and
// never runs again; its fingerprint is kept, so other content is still
// ErrFingerprintMismatch. Tombstones are kept.
//
// # What it does not do
//
// It cannot stop an agent that ignores its context (an interrupted or
// cancelled run then ends only when its agent returns; its writes are
// refused). A model call outside a step may run again after a takeover,
// and one inside a step whose output was not recorded before the crash;
// only tool calls are exactly-once. It cannot make an agent deterministic
// between steps: a divergence is detected, not repaired. Identical tool
// calls made in parallel are numbered in the order they enter CallTool,
// which a resumed run may not repeat: as many effects, but which call gets
// which stored result may change (make them one after the other, or tell
// them apart in their arguments, when it matters). The queue is per
// session; a message of a Reject client may run before queued ones. The
// dispatcher is polled, not pushed: a queue that only it can start waits
// up to DispatchInterval (and, after a crash, the TTL plus the grace), or
// a few intervals when more than DispatchBatch sessions wait for it.
// Waits are polled too (no LISTEN/NOTIFY). Without a Started Runner with
// an Agent, a dead run accepted at once waits for its client's resend.
// Requests stored before their content was (an older version) are not
// resumed by the service. A request whose agent no Runner of the service
// has waits (each Runner that meets it logs and counts it once).
//
// # Failure handling
//
// Handle's errors are lease's kinds with detail (a busy session is a
// *session.BusyError, lease.ErrHeld; a missing one a
// *session.NotFoundError, lease.ErrNotFound; bad input lease.ErrInvalid),
// or the outcomes of a request that no lease names, which keep sentinels
// of their own (ErrInFlight, ErrTakenOver, ErrFingerprintMismatch,
// ErrAgentFailed, ErrExpired, ErrCancelled) or types (*InterruptedError,
// *QueueFullError):
//
//   - *session.BusyError, ErrInFlight: someone else holds the lock; nothing
//     changed; retry later (the wrapped *lease.ConflictError has the time
//     left). ErrInFlight also ends the attempts to take the locks when
//     each failed with a retryable database error (a deadlock, SQLite
//     busy): the last of them stays in the chain and in the text
//     (lease.IsTransient reports it), so that a database that keeps
//     refusing is not mistaken for a busy request.
//   - ErrTakenOver: this run lost a lease while running; its work was
//     cancelled and it wrote nothing more. A retry replays or resumes.
//   - lease.ErrPoolExhausted (also lease.ErrLost, lease.IsUnavailable, not
//     ErrTakenOver): the heartbeat found no free connection of the pool
//     until the leases' trust deadline; the work was cancelled as for a
//     loss, the leases given back, the request left processing and free.
//     Nobody took it over: the pool is too small (README, "Sizing the
//     pool"; Config.SeparateHeartbeats). A retry resumes.
//   - an error matching context.DeadlineExceeded: one of the
//     Runner's own bounded waits ran out, whatever ctx's deadline — the
//     final mark of the request (its outcome and the session's release,
//     bounded by Config.ReleaseTimeout: the database, or on SQLite its one
//     write lock, was busy past it), or a read of Wait. The error names
//     the wait and the setting, and says what to do: after a final mark,
//     resend with the same client request id (the stored outcome, or 409
//     in flight until the run's lease expires, then a run that reuses the
//     committed tool calls). A bare context.DeadlineExceeded is ctx's own.
//   - ErrFingerprintMismatch: the client reused an id for other content.
//   - *UnknownAgentError (lease.ErrInvalid): the message
//     names an agent that Config.Agents does not have; nothing was
//     written (400).
//   - *MetadataTooLargeError (lease.ErrInvalid): the
//     message's metadata is over Config.MaxMetadata; nothing was written
//     (400).
//   - *session.NotFoundError (lease.ErrNotFound): the session has no lock row, and none is
//     created: Config.RequireSession on the shipped session table, or a
//     table of your own (Session.Table) without Session.AutoCreate; for a
//     new request and for the retry of an existing one alike (404);
//     nothing changed. On the shipped table a new session's first message
//     otherwise creates the row: it holds nothing but the lock, so
//     requiring it first would only turn every first message into a 404
//     unless each service remembered to create it.
//   - ErrAgentFailed: the agent returned an error, or an Answer whose
//     Result is not valid JSON (the error then also matches
//     lease.ErrInvalid, and the bad result is not stored); the request is
//     marked error and the session freed; a retry with the same id runs
//     it again.
//   - A cancelled ctx (shutdown, a run timeout) while the agent runs: the
//     leases are given back, the request stays processing and free; a
//     retry resumes it. If the agent returned its answer all the same (or
//     ctx was cancelled just after it did) and no lease was lost, the
//     answer is stored as usual, with a bounded context that survives the
//     cancellation, and Handle returns it with a nil error: a retry
//     replays it instead of running the model rounds again.
//   - The commit that takes the session and the request fails with its
//     outcome unknown (connection dropped, ctx cancelled): Handle returns
//     the error, and both locks are given back at once, token-checked,
//     never left held for a TTL with no heartbeat; a retry runs the
//     message (a new request) or resumes it (a takeover, or a queued
//     message claimed by the queue).
//   - rowleasetest.Crash(run), in a test: nothing is written; the leases
//     expire after the TTL (a crash, simulated). No queued message is started by it; a Started
//     Runner resumes the request after the grace (see "Resume").
//   - Outcome.Queued (nil error): the message is queued, not answered; its
//     outcome comes later (Wait, Status). A resend answers the same.
//   - *QueueFullError: the session's queue is full; nothing
//     was written; retry later (429).
//   - *InterruptedError (naming the interrupting message):
//     the request stopped because another message asked it to; final: a
//     resend answers the same (409).
//   - ErrCancelled: the request was cancelled by its client (Cancel);
//     final: a resend answers the same (409). It is also the cause of the
//     cancelled run's context.
//   - *StepDivergedError (inside ErrAgentFailed): a
//     resumed run asked for a recorded step under another name; the
//     request is marked error with the steps from there on deleted; a
//     resend replays those before it and runs the rest afresh.
//   - *StepTooLargeError: a step's output is over
//     Config.MaxStepOutput; nothing was recorded.
//   - A step that cannot be recorded: ErrTakenOver (and lease.ErrLost)
//     when the run lost its request; a database error after bounded
//     retries of transient ones otherwise. The step's output is then not
//     recorded, and a resumed run asks for it again.
//   - A request whose runs keep dying: resumed by the service with a
//     back-off, then marked error after ResumeConfig.MaxAttempts deaths
//     (Status.Error says so); a resend retries it.
//   - ErrExpired: the request finished before the retention and was swept;
//     final (410).
//   - lease.ErrNotFound (Status, Wait): no such request (404).
//   - An interrupting Handle whose ctx ends before its message could run:
//     the message stays queued at the head and runs later; the error
//     matches ctx's cause (or ErrInFlight, if it is running elsewhere).
//   - Close: runs started from the queue are let finish until Close's ctx
//     ends, then cancelled (cause ErrClosed): their requests stay
//     processing and free, and a dispatcher of any process resumes them
//     (a resumed one, or one accepted at once, after the grace).
package request

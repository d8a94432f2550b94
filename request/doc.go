// Package request is the second of rowlease's lock levels, and the whole
// message flow in one call: a request (one user message, identified by the
// session and the client's request id) never runs twice, and a finished one
// replays its stored reply.
//
// Runner.Handle wires session, request and tool-execution locks, the
// heartbeat and the final marks together:
//
//	runner, err := request.New(request.Config{DB: db, Tools: tools})
//	...
//	out, err := runner.Handle(ctx, request.Message{
//		SessionKey: sessionID, ClientRequestID: clientID, Content: text,
//	}, func(ctx context.Context, run *request.Run) (request.Answer, error) {
//		// model rounds; run.CallTool(ctx, "create_transaction", args)
//		return request.Answer{Reply: reply}, nil
//	})
//	switch {
//	case errors.Is(err, request.ErrSessionBusy), errors.Is(err, request.ErrInFlight),
//		errors.Is(err, request.ErrTakenOver):
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
//	   INSERT (born held by its run,          mark success (token-checked, reply stored)
//	   with the session, in one transaction)
//	(none) ──────────▶ processing ─────────────────────────────────────────▶ success ─▶ replayed,
//	                    │  ▲  ▲                                                         no lock taken
//	   agent failed     │  │  │ lease expired or given back: taken over
//	   (token-checked)  ▼  │  └── together with the session, in one transaction
//	                  error┘ retried (with the session, in one transaction)
//
// # The flow
//
//  1. Read the request by (session, client request id): one statement.
//  2. Existing: another fingerprint → ErrFingerprintMismatch (422), nothing
//     changed. success → replay, no lock. processing under a live lease →
//     ErrInFlight (409), nothing changed.
//  3. New: in one transaction, take the session for it, then insert the
//     request already held by this run. Session busy → the transaction
//     rolls back, nothing was written, ErrSessionBusy (or ErrInFlight, when
//     the session is busy with this very message, sent a moment ago by a
//     duplicate). Existing and failed or stale: take the session, then the
//     request, in one transaction. Either way both or neither: a session is
//     never left held by a request that does not exist. (When the commit's
//     outcome is unknown — the connection dropped, or ctx was cancelled,
//     with the reply on the wire — both are given back, token-checked.)
//  4. On a takeover, in the same transaction, free the leases of the
//     request's tool executions still marked running (processing or
//     started; toolexec.Store.ReleaseForRequest) and read the tool calls
//     that already committed (Run.Prior). A dead run's tool lease can
//     outlive its request lease by up to one heartbeat interval; freed,
//     the new run claims the same call at once instead of being refused
//     with toolexec.ErrConflict, and the dead run can mark none of them.
//  5. Run the agent under a heartbeat (session, request, and the running
//     tool), with a context that is cancelled as soon as a lease is lost.
//     The Runner's runs share one heartbeat.Batcher: every interval, one
//     statement per table renews the leases of every run in flight (1,000
//     runs: 2 statements per interval, where a heartbeat per run costs
//     2,000; TestHeartbeatOfAThousandRuns), each run still losing its own
//     work context when one of its leases is lost.
//     Config.SeparateHeartbeats gives every run its own.
//  6. Mark success with the reply, or error, token-checked; release the
//     session. Clean-up writes use a bounded timeout that survives the
//     caller's cancellation.
//
// One new request with two model rounds and one tool call costs 9
// statements and two transactions (BEGIN/COMMIT): 13 round trips, against
// about 29 in the design of the article this project comes from
// (TestLockPathStatements, BenchmarkLockPath). A replay costs one
// statement.
//
// # Guarantees
//
//   - One lock order everywhere: session → request → tool execution.
//   - A loser changes nothing: a duplicate gets its conflict and leaves the
//     owner's session, request and tool rows as they were. No path releases,
//     marks or restores a lock it does not hold: every write is
//     token-checked.
//   - A failed request frees its session at once, not after the TTL.
//   - Loss stops the work: the agent's context is cancelled with a cause
//     that matches lease.ErrLost within one heartbeat interval — also while
//     a tool's transaction is open, because the fences lock the lease rows
//     only at its end (on SQLite the heartbeat renews inside it, and no one
//     else can write meanwhile) — and the run's later writes are refused.
//   - A slow tool keeps its run's locks: a side effect of any length
//     commits if nobody took the run over, and never after a takeover
//     (tested with five TTLs of work). Effects outside the database go
//     through CallTool too, with a stable effect key (toolexec.RunExternal).
//
// # What it does not do
//
// It does not queue: a busy session is a 409, and the client retries. It
// cannot stop an agent that ignores its context. A model call is not a
// side effect and may run again after a takeover; only tool calls are
// exactly-once.
//
// # Failure handling
//
//   - ErrSessionBusy, ErrInFlight: someone else holds the lock; nothing
//     changed; retry later (the wrapped *lease.ConflictError has the time
//     left).
//   - ErrTakenOver: this run lost a lease while running; its work was
//     cancelled and it wrote nothing more. A retry replays or resumes.
//   - ErrFingerprintMismatch: the client reused an id for other content.
//   - session.ErrNotFound: the session has no lock row (and
//     Session.AutoCreate is off), for a new request and for the retry of
//     an existing one alike (404); nothing changed.
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
//   - Run.Abandon: nothing is written; the leases expire after the TTL (a
//     crash, simulated).
package request

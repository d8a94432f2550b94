// Package api is the bookkeeper's HTTP API (JSON over net/http, Go 1.22
// routing patterns):
//
//	POST /api/sessions                      201 {"id", "ledger_id", "created_at"}
//	GET  /api/sessions/{id}                 200 the session
//	POST /api/sessions/{id}/messages        200 {"reply", "transaction_id", "replayed", "resumed"}
//	                                        202 {"status": "queued", "position"} (on_busy "queue")
//	                                        202 {"status": "waiting", "waiting": {"name", "question", "deadline"}}
//	GET  /api/sessions/{id}/messages        200 {"messages": [...]}
//	GET  /api/sessions/{id}/messages/{client_request_id}
//	                                        200 {"client_request_id", "status", "position", "reply", "transaction_id"}
//	DELETE /api/sessions/{id}/messages/{client_request_id}
//	                                        200 {"client_request_id", "status": "cancelled"}
//	                                        202 {"client_request_id", "status": "processing"} (still stopping)
//	POST /api/sessions/{id}/messages/{client_request_id}/answers/{name}
//	                                        body {"approved": true|false}; answered like a message:
//	                                        200 {"reply", …}, or 202 {"status": "waiting", …} at a later wait
//	GET  /api/sessions/{id}/transactions    200 {"transactions": [...], "total_income", "total_expense"}
//	GET  /healthz                           200 {"status": "ok"}
//	GET  /                                  200 the chat page (package web)
//	GET  /assets/{name}                     200 its script, style sheet and icon
//
// POST …/messages and GET …/messages/{client_request_id} are rowlease's
// handlers (httpapi.MessageHandler, httpapi.StatusHandler), given the
// example's own reading of the request (the session must exist; the body
// is checked as below) and its own bodies and problems, so that the
// contract here is the example's.
//
// A message is {"content": "…", "client_request_id": "…", "on_busy":
// "reject" | "queue" | "interrupt"}; the client request id is the client's
// idempotency key. Sending it again — a retry, a second device, a replay
// after a lost response — never runs the agent twice: a finished request
// replays its stored reply ("replayed": true), a running one is 409, a
// queued one 202 again, and the same id with other content is 422.
//
// on_busy says what happens when the session is answering another message
// (request.Message.OnBusy):
//
//   - "reject" (the default): 409 session-busy; the client retries.
//   - "queue": 202 Accepted, Location: /api/sessions/{id}/messages/{client_request_id},
//     body {"status":"queued","position":N} (N messages run before it). It
//     runs later, once, in arrival order; read its status at Location. A
//     full queue (Config QueueMax, request.DefaultQueueMax) is 429
//     queue-full with Retry-After.
//   - "interrupt": the running message is asked to stop; this one runs
//     next, and the call answers the usual 200 with its reply. The
//     interrupted message's own pending call, and every resend of its id,
//     answer 409 interrupted.
//
// "Prefer: wait=N" (RFC 7240; N seconds, capped by Config.MaxWait, 60 s by
// default) on POST …/messages: when that client request id is in flight
// or queued, the call waits up to N seconds and answers 200 with the
// stored reply ("replayed": true, the same transaction_id) — or, still
// unfinished, 409 request-in-flight or 202 as before. It then carries
// "Preference-Applied: wait=N". On GET …/messages/{client_request_id} it
// waits the same way for a final status (succeeded, failed, interrupted).
//
// GET …/messages/{client_request_id} reads a message without any lock:
// status is "queued" (with "position"), "processing", "waiting" (with
// "waiting", the question), "succeeded" (with "reply" and
// "transaction_id"), "failed", "interrupted" or "cancelled"; an unknown
// id is 404 not-found.
//
// # Approvals
//
// An expense above the threshold of approval (service Config.ApproveAbove,
// the -approve-above flag, 1,000.00 by default) is booked only once a
// person approved it: the agent asks (request.Await, the wait named
// "approve-1" for the message's first such booking) and its run ends
// there, holding nothing. The message, and every resend of it, answers
// 202 with Location and {"status": "waiting", "waiting": {"name":
// "approve-1", "question": {"text": "Book 4,800.00 to Housing?", "type":
// "expense", "amount": "4800.00", "category": "Housing", "description":
// "…"}}} ("deadline" too with -approval-within); its status says the same
// (WaitingResponse). POST …/messages/{client_request_id}/answers/{name}
// with {"approved": true} or {"approved": false} answers it
// (request.Runner.Answer): the message runs on from where it stopped, its
// model rounds replayed, and the call answers like the message would: 200
// with the reply ("Recorded expense 4800.00 (Housing)." or "Not booked:
// … was not approved.", nothing booked), or 202 waiting at a later
// question. The same answer again, from any device, gets the same outcome
// and runs nothing twice; another answer to a wait already answered, a
// name the message does not wait for (or never asked) and an answer after
// the deadline are 409s that change nothing; a body other than those two
// is 400; an unknown message 404. Past the deadline, the service runs the
// message on by itself: nothing is booked and the reply says the approval
// expired.
//
// DELETE …/messages/{client_request_id} cancels a queued, running or
// failed message (request.Runner.Cancel): a queued one never runs, a
// running one is stopped like an interrupted one (but no other message
// takes its place), a failed one is not run again by a resend. It ends
// "cancelled", a final state: the tool calls it committed stay (a
// transaction it booked is not undone), its own pending call answers 409
// cancelled, and so does every resend of its id, for ever (no
// Retry-After). The DELETE answers 200 {"client_request_id", "status":
// "cancelled"} once it is — again 200 for a message already cancelled, so
// a retried DELETE is safe; 202 {"status": "processing"} with Location
// when a running message did not stop within 10 s (the cancel still takes
// effect: read its status there); 404 not-found for an unknown id; 409
// already-final when the message had finished otherwise (succeeded or
// interrupted): a cancel never changes a finished message; and 410
// expired for a message swept by the retention. Messages finished longer ago than the retention
// (service Config.Retention, the -retention flag, 720h by default) are
// swept; a resend of such an id, or its status, is 410 expired: it never
// runs again.
//
// Every error is application/problem+json (RFC 9457) with a stable type
// URI under https://rowlease.dev/problems/, written by package httpapi,
// which also decides the status and type of rowlease's errors
// (httpapi.ProblemFor); the example adds method-not-allowed, model-failed,
// shutting-down, timeout and already-final:
//
//	400 invalid-request          bad JSON, unknown or missing fields, too long, body over 64 KiB, bad on_busy
//	404 session-not-found, not-found
//	405 method-not-allowed
//	409 session-busy             the session is answering another message
//	409 request-in-flight        this client request id is running elsewhere
//	409 interrupted              a later message interrupted this one (final; no Retry-After)
//	409 cancelled                the message was cancelled (DELETE); final, no Retry-After
//	409 already-final            DELETE of a message that had succeeded or was interrupted; nothing changed
//	409 (an answer)              another answer to a wait already answered, a name it does not wait
//	                             for, or past the deadline: httpapi's problems for request's errors
//	410 expired                  the message finished before the retention; it never runs again
//	429 queue-full               the session's queue is full; nothing stored
//	409 taken-over               this run lost its lease to another run
//	409 tool-in-flight           a tool call of this request is running elsewhere
//	422 client-request-id-reused the id was used with different content
//	500 agent-failed, internal
//	502 model-failed             the model failed; retry with the same id
//	503 shutting-down            the server is stopping; retry with the same id
//	503 unavailable              the database cannot be reached (httpapi.IsUnavailable)
//	504 timeout                  the run took longer than RunTimeout; retry resumes it
//
// Every 409 but interrupted, cancelled and already-final, the 429 and every 503 carry Retry-After in
// whole seconds, at least 1: the lease's remaining time (or 1 s), capped
// by Config.MaxRetryAfter (a live holder usually finishes long before its
// lease would expire).
//
// A message that was running when the database became unreachable gets
// 503 unavailable too. The client resends it with the same
// client_request_id after Retry-After: once the database is back it may
// get 409 request-in-flight until the failed run's lease expires (that run
// could not write its final mark), then the answer; tool calls that
// committed are reused, not run again.
//
// The agent run does not inherit the cancellation of the HTTP request
// (context.WithoutCancel): a client that disconnects mid-request does not
// abort the work, which finishes and is replayed on retry. The run is
// cancelled only by Close (server shutdown) or RunTimeout; the request
// Runner then releases its leases, so a retry takes the request over at
// once.
package api

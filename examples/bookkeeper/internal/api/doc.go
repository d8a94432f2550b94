// Package api is the bookkeeper's HTTP API (JSON over net/http, Go 1.22
// routing patterns):
//
//	POST /api/sessions                      201 {"id", "ledger_id", "created_at"}
//	GET  /api/sessions/{id}                 200 the session
//	POST /api/sessions/{id}/messages        200 {"reply", "transaction_id", "replayed", "resumed"}
//	GET  /api/sessions/{id}/messages        200 {"messages": [...]}
//	GET  /api/sessions/{id}/transactions    200 {"transactions": [...], "total_income", "total_expense"}
//	GET  /healthz                           200 {"status": "ok"}
//
// A message is {"content": "…", "client_request_id": "…"}; the client
// request id is the client's idempotency key. Sending it again — a retry,
// a second device, a replay after a lost response — never runs the agent
// twice: a finished request replays its stored reply ("replayed": true), a
// running one is 409, and the same id with other content is 422.
//
// Every error is application/problem+json (RFC 9457) with a stable type
// URI under https://rowlease.dev/problems/, written by package httpapi,
// which also decides the status and type of rowlease's errors
// (httpapi.ProblemFor); the example adds method-not-allowed, model-failed,
// shutting-down and timeout:
//
//	400 invalid-request          bad JSON, unknown or missing fields, too long, body over 64 KiB
//	404 session-not-found, not-found
//	405 method-not-allowed
//	409 session-busy             the session is answering another message
//	409 request-in-flight        this client request id is running elsewhere
//	409 taken-over               this run lost its lease to another run
//	409 tool-in-flight           a tool call of this request is running elsewhere
//	422 client-request-id-reused the id was used with different content
//	500 agent-failed, internal
//	502 model-failed             the model failed; retry with the same id
//	503 shutting-down            the server is stopping; retry with the same id
//	503 unavailable              the database cannot be reached (httpapi.IsUnavailable)
//	504 timeout                  the run took longer than RunTimeout; retry resumes it
//
// Every 409 and 503 carries Retry-After in whole seconds, at least 1: the
// lease's remaining time, capped by Config.MaxRetryAfter (a live holder
// usually finishes long before its lease would expire).
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

// Command bookkeeper is rowlease's example: a small bookkeeping agent
// service. Users chat with it ("中午吃粉花了 35", "taxi 18 yesterday", "how
// much did I spend today"); a model turns each message into tool calls that
// write to, or read from, a ledger in SQL.
//
// It shows the three-level lock that rowlease provides, on a service that
// could run for real:
//
//   - session: one conversation runs one message at a time. A second
//     message sent meanwhile (another device) gets 409 session-busy with
//     Retry-After.
//   - request: one message (session, client_request_id) runs once. The
//     same id sent again replays the stored reply; sent while running, it
//     is 409 request-in-flight; sent with other content, it is 422. When
//     the process dies mid-request, the request's lease expires and a retry
//     takes it over.
//   - tool execution: create_transaction commits the ledger row in one
//     transaction with the fences of all three leases and the tool's
//     success mark, so a taken-over request never writes a second row; the
//     ledger's UNIQUE (request_id) says so again. With -webhook, every
//     booked transaction is also posted to a URL — an effect outside the
//     database — with the tool execution's effect key as Idempotency-Key:
//     the intent is recorded before the post and the result after, and a
//     run that finds an intent without a result posts again with the same
//     key, which the receiver performs once.
//
// # Usage
//
//	go run ./examples/bookkeeper [serve] [flags]   # the HTTP service
//	go run ./examples/bookkeeper demo [flags]      # a self-checking load demo
//	go run ./examples/bookkeeper receiver [flags]  # a webhook receiver for -webhook
//	go run ./examples/bookkeeper -h                # every command and its flags
//
// serve flags:
//
//	-addr            listen address (default 127.0.0.1:8080)
//	-db              sqlite:PATH | mysql://user:pass@host:port/db | postgres://…
//	                 (default sqlite:bookkeeper.db, created on first run)
//	-llm             rule (offline, default) | openai
//	-llm-latency     delay of each rule-model round (default 1s), to make
//	                 concurrency visible
//	-llm-vary        the rule model words each answer differently every time
//	                 it is asked (default on when BOOKKEEPER_MODEL_VARY=1)
//	-llm-base-url    OpenAI-compatible API root (default https://api.openai.com/v1)
//	-llm-model       model name for -llm openai (default gpt-4o-mini); the key
//	                 is read from OPENAI_API_KEY
//	-lease-ttl       TTL of every lease (default 30s)
//	-heartbeat       renewal interval (default a third of the TTL)
//	-webhook         URL notified of every booked transaction, with
//	                 Idempotency-Key (default $BOOKKEEPER_WEBHOOK; off when empty)
//	-webhook-timeout bound of one post (default 10s); past it the outcome
//	                 is unknown and the message fails until a retry settles it
//	-shutdown-grace  how long in-flight requests may finish after SIGINT or
//	                 SIGTERM before they are abandoned (default 10s)
//	-steps           record every model round as a step, so a resumed
//	                 message replays the model's decisions (default true)
//	-resume-grace    after a dead run's lease expired, how long the service
//	                 waits for the client's resend before resuming the
//	                 message itself (default the lease TTL)
//	-intx-beside-step while each model round is asked and recorded as a
//	                 step, run a fenced transaction of the run beside it
//	                 (it journals the round in model_round) that fails
//	                 every other time: it rolls back, is logged, and the
//	                 message goes on (for tests; default off)
//	-tool-fail-every N  create_transaction fails as a tool for one message
//	                 in N (by its client request id): the call that model
//	                 round 1 decided, each time it is made; the model is
//	                 told it may retry and books in round 2 (for tests;
//	                 default 0, never)
//	-approve-above   an expense above this amount is booked only once a
//	                 person approves it: the message waits (202 waiting)
//	                 for POST …/messages/{id}/answers/{name} (default
//	                 1000.00; 0 or negative never asks)
//	-approval-within deadline of an approval; past it nothing is booked
//	                 and the reply says it expired (default 0, none)
//	-v               debug logging
//
// The demo starts the service in-process on a fresh SQLite file (or -db),
// with a webhook receiver of its own, plays many devices and sessions
// against it over HTTP, prints a table and checks against the database
// that no client request id produced more than one transaction and that
// every transaction was posted once; then a scene where a tool takes 3s
// (-slow-tool) with a lease TTL of 1s while a second device's duplicate
// gets 409 and, afterwards, the stored reply; last, an expense above
// -approve-above that waits for a person, approved by one device (and
// answered the same by another), and one denied. It exits non-zero when a
// check fails. It defaults -llm-latency to 500ms (half the server's) so it
// finishes in about 25 seconds.
//
// # Shutdown
//
// On SIGINT or SIGTERM the server stops accepting connections, lets
// in-flight requests finish for -shutdown-grace, then cancels the rest:
// rowlease releases their leases (within a bounded timeout) and they answer
// 503, so a retry with the same client_request_id — on this or another
// process — resumes them at once instead of waiting for the TTL. A process
// that is killed outright (SIGKILL, power loss) leaves its leases to expire
// after -lease-ttl; a retry then takes the request over, and the tool calls
// that committed are reused, not repeated.
//
// receiver flags: -addr (default 127.0.0.1:9090), -delay (how long it
// works on a new key before performing it), -v. It keeps what it performed
// in memory and lists it at GET /effects.
//
// The service also serves a chat page at / (http://127.0.0.1:8080/): two
// devices side by side on one session, what the locks decided for every
// try of every message, and the session's ledger with its charts
// (internal/web, embedded; no external requests).
//
// See README.md for the page and a walk-through with curl.
package main

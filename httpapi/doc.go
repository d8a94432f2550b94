// Package httpapi answers HTTP requests for rowlease's errors: the status
// for every error the library returns, an RFC 9457 problem+json writer
// with stable problem types and Retry-After, a test for "the database
// cannot be reached" (IsUnavailable), and a reader for RFC 7240's
// "Prefer: wait=N"; and the three handlers a service mounts under its own
// routes, for its message endpoint (MessageHandler), its status endpoint
// (StatusHandler) and the endpoint a person's answer to a waiting message
// is sent to (AnswerHandler).
//
//	out, err := runner.Handle(ctx, msg, agent)
//	if err != nil {
//		p := httpapi.WriteError(w, r, err) // status, headers, problem+json
//		if p.Status >= 500 {
//			log.Error("message failed", "err", err) // the response does not show it
//		}
//		return
//	}
//
// Check your application's own errors first and fall back to ProblemFor
// (or WriteError) for the rest; NewProblem builds a problem of your own
// type next to these.
//
// # Error → status → type
//
// The type URI is ProblemBase + the name, e.g.
// https://rowlease.dev/problems/session-busy. ProblemFor tries the rows
// in this order and the first that matches decides:
//
//	 #  error (errors.Is / errors.As)              status  type                      Retry-After    the client's move
//	 1  IsUnavailable(err): lease.ErrPoolExhausted  503    pool-exhausted            1 s            resend later, same id: nothing was taken over
//	    IsUnavailable(err): the rest                503    unavailable               1 s            resend later, same client request id
//	 2  lease.IsTransient(err)                      503    database-busy             1 s            resend later, same id: nothing committed
//	    (*toolexec.TransientError)
//	 3  request.ErrFingerprintMismatch              422    client-request-id-reused  –              use a new id for new content
//	 4  request.ErrExpired                          410    expired                   –              use a new id: the old one never runs again
//	 5  *request.QueueFullError                     429    queue-full                1 s            resend after Retry-After, same id
//	 6  *request.InterruptedError                   409    interrupted               –              nothing: final (a resend answers the same)
//	 7  request.ErrCancelled                        409    cancelled                 –              nothing: final (a resend answers the same)
//	 8  *session.BusyError (lease.ErrHeld)          409    session-busy              time left      resend after Retry-After, same id
//	 9  request.ErrInFlight                         409    request-in-flight         heartbeat      resend after Retry-After, or with Prefer: wait, same id: get its reply
//	10  *toolexec.BusyError (lease.ErrHeld;         409    tool-in-flight            time left      resend after Retry-After, same id
//	    also inside request.ErrAgentFailed)
//	11  request.ErrTakenOver                        409    taken-over                1 s            resend, same id: get the new run's reply
//	12  *session.NotFoundError                      404    session-not-found         –              create the session
//	    (lease.ErrNotFound)
//	13  *toolexec.UnknownOutcomeError (also         502    outcome-unknown           1 s            resend, same id: the effect is reconciled
//	    inside request.ErrAgentFailed)
//	14  *toolexec.KeyTakenError (also inside        409    effect-key-taken          –              use a new id: a resend answers the same
//	    request.ErrAgentFailed)
//	15  *toolexec.OutsideTxError (also inside       500    tool-write-outside-tx     –              none: the service's tool must be fixed
//	    request.ErrAgentFailed)
//	16  *request.NotWaitingError                    409    not-waiting               –              read the status: it waits for another name, or for none
//	    (lease.ErrState)
//	17  *request.AnsweredError (lease.ErrExists)    409    already-answered          –              nothing: the first answer stands; read the status
//	18  *request.WaitExpiredError (lease.ErrState;  409    wait-expired              –              nothing: no answer is taken now; read the status
//	    also inside request.ErrAgentFailed)
//	19  request.ErrAgentFailed (the rest)           500    agent-failed              –              resend, same id: it runs again
//	20  lease.ErrInvalid (the library's own         400    invalid-request           –              fix the input
//	    refusals, *request.UnknownAgentError,
//	    *request.MetadataTooLargeError,
//	    *toolexec.ArgumentsError)
//	21  lease.ErrHeld (*lease.ConflictError)        409    lease-held                time left      retry after Retry-After
//	22  lease.ErrLost                               409    lease-lost                1 s            retry
//	23  lease.ErrNotFound                           404    not-found                 –
//	24  lease.ErrExists                             409    already-exists            –
//	25  lease.ErrState                              409    wrong-state               –
//	    anything else, and nil                      500    internal                  –
//
// Row 1's lease.ErrPoolExhausted is a run stopped because its heartbeat
// found no free connection of the pool until the leases' trust deadline
// (it matches lease.ErrLost too, so it comes before row 11 and row 22):
// nobody took the run over, and the server's pool is too small for its
// load (README, "Sizing the pool"). A resend resumes the request.
//
// "Time left" is *lease.ConflictError.Remaining of the lease in the way,
// as the database clock measured it; 1 s (DefaultRetryAfter) when the
// error carries none. Retry-After is whole seconds, rounded up, at least 1.
//
// "Heartbeat" (InFlightRetryAfter) is the interval at which the run in
// flight renews its leases, no longer than the time left and at least
// 1 s: DefaultInFlightRetryAfter (10 s, request's default) from
// ProblemFor, the Runner's own (request.Runner.HeartbeatInterval) from
// MessageHandler. The time left on a live run's lease is about its TTL
// (30 s by default), whatever the run needs: a run that answers in 3 s
// would keep its client waiting ten times as long. Better still, the
// client resends with "Prefer: wait=N" and gets the reply as soon as it is
// stored (MessageHandler honours it, and its 409's detail says so).
//
// Why this order. A run that failed because the database went away comes
// back wrapped in request.ErrAgentFailed or request.ErrTakenOver; the
// answer that helps is "the database is down, try again", so row 1 comes
// first. *toolexec.BusyError reaches a web handler wrapped in
// ErrAgentFailed when the agent returns it: the request was marked error
// and its session freed, so a resend with the same id after Retry-After
// runs it again and finds the tool call done or free — a 409, not a 500.
// An invalid input (lease.ErrInvalid) inside ErrAgentFailed is the agent's own bug,
// not bad client input, so row 19 comes before row 20. A transient
// database error (row 2), an unknown external outcome (row 13), a taken
// effect key (row 14) or a tool that wrote outside its transaction (row
// 15) inside ErrAgentFailed says more than "the agent failed", so they
// come first. A taken effect key (*toolexec.KeyTakenError) is a call whose
// key, derived from the client request id, is the call of another request
// that still exists (rows written by hand: a call whose request is gone is
// adopted by the new request instead, see package toolexec). Nothing
// was performed, and a resend with the same id derives the same key, so it
// is a 409 without Retry-After, before row 24 (it also matches
// lease.ErrExists); the client's move is a new client request id. In
// the same way, every detail of a package matches lease's kind too (a
// busy session is lease.ErrHeld, a missing one lease.ErrNotFound), so its
// row comes before the kind's.
//
// Rows 16 to 18 are the answers to request.Runner.Answer (AnswerHandler)
// that are not the request's own outcome. Each matches one of lease's
// kinds (a wait answered otherwise is lease.ErrExists, the others
// lease.ErrState), and the kind's rows, 24 and 25, would say only "already
// exists" or "wrong state"; their own types tell the client what to do: an
// answer under the wrong name (not-waiting) is fixed by reading the
// status, which names the wait the request has open, if any; a different
// answer to a wait already answered (already-answered) changes nothing,
// the first stands; a wait whose deadline passed (wait-expired) takes no
// answer, the request runs on without one. None carries Retry-After: a
// retry answers the same. Nothing was written for any of them. They come
// before row 19 because an agent may return the *request.WaitExpiredError
// that Await gave it (the run resumed after the deadline) instead of
// turning it into a reply: the request fails with it, and every resend
// replays the expiry and fails the same way, so "wait-expired" without
// Retry-After helps where "agent failed, resend" would invite resends
// forever, as with row 14.
//
// Row 15 is a 500 without Retry-After, not row 2's 503: on SQLite a side
// effect that writes through the pool instead of its transaction
// (toolexec.Exec.Tx) finds the write lock held by that very transaction,
// and every run of it fails the same way. A 503 would have clients resend
// it forever; the fix is the service's (the error, which the handler logs,
// says "write through x.Tx"). Nothing of the tool committed and the
// request is marked error, so a resend after the fix runs it again.
//
// A message that request.Runner.Handle queued (Message.OnBusy:
// request.Queue) comes back with a nil error and Outcome.Queued: it is
// not a problem, and answering it (202 Accepted, with a Location to poll)
// is the handler's job; so is a message whose run stopped to wait for a
// person's answer (request.Await), which comes back with a nil error and
// Outcome.Waiting (202 Accepted with its question). Rows 4 to 7 are the answers of the queue,
// interrupts, cancels and retention: a resend of an id the sweeper
// expired (410), a full queue (429), a message that a later one
// interrupted, and a message its client cancelled (409, without
// Retry-After: both are final).
//
// # A database that cannot be reached
//
// IsUnavailable recognises network errors, broken connections (pgx's
// "unexpected EOF" when a server process dies mid-answer included),
// servers that are shutting down or have too many connections, a
// PostgreSQL standby where a primary was expected (a failover under way),
// Galera nodes cut off from the primary component (MySQL error 1047), and
// SQLite files that cannot be opened or are locked (the list is in its
// documentation of lease.IsUnavailable, which does the recognising);
// PostgreSQL and SQLite errors through their methods (and pgx's two
// sentinels by their text), so neither package links a driver but
// go-sql-driver/mysql (which lease links anyway).
//
// It decides by where an error came from where the library knows it: a
// network error (refused, reset, a name not resolved, an answer cut
// short) inside an external effect's unknown outcome
// (*toolexec.UnknownOutcomeError) is the remote side's, so row 13 answers
// it (502), not row 1; and one inside a tool's failure
// (*toolexec.FailedError) is the other service's that the side effect
// called — toolexec asked the side effect's transaction, which still
// worked (engine.IsUnavailableIn) — so an agent that returns it gets row
// 19 (500). Both are engine.ForeignError, which lease.IsUnavailable does
// not look below. A network error the agent returns bare, from a call of
// its own, cannot be told from the database's, and is 503 (wrap it in an
// error of your own that is a engine.ForeignError to answer otherwise).
//
// A message in flight when the database went away gets 503 too, even one
// whose COMMIT was cut (it may have committed: the resend finds out). The
// client resends it with the same client request id after Retry-After:
// once the database is back it gets 409 request-in-flight until the lease of the
// run that failed expires (that run could not write its final mark), and
// then the message resumes — tool calls that committed are reused, never
// run again. Ping marks a failed or timed-out health check as unavailable.
//
// # Prefer: wait
//
// PreferWait reads "Prefer: wait=N" (RFC 7240) as a duration capped by the
// caller's limit; SetPreferenceApplied echoes "Preference-Applied:
// wait=N" for a handler that honoured it (for example one that waits up to
// that long for a running request's reply instead of answering 409 at
// once).
//
// # Handlers
//
// MessageHandler runs a message that cfg.Message reads from the request
// (session key, client request id, content, OnBusy: from the path, a
// header or the body, as the service chooses; JSONMessage reads a JSON
// body) with the service's agent, and answers:
//
//	200  the answer (cfg.WriteAnswer; by default the request.Outcome as JSON),
//	     also a replay (Replayed)
//	202  queued: Location (cfg.Location) and {"status":"queued","position":N}
//	     (cfg.WriteQueued)
//	202  waiting for a person's answer (request.Await), also a resend of
//	     such a message: Location and a WaitingBody (cfg.WriteWaiting),
//	     {"status":"waiting","waiting":{"name":…,"question":…,"deadline":…}}
//	     (deadline in UTC, left out when the wait has none)
//	4xx/5xx  the error (cfg.Fail; by default the table above, under
//	     Problems.Base, Retry-After capped by Problems.MaxRetryAfter)
//
// With "Prefer: wait=N" (capped by MaxWait), a message in flight (409) or
// queued (202) is waited for with request.Runner.Wait for up to N seconds:
// then its stored outcome is answered (200 replayed, or its problem; 202
// waiting as soon as its run stops to wait for an answer), or, still
// unfinished, what it answers now; the response carries
// "Preference-Applied: wait=N". A waiting message is an answer already:
// it is not waited for.
//
// StatusHandler answers request.Runner.Status of the message that
// cfg.Keys names (PathKeys reads path wildcards): 200 with its state
// (cfg.WriteStatus; by default a StatusBody, with a "waiting" member, the
// question, for a waiting message only), 404 unknown, 410 expired;
// "Prefer: wait=N" waits for a final state or a wait for an answer.
//
// AnswerHandler sends a person's answer to the wait that cfg.Keys names
// (session key, client request id and the wait's name; PathAnswerKeys
// reads path wildcards) with request.Runner.Answer, which records it and
// runs the request on. It takes POST only (405 with "Allow: POST"
// otherwise), and the body is the answer: one JSON value, at most
// cfg.MaxBytes (DefaultMaxAnswerBytes, 64 KiB); anything else is a 400
// invalid-request and nothing is recorded. The route the examples use:
//
//	POST /sessions/{session}/messages/{id}/answers/{name}
//
//	200  the request's outcome (cfg.WriteAnswer; by default the
//	     request.Outcome as JSON); the same answer sent again (the same
//	     JSON value) gets the same outcome and runs nothing twice
//	202  the run stopped at a later wait: Location and a WaitingBody
//	     (cfg.WriteWaiting)
//	404  not-found: no such message
//	409  not-waiting (the request waits for another name, or for none),
//	     already-answered (another answer came first, and stands),
//	     wait-expired (past the wait's deadline): nothing was written
//	409  session-busy, Retry-After: the answer is recorded, but the
//	     session answers another message; the request runs when it is
//	     free (a Started Runner), or when the same answer is sent again
//	4xx/5xx  the run's own outcome, as MessageHandler answers it
//
// The default Fail adds RFC 9457 extension members where they help the
// client: request_id (the request's id, when known: quote it to the
// operator), interrupted_by (the client request id of the message that
// interrupted this one), queue_max (with a 429). A service that keeps a
// contract of its own supplies Fail and the Write… funcs (WriteAnswer,
// WriteQueued, WriteWaiting, WriteStatus), as examples/bookkeeper does.
//
// The handlers run the message under cfg.RunContext, by default
// context.WithoutCancel of the request's: a client that goes away does not
// stop its message's run; a resend with the same client request id gets
// its reply. They never write after a Write… func has started writing:
// such a func returns an error only before it writes.
//
// # Guarantees
//
//   - Every status and type above is stable: a client may switch on the
//     type; names are not changed or reused, new ones may be added.
//   - Every 409 that a retry can resolve (session-busy, request-in-flight,
//     tool-in-flight, taken-over, lease-held, lease-lost), every 503 and
//     the 429 carry RetryAfter, which Write sends as Retry-After. The 409
//     interrupted, the 409 cancelled, the 409 effect-key-taken, the 409s
//     not-waiting, already-answered and wait-expired, and the 410 expired
//     do not: a retry answers the same.
//   - A problem's detail never carries a driver's error text or a lease
//     token. The one error text shown is that of lease.ErrInvalid, for a
//     400, and it never contains a token.
//
// # What it does not do
//
// It does not log or route, and caps no Retry-After but a request in
// flight's (at the heartbeat interval, above): a live holder usually
// finishes long before its lease would expire; lower p.RetryAfter if you
// know better. It knows only rowlease's errors and the drivers' ways of
// saying "unreachable".
//
// # Failure handling
//
// ProblemFor does not fail: an error it does not know is 500 internal,
// with a detail that says nothing about it (log the error yourself).
// IsUnavailable errs on the side of "no": a way of failing it does not
// know gives 500, not 503; a bare context.Canceled or DeadlineExceeded is
// the caller's own deadline and not unavailability. Write ignores the
// error of writing the body (the client has gone); it sets headers, so
// call it before anything else is written.
package httpapi

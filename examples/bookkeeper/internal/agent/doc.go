// Package agent is the bookkeeper's agent: the model rounds of one user
// message and the three tools it may call, all run under rowlease's
// three-level lock.
//
// Agent.Handle is a request.Agent. For one message it
//
//  1. returns the stored reply at once if a previous run of the same
//     request already wrote it (that run crashed between writing the reply
//     and marking the request done);
//  2. appends the user message to the conversation, in a transaction fenced
//     by the session and request leases (Run.Fences), deduplicated by
//     (session, client request id, role);
//  3. calls the model at most MaxRounds (3) times, each round a step
//     (request.Step, named "model-round-N"): the model's answer is recorded
//     on the request, fenced by its lease, before any tool call it asks
//     for runs. The conversation holds the system prompt, the session's
//     recent messages and the user message. A run that takes over a
//     crashed, failed or abandoned one — a resend, or the service resuming
//     it on its own — gets the recorded answers back without asking the
//     model, so it makes the same tool calls, whose stored results are
//     reused: a model that would answer otherwise when asked again (a new
//     note, the category named otherwise) is not asked again. Only the
//     round that was not recorded before the crash is asked again (steps
//     at-least-once, effects exactly-once). With Config.NoSteps, instead,
//     the model is asked again and shown the tool calls that already
//     committed (Run.Prior), which makes a different call less likely,
//     never impossible;
//  4. runs every tool call through Run.CallTool (toolexec): a side effect
//     commits in the tool's own transaction (Exec.Tx) together with the
//     fences and the tool's success mark, and a repeated call returns the
//     stored result instead of running again. A tool's own failure
//     (*toolexec.FailedError), an unknown tool or invalid arguments go back
//     to the model as a tool result {"error": "..."} — with
//     "retryable": true when the failure is not a refusal of the
//     arguments, so the model may make the call again; only lease loss,
//     cancellation and database failures end the run;
//  5. when a webhook is configured and the request booked a transaction,
//     notifies it (ToolNotify, below);
//  6. appends the reply, fenced like the user message, and answers with
//     Result {"transaction_id": id or null}, read from the ledger.
//
// # Approvals
//
// With Config.ApproveAbove, a create_transaction call that would book an
// expense above it waits for a person first: the agent asks
// (request.Await, the wait named ApprovalName(n) — "approve-1" for the
// request's first such booking — with an ApprovalQuestion: "Book 4,800.00
// to Housing?", the amount, the category, the description), and the run
// ends there as waiting, holding no lease. Runner.Answer with an Approval
// runs the request on: the model rounds are replayed, the Await returns
// the answer, and the call is made ({"approved": true}) or not
// ({"approved": false}: the model gets a result marked
// llm.NotApprovedField and says that nothing was booked). A wait past its
// deadline (Config.ApprovalWithin) is told the same way, as expired. A
// call made again for the same booking in the same run (after a
// retryable failure) is not asked about again, and the answer of a
// continued run does not count as "resumed".
//
// # Determinism between steps
//
// A replay is only the same run if the agent's code between two rounds
// does the same thing given the same recorded answers. Handle keeps to
// that: the calls of a round run in the order the model gave them, the
// ids given to calls without one depend only on the round and the
// position, the tools' results come from toolexec (the stored result of
// a committed call, whichever run made it), and nothing between rounds
// reads the clock, a random number or the ledger to decide what to ask.
// What may differ — the history, the prompt's date — only feeds a model
// call, which a replay does not make. A replay that asks for another step
// than recorded (code changed in between) fails with
// *request.StepDivergedError instead of reusing an answer for the wrong
// question.
//
// # Tools
//
//   - create_transaction (type and amount required; category_name, note,
//     occur_date optional) inserts one ledger_transaction row. At most one
//     per request: the tool refuses a second, and UNIQUE (request_id)
//     refuses it again in the database.
//   - list_categories and list_transactions only read, inside the same
//     fenced transaction.
//   - notify_webhook (ToolNotify) is external (toolexec.RegisterExternal)
//     and called by the agent, never by the model: it posts the booked
//     transaction (webhook.Notification, built from the ledger row, so
//     every run of the request makes the same call) to Config.Webhook with
//     the tool execution's effect key as Idempotency-Key. The intent is
//     recorded before the post and the result after, each fenced. It is
//     registered with Repeat: a run that finds the notification announced
//     without a result (an earlier run crashed, or did not hear the
//     answer) posts it again with the same key, which is safe because the
//     receiver performs a key once and answers it again with its first
//     answer. A receiver that does not honour keys would need a Reconcile
//     instead.
//
// # Failure handling of the notification
//
//   - performed (2xx): the reply gets a line with the receiver's receipt.
//   - refused (4xx but 409): recorded as the tool's failure; the reply says
//     so, and the request is answered: the transaction stands.
//   - unknown (timeout, connection lost, 5xx, 409 — the key still in
//     progress): the run fails with a *toolexec.UnknownOutcomeError, so the
//     request is marked error (HTTP 502 outcome-unknown) instead of being
//     answered as a success that hides it. The client's retry with the
//     same client request id takes the request over, finds the
//     notification announced, and posts it again with the same key.
//   - the run losing its lease mid-post cancels the post (unknown, as
//     above); whoever owns the request next posts it again.
package agent

// Package toolexec is the third of rowlease's lock levels: a tool call's
// side effect commits at most once, however often the call is retried,
// replayed, or taken over after a crash.
//
// A tool execution is keyed by the request, the tool name and the SHA-256
// (hex) of its arguments in RFC 8785 canonical JSON (Canonicalize): nested
// keys sorted, numbers in canonical form, so {"amount":35} and
// {"amount":3.5e1} are one call. The row carries a lease (package lease) and
// a status.
//
// # States
//
//	          INSERT (held by the caller)
//	(none) ──────────────────────────────▶ processing ── side effect + mark, one tx ──▶ success
//	                                        │   ▲   ▲                                   (result stored;
//	                   tool failed (tx      │   │   │ lease expired: taken over          replayed, never
//	                   rolled back)         ▼   │   └───────────────                     re-run)
//	                                      error ┘ retried
//
// Run takes the four branches: success → the stored result, nothing re-run;
// error → retried; processing and expired → taken over; processing and
// live → ErrConflict.
//
// # Guarantees
//
//   - The side effect runs in a transaction that first checks every fence
//     (the session's and the request's grants, row-locked on MySQL and
//     PostgreSQL) and finally marks the call success with its result,
//     checked against the tool's own token. The side effect's writes commit
//     if and only if the current owner marks it done.
//   - Exec.Generation is the tool execution's fencing generation, for side
//     effects that leave the database.
//   - Invalid arguments (not JSON, not an object, duplicate keys, lone
//     surrogates) give ErrInvalidArguments and write nothing. An unknown
//     tool gives ErrUnknownTool, never a success.
//
// # What it does not do
//
// A stored success is returned without checking the fences: reading it
// writes nothing, so a flow that lost its locks may still see it.
//
// On SQLite a side effect's transaction holds the database write lock, so a
// second flow running the same call waits (busy timeout) instead of getting
// ErrConflict at once.
//
// A side effect outside the database is fenced only if that system checks
// the generation. A tool that is not idempotent outside its transaction
// can still be repeated by a run that lost its lease before it noticed.
//
// # Failure handling
//
//   - *FailedError (ErrToolFailed): the tool itself failed; its transaction
//     rolled back, the call is marked error, and the text is for the model.
//   - lease.ErrLost: a fence failed; nothing committed, and the call is left
//     processing and free for the flow that now owns the request.
//   - ErrConflict: another live flow is running the same call.
//   - A commit error means the outcome is unknown; a retry of the same call
//     finds either the success or a call to take over.
package toolexec

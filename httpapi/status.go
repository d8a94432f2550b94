package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// DefaultRetryAfter is the Retry-After of a 409 whose error does not say
// how long the lease in the way has left, and of a 503.
const DefaultRetryAfter = time.Second

// DefaultInFlightRetryAfter bounds the Retry-After of a 409
// request-in-flight from ProblemFor: request.Runner's default heartbeat
// interval (TTL 30 s / 3). The run in flight answers when it is done,
// usually long before its lease would expire, so the time left on that
// lease (TTL, renewed every interval) is a worst case, not when an answer
// is likely. MessageHandler uses its Runner's own interval
// (request.Runner.HeartbeatInterval).
const DefaultInFlightRetryAfter = 10 * time.Second

// StatusCode is the HTTP status code for err: ProblemFor(err).Status.
func StatusCode(err error) int { return ProblemFor(err).Status }

// ProblemFor returns the problem to answer for an error returned by
// rowlease (lease, session, toolexec, request, or a driver through them):
// its status, stable type, title, a detail that is safe to show, and for
// every 409 that a retry can resolve and every 503 a RetryAfter — the
// time left on the lease in the way (*lease.ConflictError.Remaining),
// else DefaultRetryAfter; for a request in flight, that time left at most
// DefaultInFlightRetryAfter (InFlightRetryAfter). It does not cap the
// others: a live holder usually finishes long before its lease expires,
// so a caller may lower it (p.RetryAfter = min(p.RetryAfter, limit)).
//
// The checks run in the order of the table in the package documentation;
// the first that matches decides. Errors it does not know, and nil, are
// 500 internal, whose detail says nothing about the error.
func ProblemFor(err error) Problem {
	var ve *engine.ValidationError
	switch {
	case err == nil:
		// No problem to report: a caller that writes one has a bug.
	case errors.Is(err, lease.ErrPoolExhausted):
		return Problem{Type: ProblemBase + TypePoolExhausted, Title: "Pool exhausted", Status: http.StatusServiceUnavailable,
			Detail:     "the server had no free database connection to keep this message's locks alive, and stopped it; nobody else took it over: resend with the same client request id after Retry-After seconds",
			RetryAfter: DefaultRetryAfter}
	case IsUnavailable(err):
		return Problem{Type: ProblemBase + TypeUnavailable, Title: "Unavailable", Status: http.StatusServiceUnavailable,
			Detail:     "the database cannot be reached; retry after Retry-After seconds (a message resent with the same client request id is never run twice)",
			RetryAfter: DefaultRetryAfter}
	case lease.IsTransient(err), errors.Is(err, toolexec.ErrTransient):
		return Problem{Type: ProblemBase + TypeDatabaseBusy, Title: "Database busy", Status: http.StatusServiceUnavailable,
			Detail:     "the database kept refusing a transaction (deadlock, serialization failure, lock timeout, busy) and nothing of it committed; resend with the same client request id",
			RetryAfter: DefaultRetryAfter}
	case errors.Is(err, request.ErrFingerprintMismatch):
		return Problem{Type: ProblemBase + TypeClientRequestIDReused, Title: "Client request id reused", Status: http.StatusUnprocessableEntity,
			Detail: "this client request id was already used in this session with different content; use a new id for a new message"}
	case errors.Is(err, request.ErrExpired):
		return Problem{Type: ProblemBase + TypeExpired, Title: "Expired", Status: http.StatusGone,
			Detail: "this client request id was answered longer ago than the server keeps answers; it is never run again: use a new id for a new message"}
	case errors.Is(err, request.ErrQueueFull):
		return Problem{Type: ProblemBase + TypeQueueFull, Title: "Queue full", Status: http.StatusTooManyRequests,
			Detail:     "the session already has as many messages queued as it takes; nothing was stored: retry after Retry-After seconds",
			RetryAfter: DefaultRetryAfter}
	case errors.Is(err, request.ErrInterrupted):
		return Problem{Type: ProblemBase + TypeInterrupted, Title: "Interrupted", Status: http.StatusConflict,
			Detail: "a later message of the session interrupted this one; the tool calls it had committed stay, and it is never run again"}
	case errors.Is(err, request.ErrCancelled):
		return Problem{Type: ProblemBase + TypeCancelled, Title: "Cancelled", Status: http.StatusConflict,
			Detail: "this message was cancelled; the tool calls it had committed stay, and it is never run again"}
	case errors.Is(err, request.ErrSessionBusy), errors.Is(err, session.ErrBusy):
		return conflict(err, TypeSessionBusy, "Session busy",
			"the session is answering another message; retry with the same client request id after Retry-After seconds")
	case errors.Is(err, request.ErrInFlight):
		p := conflict(err, TypeRequestInFlight, "Request in flight",
			"this client request id is being answered right now (another device or an earlier try); retry after Retry-After seconds to get its reply")
		p.RetryAfter = InFlightRetryAfter(err, DefaultInFlightRetryAfter)
		return p
	case errors.Is(err, toolexec.ErrConflict):
		return conflict(err, TypeToolInFlight, "Tool call in flight",
			"a tool call of this message is still running elsewhere; retry with the same client request id after Retry-After seconds")
	case errors.Is(err, request.ErrTakenOver):
		return lost(TypeTakenOver, "Taken over",
			"this run lost its lease to another run of the same message; retry with the same client request id to get its reply")
	case errors.Is(err, session.ErrNotFound):
		return Problem{Type: ProblemBase + TypeSessionNotFound, Title: "Session not found", Status: http.StatusNotFound,
			Detail: "no session has this id"}
	case errors.Is(err, toolexec.ErrUnknownOutcome):
		return Problem{Type: ProblemBase + TypeOutcomeUnknown, Title: "Outcome unknown", Status: http.StatusBadGateway,
			Detail:     "an effect outside the database may or may not have happened; resend with the same client request id to reconcile it (it is never performed under a new key)",
			RetryAfter: DefaultRetryAfter}
	case errors.Is(err, toolexec.ErrKeyTaken):
		return Problem{Type: ProblemBase + TypeEffectKeyTaken, Title: "Effect key taken", Status: http.StatusConflict,
			Detail: "a tool call of this message has the effect key of a call that an earlier message with this client request id made, whose record is gone; nothing was performed: use a new client request id for a new message"}
	case errors.Is(err, toolexec.ErrWriteOutsideTx):
		return Problem{Type: ProblemBase + TypeToolWriteOutsideTx, Title: "Tool wrote outside its transaction", Status: http.StatusInternalServerError,
			Detail: "a tool of this service wrote outside its transaction, which the database refused; nothing of it committed. It is the service's bug: a resend fails the same way until the tool is fixed"}
	case errors.Is(err, request.ErrAgentFailed):
		return Problem{Type: ProblemBase + TypeAgentFailed, Title: "Agent failed", Status: http.StatusInternalServerError,
			Detail: "the agent failed; retry with the same client request id"}
	case errors.Is(err, request.ErrMetadataTooLarge):
		return Problem{Type: ProblemBase + TypeInvalidRequest, Title: "Invalid request", Status: http.StatusBadRequest,
			Detail: "the message's metadata is larger than the service takes"}
	case errors.Is(err, request.ErrUnknownAgent):
		return Problem{Type: ProblemBase + TypeInvalidRequest, Title: "Invalid request", Status: http.StatusBadRequest,
			Detail: "the message names an agent that this service does not have"}
	case errors.As(err, &ve):
		return Problem{Type: ProblemBase + TypeInvalidRequest, Title: "Invalid request", Status: http.StatusBadRequest,
			Detail: ve.Error()}
	case errors.Is(err, lease.ErrInvalid):
		return Problem{Type: ProblemBase + TypeInvalidRequest, Title: "Invalid request", Status: http.StatusBadRequest,
			Detail: "the input was rejected"}
	case errors.Is(err, toolexec.ErrInvalidArguments):
		return Problem{Type: ProblemBase + TypeInvalidRequest, Title: "Invalid request", Status: http.StatusBadRequest,
			Detail: "the tool arguments are not a valid JSON object, or hold an integer that a double does not hold exactly (send such a number as a string)"}
	case errors.Is(err, lease.ErrHeld):
		return conflict(err, TypeLeaseHeld, "Lease held",
			"another holder holds this lease; retry after Retry-After seconds")
	case errors.Is(err, lease.ErrLost):
		return lost(TypeLeaseLost, "Lease lost",
			"the lease was lost to another holder before the work was done; retry")
	case errors.Is(err, lease.ErrNotFound):
		return Problem{Type: ProblemBase + TypeNotFound, Title: "Not found", Status: http.StatusNotFound,
			Detail: "nothing has this key"}
	case errors.Is(err, lease.ErrExists):
		return Problem{Type: ProblemBase + TypeAlreadyExists, Title: "Already exists", Status: http.StatusConflict,
			Detail: "a row with this key already exists"}
	case errors.Is(err, lease.ErrState):
		return Problem{Type: ProblemBase + TypeWrongState, Title: "Wrong state", Status: http.StatusConflict,
			Detail: "the row is in a state that does not allow this"}
	}
	return Problem{Type: ProblemBase + TypeInternal, Title: "Internal error", Status: http.StatusInternalServerError,
		Detail: "an unexpected error occurred"}
}

// conflict is a 409 with the Retry-After of err.
func conflict(err error, name, title, detail string) Problem {
	return Problem{Type: ProblemBase + name, Title: title, Status: http.StatusConflict, Detail: detail,
		RetryAfter: retryAfter(err)}
}

// lost is a 409 for a lease lost to someone else: retry at once.
func lost(name, title, detail string) Problem {
	return Problem{Type: ProblemBase + name, Title: title, Status: http.StatusConflict, Detail: detail,
		RetryAfter: DefaultRetryAfter}
}

// InFlightRetryAfter is the Retry-After of a 409 request-in-flight (err
// matches request.ErrInFlight) for a run whose leases are renewed every
// interval: interval, but no longer than the time left on the lease in
// the way (once it expires, a resend takes the run over) and at least
// DefaultRetryAfter. Without a time left in err, DefaultRetryAfter.
func InFlightRetryAfter(err error, interval time.Duration) time.Duration {
	left := retryAfter(err)
	return max(min(interval, left), DefaultRetryAfter)
}

// retryAfter is the time left on the lease in the way, when err carries
// a *lease.ConflictError with some left, else DefaultRetryAfter.
func retryAfter(err error) time.Duration {
	var ce *lease.ConflictError
	if errors.As(err, &ce) && ce.Remaining > 0 {
		return ce.Remaining
	}
	return DefaultRetryAfter
}

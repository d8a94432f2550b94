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
// The rows of the table in the package documentation are tried in order;
// the first that matches decides. Errors it does not know, and nil, are
// 500 internal, whose detail says nothing about the error.
func ProblemFor(err error) Problem {
	if err != nil {
		for _, row := range problems {
			if row.match(err) {
				return row.problem(err)
			}
		}
	}
	return unknown.problem(err)
}

// retryRule says what Retry-After a row's problem carries.
type retryRule int

const (
	retryNone     retryRule = iota
	retryDefault            // DefaultRetryAfter
	retryLeft               // the time left on the lease in the way (retryAfter)
	retryInFlight           // InFlightRetryAfter with DefaultInFlightRetryAfter
)

// row is one row of the table: the errors it matches and their problem.
type row struct {
	match  func(error) bool
	status int
	name   string // the Type… name
	title  string
	detail string
	// shown, when set, gives the detail from the error instead: the one
	// error text a problem shows (a *engine.ValidationError's).
	shown func(error) string
	retry retryRule
}

func (r row) problem(err error) Problem {
	p := Problem{Type: ProblemBase + r.name, Title: r.title, Status: r.status, Detail: r.detail}
	if r.shown != nil {
		p.Detail = r.shown(err)
	}
	switch r.retry {
	case retryDefault:
		p.RetryAfter = DefaultRetryAfter
	case retryLeft:
		p.RetryAfter = retryAfter(err)
	case retryInFlight:
		p.RetryAfter = InFlightRetryAfter(err, DefaultInFlightRetryAfter)
	}
	return p
}

// is matches an error of the kind (or sentinel) target.
func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// as matches an error with the detail type T.
func as[T error]() func(error) bool {
	return func(err error) bool {
		var t T
		return errors.As(err, &t)
	}
}

// validationText is the text of the *engine.ValidationError in err.
func validationText(err error) string {
	var ve *engine.ValidationError
	errors.As(err, &ve)
	return ve.Error()
}

// problems is the table of the package documentation, in its order: the
// first row that matches an error decides. The order matters where an
// error matches two rows (a run stopped for want of a connection is also
// a lost lease; an agent's failure may carry a busy tool call or a wait's
// expiry; a session's or a wait's detail also matches lease's kind).
var problems = []row{
	{match: is(lease.ErrPoolExhausted), status: http.StatusServiceUnavailable, name: TypePoolExhausted, title: "Pool exhausted", retry: retryDefault,
		detail: "the server had no free database connection to keep this message's locks alive, and stopped it; nobody else took it over: resend with the same client request id after Retry-After seconds"},
	{match: IsUnavailable, status: http.StatusServiceUnavailable, name: TypeUnavailable, title: "Unavailable", retry: retryDefault,
		detail: "the database cannot be reached; retry after Retry-After seconds (a message resent with the same client request id is never run twice)"},
	{match: func(err error) bool { return lease.IsTransient(err) || as[*toolexec.TransientError]()(err) },
		status: http.StatusServiceUnavailable, name: TypeDatabaseBusy, title: "Database busy", retry: retryDefault,
		detail: "the database kept refusing a transaction (deadlock, serialization failure, lock timeout, busy) and nothing of it committed; resend with the same client request id"},
	{match: is(request.ErrFingerprintMismatch), status: http.StatusUnprocessableEntity, name: TypeClientRequestIDReused, title: "Client request id reused",
		detail: "this client request id was already used in this session with different content; use a new id for a new message"},
	{match: is(request.ErrExpired), status: http.StatusGone, name: TypeExpired, title: "Expired",
		detail: "this client request id was answered longer ago than the server keeps answers; it is never run again: use a new id for a new message"},
	{match: as[*request.QueueFullError](), status: http.StatusTooManyRequests, name: TypeQueueFull, title: "Queue full", retry: retryDefault,
		detail: "the session already has as many messages queued as it takes; nothing was stored: retry after Retry-After seconds"},
	{match: as[*request.InterruptedError](), status: http.StatusConflict, name: TypeInterrupted, title: "Interrupted",
		detail: "a later message of the session interrupted this one; the tool calls it had committed stay, and it is never run again"},
	{match: is(request.ErrCancelled), status: http.StatusConflict, name: TypeCancelled, title: "Cancelled",
		detail: "this message was cancelled; the tool calls it had committed stay, and it is never run again"},
	{match: as[*session.BusyError](), status: http.StatusConflict, name: TypeSessionBusy, title: "Session busy", retry: retryLeft,
		detail: "the session is answering another message; retry with the same client request id after Retry-After seconds"},
	{match: is(request.ErrInFlight), status: http.StatusConflict, name: TypeRequestInFlight, title: "Request in flight", retry: retryInFlight,
		detail: "this client request id is being answered right now (another device or an earlier try); retry after Retry-After seconds to get its reply"},
	{match: as[*toolexec.BusyError](), status: http.StatusConflict, name: TypeToolInFlight, title: "Tool call in flight", retry: retryLeft,
		detail: "a tool call of this message is still running elsewhere; retry with the same client request id after Retry-After seconds"},
	{match: is(request.ErrTakenOver), status: http.StatusConflict, name: TypeTakenOver, title: "Taken over", retry: retryDefault,
		detail: "this run lost its lease to another run of the same message; retry with the same client request id to get its reply"},
	{match: as[*session.NotFoundError](), status: http.StatusNotFound, name: TypeSessionNotFound, title: "Session not found",
		detail: "no session has this id"},
	{match: as[*toolexec.UnknownOutcomeError](), status: http.StatusBadGateway, name: TypeOutcomeUnknown, title: "Outcome unknown", retry: retryDefault,
		detail: "an effect outside the database may or may not have happened; resend with the same client request id to reconcile it (it is never performed under a new key)"},
	{match: as[*toolexec.KeyTakenError](), status: http.StatusConflict, name: TypeEffectKeyTaken, title: "Effect key taken",
		detail: "a tool call of this message has the effect key of a call that an earlier message with this client request id made, whose record is gone; nothing was performed: use a new client request id for a new message"},
	{match: as[*toolexec.OutsideTxError](), status: http.StatusInternalServerError, name: TypeToolWriteOutsideTx, title: "Tool wrote outside its transaction",
		detail: "a tool of this service wrote outside its transaction, which the database refused; nothing of it committed. It is the service's bug: a resend fails the same way until the tool is fixed"},
	{match: as[*request.NotWaitingError](), status: http.StatusConflict, name: TypeNotWaiting, title: "Not waiting",
		detail: "this message does not wait for an answer under this name; read its status: it waits for another name, or for none"},
	{match: as[*request.AnsweredError](), status: http.StatusConflict, name: TypeAlreadyAnswered, title: "Already answered",
		detail: "this wait was already answered with another answer; the first answer stands: read the message's status"},
	{match: as[*request.WaitExpiredError](), status: http.StatusConflict, name: TypeWaitExpired, title: "Wait expired",
		detail: "this wait passed its deadline before it was answered and takes no answer now; the message runs on without one: read its status"},
	{match: is(request.ErrAgentFailed), status: http.StatusInternalServerError, name: TypeAgentFailed, title: "Agent failed",
		detail: "the agent failed; retry with the same client request id"},
	{match: as[*request.MetadataTooLargeError](), status: http.StatusBadRequest, name: TypeInvalidRequest, title: "Invalid request",
		detail: "the message's metadata is larger than the service takes"},
	{match: as[*request.UnknownAgentError](), status: http.StatusBadRequest, name: TypeInvalidRequest, title: "Invalid request",
		detail: "the message names an agent that this service does not have"},
	{match: as[*toolexec.ArgumentsError](), status: http.StatusBadRequest, name: TypeInvalidRequest, title: "Invalid request",
		detail: "the tool arguments are not a valid JSON object, or hold an integer that a double does not hold exactly (send such a number as a string)"},
	{match: as[*engine.ValidationError](), status: http.StatusBadRequest, name: TypeInvalidRequest, title: "Invalid request", shown: validationText},
	{match: is(lease.ErrInvalid), status: http.StatusBadRequest, name: TypeInvalidRequest, title: "Invalid request",
		detail: "the input was rejected"},
	{match: is(lease.ErrHeld), status: http.StatusConflict, name: TypeLeaseHeld, title: "Lease held", retry: retryLeft,
		detail: "another holder holds this lease; retry after Retry-After seconds"},
	{match: is(lease.ErrLost), status: http.StatusConflict, name: TypeLeaseLost, title: "Lease lost", retry: retryDefault,
		detail: "the lease was lost to another holder before the work was done; retry"},
	{match: is(lease.ErrNotFound), status: http.StatusNotFound, name: TypeNotFound, title: "Not found",
		detail: "nothing has this key"},
	{match: is(lease.ErrExists), status: http.StatusConflict, name: TypeAlreadyExists, title: "Already exists",
		detail: "a row with this key already exists"},
	{match: is(lease.ErrState), status: http.StatusConflict, name: TypeWrongState, title: "Wrong state",
		detail: "the row is in a state that does not allow this"},
}

// unknown is the answer to any other error, and to nil (a caller that
// writes a problem for nil has a bug).
var unknown = row{status: http.StatusInternalServerError, name: TypeInternal, title: "Internal error",
	detail: "an unexpected error occurred"}

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

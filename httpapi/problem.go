package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// ProblemBase is the prefix of every problem type URI: a problem's type
// is ProblemBase + one of the Type… names.
const ProblemBase = "https://rowlease.dev/problems/"

// ContentType is the media type of a problem response (RFC 9457).
const ContentType = "application/problem+json"

// Problem type names (the last segment of the type URI). They are stable:
// a client may switch on them. The table in the package documentation says
// which error gives which.
const (
	TypeInvalidRequest        = "invalid-request"          // 400
	TypeSessionNotFound       = "session-not-found"        // 404
	TypeNotFound              = "not-found"                // 404
	TypeSessionBusy           = "session-busy"             // 409, Retry-After
	TypeRequestInFlight       = "request-in-flight"        // 409, Retry-After
	TypeToolInFlight          = "tool-in-flight"           // 409, Retry-After
	TypeTakenOver             = "taken-over"               // 409, Retry-After
	TypeLeaseHeld             = "lease-held"               // 409, Retry-After
	TypeLeaseLost             = "lease-lost"               // 409, Retry-After
	TypeAlreadyExists         = "already-exists"           // 409
	TypeWrongState            = "wrong-state"              // 409
	TypeEffectKeyTaken        = "effect-key-taken"         // 409
	TypeClientRequestIDReused = "client-request-id-reused" // 422
	TypeExpired               = "expired"                  // 410
	TypeQueueFull             = "queue-full"               // 429, Retry-After
	TypeInterrupted           = "interrupted"              // 409
	TypeCancelled             = "cancelled"                // 409
	TypeNotWaiting            = "not-waiting"              // 409
	TypeAlreadyAnswered       = "already-answered"         // 409
	TypeWaitExpired           = "wait-expired"             // 409
	TypeOutcomeUnknown        = "outcome-unknown"          // 502, Retry-After
	TypeDatabaseBusy          = "database-busy"            // 503, Retry-After
	TypeAgentFailed           = "agent-failed"             // 500
	TypeToolWriteOutsideTx    = "tool-write-outside-tx"    // 500
	TypeInternal              = "internal"                 // 500
	TypeUnavailable           = "unavailable"              // 503, Retry-After
	TypePoolExhausted         = "pool-exhausted"           // 503, Retry-After
)

// Problem is an RFC 9457 problem details object. Type, Title, Status,
// Detail and Instance are its JSON members; RetryAfter is sent as a
// header, not in the body.
type Problem struct {
	// Type is a URI: ProblemBase + a Type… name for the problems of this
	// package. Empty is sent as "about:blank".
	Type string `json:"type"`
	// Title is a short summary of the type; it does not change from
	// occurrence to occurrence. Empty is sent as the status text.
	Title string `json:"title"`
	// Status is the HTTP status code; 0 is sent as 500.
	Status int `json:"status"`
	// Detail explains this occurrence to a human. It never carries a
	// driver's error text or a lease token.
	Detail string `json:"detail,omitempty"`
	// Instance identifies this occurrence; Write fills in the request's
	// path when it is empty.
	Instance string `json:"instance,omitempty"`
	// RetryAfter, when positive, is sent as the Retry-After header in
	// whole seconds, rounded up (see RetryAfterSeconds).
	RetryAfter time.Duration `json:"-"`
	// Extensions are RFC 9457 extension members, sent after the members
	// above, in key order (a key that names one of them is dropped). The
	// handlers of this package add request_id (the request's id, when
	// known: quote it to the operator), interrupted_by (the client
	// request id of the message that interrupted this one) and queue_max
	// (the session's queue limit, with a 429). Decoding leaves them out.
	Extensions map[string]any `json:"-"`
}

// problemMembers are the members of Problem's JSON object.
type problemMembers Problem

// MarshalJSON encodes p with its extension members.
func (p Problem) MarshalJSON() ([]byte, error) {
	base, err := json.Marshal(problemMembers(p))
	if err != nil || len(p.Extensions) == 0 {
		return base, err
	}
	keys := make([]string, 0, len(p.Extensions))
	for k := range p.Extensions {
		switch k {
		case "type", "title", "status", "detail", "instance":
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := bytes.NewBuffer(base[:len(base)-1]) // without the closing brace
	for _, k := range keys {
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(p.Extensions[k])
		if err != nil {
			return nil, fmt.Errorf("httpapi: problem extension %q: %w", k, err)
		}
		out.WriteByte(',')
		out.Write(kb)
		out.WriteByte(':')
		out.Write(vb)
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// NewProblem returns a problem of type ProblemBase + name, for an
// application's own problem types that sit next to this package's.
func NewProblem(status int, name, title, detail string) Problem {
	return Problem{Type: ProblemBase + name, Title: title, Status: status, Detail: detail}
}

// RetryAfterSeconds is d as a Retry-After value: whole seconds, rounded
// up, at least 1.
func RetryAfterSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return max(1, s)
}

// Write sends p as application/problem+json, with Cache-Control: no-store
// and, when p.RetryAfter is positive, Retry-After. An empty Instance
// becomes r's path (r may be nil). Write sets headers, so call it before
// anything else is written to w.
func Write(w http.ResponseWriter, r *http.Request, p Problem) {
	if p.Status == 0 {
		p.Status = http.StatusInternalServerError
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	if p.Instance == "" && r != nil && r.URL != nil {
		p.Instance = r.URL.Path
	}
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(RetryAfterSeconds(p.RetryAfter), 10))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// WriteError writes ProblemFor(err) and returns it (for example to log
// the error of a 5xx, which the response does not show).
func WriteError(w http.ResponseWriter, r *http.Request, err error) Problem {
	p := ProblemFor(err)
	Write(w, r, p)
	return p
}

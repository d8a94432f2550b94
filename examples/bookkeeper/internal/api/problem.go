package api

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ProblemBase is the prefix of every problem type URI.
const ProblemBase = "https://rowlease.dev/problems/"

// Problem types (the last segment of the type URI).
const (
	ProblemInvalidRequest   = "invalid-request"
	ProblemSessionNotFound  = "session-not-found"
	ProblemNotFound         = "not-found"
	ProblemMethodNotAllowed = "method-not-allowed"
	ProblemSessionBusy      = "session-busy"
	ProblemRequestInFlight  = "request-in-flight"
	ProblemTakenOver        = "taken-over"
	ProblemToolInFlight     = "tool-in-flight"
	ProblemIDReused         = "client-request-id-reused"
	ProblemAgentFailed      = "agent-failed"
	ProblemModelFailed      = "model-failed"
	ProblemInternal         = "internal"
	ProblemShuttingDown     = "shutting-down"
	ProblemUnavailable      = "unavailable"
	ProblemTimeout          = "timeout"
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type     string `json:"type"`               // stable URI: ProblemBase + a Problem… constant
	Title    string `json:"title"`              // short summary of the type
	Status   int    `json:"status"`             // the HTTP status code
	Detail   string `json:"detail,omitempty"`   // this occurrence, for humans
	Instance string `json:"instance,omitempty"` // the request path
}

// ProblemContentType is the media type of problem responses.
const ProblemContentType = "application/problem+json"

// writeProblem writes a problem response; retryAfter > 0 sets Retry-After.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, kind, title, detail string, retryAfter int) {
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{Type: ProblemBase + kind, Title: title, Status: status, Detail: detail, Instance: r.URL.Path})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

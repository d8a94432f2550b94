package api

import (
	"github.com/rowlease/rowlease/httpapi"
)

// ProblemBase is the prefix of every problem type URI (httpapi's).
const ProblemBase = httpapi.ProblemBase

// Problem types (the last segment of the type URI): rowlease's own from
// package httpapi, and the example's next to them.
const (
	ProblemInvalidRequest   = httpapi.TypeInvalidRequest
	ProblemSessionNotFound  = httpapi.TypeSessionNotFound
	ProblemNotFound         = httpapi.TypeNotFound
	ProblemMethodNotAllowed = "method-not-allowed"
	ProblemSessionBusy      = httpapi.TypeSessionBusy
	ProblemRequestInFlight  = httpapi.TypeRequestInFlight
	ProblemTakenOver        = httpapi.TypeTakenOver
	ProblemToolInFlight     = httpapi.TypeToolInFlight
	ProblemIDReused         = httpapi.TypeClientRequestIDReused
	ProblemAgentFailed      = httpapi.TypeAgentFailed
	ProblemModelFailed      = "model-failed"
	ProblemInternal         = httpapi.TypeInternal
	ProblemShuttingDown     = "shutting-down"
	ProblemUnavailable      = httpapi.TypeUnavailable
	ProblemTimeout          = "timeout"
	ProblemExpired          = httpapi.TypeExpired
	ProblemQueueFull        = httpapi.TypeQueueFull
	ProblemInterrupted      = httpapi.TypeInterrupted
	ProblemCancelled        = httpapi.TypeCancelled
	ProblemAlreadyFinal     = "already-final"
)

// Problem is an RFC 9457 problem details object (httpapi.Problem).
type Problem = httpapi.Problem

// ProblemContentType is the media type of problem responses.
const ProblemContentType = httpapi.ContentType

package engine

import (
	"context"
	"errors"
	"time"
)

// Observer is how rowlease reports what it does, for traces, metrics and
// logs (package contrib/otel adapts it to OpenTelemetry). Every package
// takes one in its options; nil, the default, costs nothing: no clock
// read, no allocation, no call. Its methods are called on the caller's
// goroutine and must return quickly. Nothing passed to it ever carries a
// lease token.
type Observer interface {
	// Start begins a unit of work — a message's handling, a model round,
	// a tool call, a fenced transaction — and returns the context to run
	// it under (a tracer puts its span there, so the lease operations
	// inside become its children) and the function that ends it with the
	// work's error and attributes known only at the end.
	Start(ctx context.Context, s Span) (context.Context, func(err error, attrs ...Attr))
	// Op reports a lease operation after it returned.
	Op(ctx context.Context, op Op)
	// Event reports something that happened at a point in time, such as a
	// heartbeat renewal retried or a lease lost (each package that reports
	// events names them).
	Event(ctx context.Context, name string, attrs ...Attr)
}

// Span names the units of work reported through Observer.Start.
type Span struct {
	Name  string // SpanFencedTx here; each package that starts spans names its own
	Attrs []Attr
}

// SpanFencedTx is the span of a transaction that ends by confirming
// fences (RunFenced, as packages toolexec and request run it).
const SpanFencedTx = "rowlease.fenced_tx"

// Attribute keys of the lease's own operations and spans. Values are
// strings, int64s or bools. Each package that reports spans or events
// names its own keys besides these.
const (
	AttrTable      = "rowlease.table"
	AttrLease      = "rowlease.lease" // which lease of a flow: session, request, tool:<name>
	AttrGeneration = "rowlease.generation"
	AttrVerdict    = "rowlease.verdict" // see the Verdict… values
	AttrAttempt    = "rowlease.attempt"
)

// Attr is one attribute of a span, an operation or an event.
type Attr struct {
	Key   string
	Value any // string, int64 or bool
}

// Op describes one finished lease operation. It never carries a token.
type Op struct {
	Table      string        // the table, unquoted
	Name       string        // acquire, renew, release, transition, confirm, verify, create, delete, ensure, inspect
	Verdict    string        // see the Verdict… values
	Start      time.Time     // when it was sent (the Lease's clock)
	Duration   time.Duration // until it returned
	Generation int64         // the generation it saw or set, when it has one
	Err        error         // the error returned, if any (never containing a token)
}

// Verdicts: how lease operations, spans and tool calls ended (AttrVerdict).
const (
	VerdictOK       = "ok"       // done (a renewal, a release, a confirmation…)
	VerdictAcquired = "acquired" // a new grant or a reentry
	VerdictHeld     = "held"     // ErrHeld: someone else holds it
	VerdictLost     = "lost"     // ErrLost: the token no longer matches
	VerdictNotFound = "not_found"
	VerdictState    = "state"
	VerdictExists   = "exists"
	VerdictInvalid  = "invalid" // rejected before any SQL
	VerdictError    = "error"   // the driver's error: outcome unknown
)

// VerdictOf classifies err as one of the Verdict… values; ok is the value
// for a nil error.
func VerdictOf(err error, ok string) string {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, ErrHeld):
		return VerdictHeld
	case errors.Is(err, ErrLost):
		return VerdictLost
	case errors.Is(err, ErrNotFound):
		return VerdictNotFound
	case errors.Is(err, ErrState):
		return VerdictState
	case errors.Is(err, ErrExists):
		return VerdictExists
	case errors.Is(err, ErrInvalid):
		return VerdictInvalid
	}
	return VerdictError
}

// observe reports one finished operation; called deferred, only when an
// Observer is set.
func (l *Lease[K]) observe(ctx context.Context, name, ok string, start time.Time, gen *int64, err *error) {
	l.obs.Op(ctx, Op{Table: l.table.name, Name: name, Verdict: VerdictOf(*err, ok), Start: start,
		Duration: time.Since(start), Generation: *gen, Err: *err})
}

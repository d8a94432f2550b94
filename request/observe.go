package request

import (
	"context"
	"errors"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// Names of the spans this package reports to the Observer
// (Config.Observer), and of the attributes it sets on them. The values are
// those that package lease used to name for it before v0.2.0, so traces and
// dashboards read the same.
const (
	// SpanHandle is the span of one Runner.Handle call, from the first
	// read to the last release. It starts with AttrSession and ends with
	// lease.AttrVerdict (a Verdict… value), AttrConflict when the message
	// was refused, and AttrRequest when a request id is known.
	SpanHandle = "rowlease.handle"
	// SpanModelRound is the span of one model round, reported by the
	// agent through Run.ModelRound, with AttrModel.
	SpanModelRound = "rowlease.model_round"
)

// Attribute keys of this package's spans. Values are strings.
const (
	// AttrSession is the session key of the message.
	AttrSession = "rowlease.session"
	// AttrRequest is the request id.
	AttrRequest = "rowlease.request"
	// AttrConflict says why a message was refused (VerdictConflict):
	// session_busy, in_flight, fingerprint_mismatch or tool_conflict.
	AttrConflict = "rowlease.conflict"
	// AttrModel is the model named to Run.ModelRound.
	AttrModel = "rowlease.model"
)

// Verdicts of a handled message (how it ended), as reported to the Observer
// (lease.AttrVerdict on the end of a SpanHandle span).
const (
	VerdictAnswered  = "answered"   // the agent ran and its answer is stored
	VerdictResumed   = "resumed"    // the same, taking over a failed or crashed run
	VerdictReplayed  = "replayed"   // a stored answer, no lock taken
	VerdictConflict  = "conflict"   // refused: see AttrConflict
	VerdictTakenOver = "taken_over" // this run lost a lease
	VerdictFailed    = "failed"     // the agent failed
	VerdictInvalid   = "invalid"    // rejected before any SQL
	VerdictError     = "error"      // anything else (a database error)
)

// handleEnd says how a message's handling ended, for the Observer.
func handleEnd(out Outcome, err error) []lease.Attr {
	verdict := VerdictError
	var conflict string
	switch {
	case err == nil && out.Replayed:
		verdict = VerdictReplayed
	case err == nil && out.Resumed:
		verdict = VerdictResumed
	case err == nil:
		verdict = VerdictAnswered
	case errors.Is(err, ErrFingerprintMismatch):
		verdict, conflict = VerdictConflict, "fingerprint_mismatch"
	case errors.As(err, new(*session.BusyError)):
		verdict, conflict = VerdictConflict, "session_busy"
	case errors.Is(err, ErrInFlight):
		verdict, conflict = VerdictConflict, "in_flight"
	case errors.As(err, new(*toolexec.BusyError)):
		verdict, conflict = VerdictConflict, "tool_conflict"
	case errors.Is(err, ErrTakenOver):
		verdict = VerdictTakenOver
	case errors.Is(err, ErrAgentFailed):
		verdict = VerdictFailed
	case errors.Is(err, lease.ErrInvalid):
		verdict = VerdictInvalid
	}
	attrs := []lease.Attr{{Key: lease.AttrVerdict, Value: verdict}}
	if conflict != "" {
		attrs = append(attrs, lease.Attr{Key: AttrConflict, Value: conflict})
	}
	if out.RequestID != "" {
		attrs = append(attrs, lease.Attr{Key: AttrRequest, Value: out.RequestID})
	}
	return attrs
}

// toolEnd says how a tool call ended, for the Observer.
func toolEnd(res toolexec.Result, err error) []lease.Attr {
	verdict := "ok"
	switch {
	case err == nil && res.Reused:
		verdict = "reused"
	case err == nil:
	case errors.As(err, new(*toolexec.FailedError)):
		verdict = "failed"
	case errors.As(err, new(*toolexec.UnknownOutcomeError)):
		verdict = "unknown_outcome"
	case errors.As(err, new(*toolexec.BusyError)):
		verdict = "conflict"
	case errors.As(err, new(*toolexec.TransientError)):
		verdict = "transient"
	case errors.Is(err, lease.ErrLost):
		verdict = "lost"
	case errors.Is(err, toolexec.ErrUnknownTool), errors.Is(err, lease.ErrInvalid):
		verdict = "invalid"
	default:
		verdict = "error"
	}
	return []lease.Attr{{Key: lease.AttrVerdict, Value: verdict}, {Key: lease.AttrGeneration, Value: res.Generation}}
}

// heartbeatEvent forwards the supervisor's retries and losses to obs.
func heartbeatEvent(ctx context.Context, obs lease.Observer) func(heartbeat.Event) {
	return func(ev heartbeat.Event) {
		switch ev.Kind {
		case heartbeat.EventRetry:
			obs.Event(ctx, heartbeat.EventRenewRetry, lease.Attr{Key: lease.AttrLease, Value: ev.Lease},
				lease.Attr{Key: lease.AttrAttempt, Value: int64(ev.Attempt)})
		case heartbeat.EventLost:
			reason := ""
			var le *heartbeat.LostError
			if errors.As(ev.Err, &le) {
				reason = le.Reason
			}
			obs.Event(ctx, heartbeat.EventLeaseLost, lease.Attr{Key: lease.AttrLease, Value: ev.Lease},
				lease.Attr{Key: heartbeat.AttrReason, Value: reason})
		}
	}
}

// ModelRound reports one model round of the agent to the Runner's
// Observer (Config.Observer): call it before the model call and the
// returned function after it, with its error. It returns ctx unchanged and
// does nothing when there is no Observer.
//
//	ctx, done := run.ModelRound(ctx, "gpt-4o")
//	resp, err := model.Complete(ctx, prompt)
//	done(err)
func (run *Run) ModelRound(ctx context.Context, model string) (context.Context, func(err error)) {
	obs := run.r.cfg.Observer
	if obs == nil {
		return ctx, func(error) {}
	}
	ctx, end := obs.Start(ctx, lease.Span{Name: SpanModelRound, Attrs: []lease.Attr{{Key: AttrModel, Value: model}}})
	return ctx, func(err error) { end(err) }
}

package heartbeat

import (
	"fmt"
	"time"
)

// EventKind says what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventRenewed: a renewal succeeded; Event.Deadline is the new deadline.
	EventRenewed EventKind = iota + 1
	// EventRetry: a renewal failed with a transient error (Event.Err) and
	// will be retried; Event.Attempt counts the failures in a row.
	EventRetry
	// EventLost: the lease was lost; Event.Err is the *LostError.
	EventLost
)

// String returns "renewed", "retry" or "lost".
func (k EventKind) String() string {
	switch k {
	case EventRenewed:
		return "renewed"
	case EventRetry:
		return "retry"
	case EventLost:
		return "lost"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is what Config.OnEvent receives.
type Event struct {
	Kind     EventKind
	Lease    string    // the Renewer's name
	Deadline time.Time // the lease's trust deadline after the event
	Attempt  int       // EventRetry: failed renewals in a row, from 1
	Err      error     // EventRetry: the renewal's error; EventLost: the *LostError
}

// Names of the events a flow reports to a lease.Observer for its
// supervisor's Events (request.Runner does, with the lease's name under
// lease.AttrLease), and of their attribute. The strings are those the
// lease package gave these events before heartbeat named them, so traces
// and dashboards keep working.
const (
	// EventRenewRetry names an EventRetry: a renewal failed transiently
	// and will be retried (the failures in a row under lease.AttrAttempt).
	EventRenewRetry = "rowlease.heartbeat.retry"
	// EventLeaseLost names an EventLost: a supervised lease was lost, and
	// the work cancelled; AttrReason says why.
	EventLeaseLost = "rowlease.heartbeat.lost"
	// AttrReason is the attribute key of why a lease was lost: its
	// LostError.Reason (ReasonGone, ReasonDeadline or ReasonInvalid).
	AttrReason = "rowlease.reason"
)

// event hands ev to Config.OnEvent, if set.
func (s *Supervisor) event(ev Event) {
	if s.cfg.OnEvent != nil {
		s.cfg.OnEvent(ev)
	}
}

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

func (s *Supervisor) event(ev Event) {
	if s.cfg.OnEvent != nil {
		s.cfg.OnEvent(ev)
	}
}

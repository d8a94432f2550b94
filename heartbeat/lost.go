package heartbeat

import (
	"context"
	"errors"
	"fmt"

	"github.com/rowlease/rowlease/lease"
)

// ErrRolledBack is the error in a *LostError (ReasonDeadline) when a
// lease's renewals made inside one of the flow's transactions (SQLite, see
// engine.FlowDB) were undone because that transaction did not commit, and
// the lease's last committed renewal was too old to trust any more. It
// is the detail of a loss (lease.ErrLost through the *LostError), not a
// kind of its own.
var ErrRolledBack = errors.New("heartbeat: the renewals made inside the flow's transaction were rolled back with it")

// Reasons a lease is lost, as found in LostError.Reason.
const (
	// ReasonGone: a renewal reported lease.ErrLost — the token no longer
	// matches the row (taken over, released, or moved to another state).
	ReasonGone = "renewal found the token gone"
	// ReasonDeadline: the lease's local trust deadline passed before a
	// renewal succeeded (renewals kept failing, or one blocked).
	ReasonDeadline = "trust deadline passed with no successful renewal"
	// ReasonPoolExhausted: the lease's trust deadline passed while its
	// renewal waited for a free connection of the pool (every one was in
	// use, by the work say): the renewal never reached the database, and
	// nobody needs to have taken the lease over. LostError.Err matches
	// lease.ErrPoolExhausted. Give the pool a connection more for the
	// heartbeat (README, "Sizing the pool"; BatchConfig.Pool).
	ReasonPoolExhausted = "trust deadline passed while the renewal waited for a free connection of the pool"
	// ReasonInvalid: a renewal was rejected as invalid input
	// (lease.ErrInvalid), or Add refused the lease (a LeaseRenewer whose
	// TTL disagrees). Retrying cannot help, so the lease cannot be kept.
	ReasonInvalid = "renewal rejected as invalid input"
)

// LostError reports a lost lease. It is the cause of the work context and
// what Lost returns. It matches lease.ErrLost and unwraps to the renewal's
// error.
type LostError struct {
	Lease  string // the Renewer's name
	Reason string // ReasonGone, ReasonDeadline, ReasonPoolExhausted or ReasonInvalid
	// Err is the renewal's error: the *lease.LostError for ReasonGone, an
	// error matching lease.ErrInvalid for ReasonInvalid, the last failed renewal's
	// error (nil if none was tried) for ReasonDeadline, an error matching
	// lease.ErrPoolExhausted for ReasonPoolExhausted.
	Err error
}

// Error describes the failure; it never contains a token.
func (e *LostError) Error() string {
	s := fmt.Sprintf("heartbeat: lease %q lost: %s", e.Lease, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// deadlineReason is the reason of a loss at the trust deadline whose
// last renewal failed with err.
func deadlineReason(err error) string {
	if errors.Is(err, lease.ErrPoolExhausted) {
		return ReasonPoolExhausted
	}
	return ReasonDeadline
}

// Is makes errors.Is(err, lease.ErrLost) true: whatever the reason, the
// work can no longer trust the lease and must stop writing. A loss whose
// renewals found no free connection (ReasonPoolExhausted) also matches
// lease.ErrPoolExhausted, through Err.
func (e *LostError) Is(target error) bool { return target == lease.ErrLost }

// Unwrap returns the renewal's error.
func (e *LostError) Unwrap() error { return e.Err }

// flushLost hands a loss found by revert to OnEvent, on the goroutine.
func (s *Supervisor) flushLost() {
	s.mu.Lock()
	ev := s.lostEv
	s.lostEv = nil
	s.mu.Unlock()
	if ev != nil {
		s.event(*ev)
	}
}

// lose records the loss of e and cancels the work context, unless that is
// already done (Stop, or the parent).
func (s *Supervisor) lose(ctx context.Context, e *entry, reason string, err error) {
	if ctx.Err() != nil {
		return
	}
	le := &LostError{Lease: e.name, Reason: reason, Err: err}
	s.mu.Lock()
	if s.lost == nil {
		s.lost = le
	}
	cancel, dl := s.cancel, e.deadline
	s.mu.Unlock()
	cancel(le)
	s.log.Error("heartbeat: lease lost, work cancelled", "lease", e.name, "reason", reason, "err", err)
	s.event(Event{Kind: EventLost, Lease: e.name, Deadline: dl, Err: le})
}

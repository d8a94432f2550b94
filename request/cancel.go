package request

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rowlease/rowlease/internal/engine"
)

// ErrCancelled: the request was cancelled by its client (Cancel) (409,
// "cancelled"). Its committed tool calls stay; it never runs again, and
// every resend of its id answers this. It is also the cause of the
// cancelled run's context. None of lease's kinds: a final outcome of the
// request, as an *InterruptedError is.
var ErrCancelled = errors.New("request: cancelled")

// localRuns are the runs executing in this Runner, by request id: Cancel
// stops one of them at once instead of within a heartbeat interval.
type localRuns struct {
	mu   sync.Mutex
	runs map[string]*localRun
}

// localRun is one registration of addLocal: a run's own entry, told apart
// from a later run's of the same request by its address (as watchedRun).
type localRun struct{ stop context.CancelCauseFunc }

// addLocal registers a run for stopLocal; the returned func unregisters
// it. A later run of the same request in this process (it took the
// request over once this run's leases lapsed) replaces the registration,
// and this run's removal then leaves the later one in place.
func (r *Runner) addLocal(id string, stop context.CancelCauseFunc) (remove func()) {
	l := &localRun{stop: stop}
	r.local.mu.Lock()
	if r.local.runs == nil {
		r.local.runs = map[string]*localRun{}
	}
	r.local.runs[id] = l
	r.local.mu.Unlock()
	return func() {
		r.local.mu.Lock()
		if r.local.runs[id] == l {
			delete(r.local.runs, id)
		}
		r.local.mu.Unlock()
	}
}

func (r *Runner) stopLocal(id string, cause error) {
	r.local.mu.Lock()
	l := r.local.runs[id]
	r.local.mu.Unlock()
	if l != nil {
		l.stop(cause)
	}
}

// stopCause turns the stop request a run's watch found into the cause of
// its context: an interrupt by the run's own client request id is a
// cancel.
func (run *Run) stopCause(cause error) error {
	var ie *InterruptedError
	if errors.As(cause, &ie) && ie.By == run.msg.ClientRequestID {
		return ErrCancelled
	}
	return cause
}

// Cancel cancels the request (sessionKey, clientRequestID) and returns its
// Status after:
//
//   - queued: it is marked cancelled at once and never runs;
//   - running: it is asked to stop, as an interrupt does but without a new
//     message: its run's context is cancelled with cause ErrCancelled (at
//     once in this process, within a heartbeat interval in another), and
//     the run marks it cancelled when its agent returns; a run that died
//     is marked cancelled at once, and one that dies before it stopped is
//     marked cancelled by the dispatcher of a Started Runner with an Agent
//     once its lease has expired (it is never resumed). Its committed
//     tool calls stay.
//     Cancel waits for the final state until ctx ends; then it returns the
//     last Status read (processing) with an error matching ctx's cause,
//     and the cancel still takes effect;
//   - failed: it is marked cancelled, so no resend runs it again;
//   - waiting for an answer (Await): it is marked cancelled at once, and
//     an answer sent after gets a *NotWaitingError;
//   - succeeded, interrupted, cancelled or expired: nothing changes.
//
// Every resend of a cancelled request's id gets ErrCancelled (with the
// same fingerprint; another one still gets ErrFingerprintMismatch). An
// unknown request gives ErrNotFound; bad input an error matching lease.ErrInvalid.
// Its writes are single statements; one that the database picked as a
// deadlock or serialization victim took no effect and is sent again, a
// few times (the back-off of a lease operation), so a Cancel that races
// the run's own end does not fail for it.
// A request that an interrupting message asked to stop first ends
// interrupted, not cancelled.
func (r *Runner) Cancel(ctx context.Context, sessionKey, clientRequestID string) (Status, error) {
	if err := validateKeys(sessionKey, clientRequestID); err != nil {
		return Status{}, err
	}
	for attempt := 0; attempt < 20; attempt++ {
		st, err := r.Status(ctx, sessionKey, clientRequestID)
		if err != nil {
			return st, err
		}
		switch st.State {
		case StateQueued, StateFailed, StateWaiting:
			q := r.sql.cancelQueued
			switch st.State {
			case StateFailed:
				q = r.sql.cancelFailed
			case StateWaiting:
				q = r.sql.cancelWaiting
			}
			n, err := r.exec(ctx, q, sessionKey, clientRequestID)
			if err != nil {
				return st, fmt.Errorf("request: cancelling: %w", err)
			}
			if n == 0 {
				continue // it started, or was resent or answered, meanwhile: read it again
			}
			r.notify()
			if st.State == StateWaiting {
				r.hint(sessionKey)
				r.kick(ctx, sessionKey) // the queue behind it may go on
			}
			return r.Status(ctx, sessionKey, clientRequestID)
		case StateProcessing:
			if st.InterruptedBy == "" && !st.CancelRequested {
				n, err := r.exec(ctx, r.sql.cancelFlag, sessionKey, clientRequestID)
				if err != nil {
					return st, fmt.Errorf("request: cancelling: %w", err)
				}
				if n == 0 {
					continue
				}
			}
			// In this process: stop it now, with the cause its heartbeat
			// would give it: a run that another message asked to stop
			// first ends interrupted, not cancelled. A run that died:
			// settle it now.
			var cause error = ErrCancelled
			if st.InterruptedBy != "" {
				cause = &InterruptedError{By: st.InterruptedBy}
			}
			r.stopLocal(st.RequestID, cause)
			if !st.Live {
				ok, err := r.settleInterrupted(ctx, sessionKey, st.RequestID)
				if err != nil {
					return st, fmt.Errorf("request: cancelling: %w", err)
				}
				if ok {
					r.notify()
					r.hint(sessionKey)
					r.kick(ctx, sessionKey) // the queue behind it may go on
				}
			}
			return r.Wait(ctx, sessionKey, clientRequestID)
		default:
			return st, nil
		}
	}
	return Status{}, fmt.Errorf("%w: the request kept changing state", ErrInFlight)
}

// exec runs one statement in autocommit and returns the rows it affected.
// A deadlock or serialization victim took no effect and is sent again
// (engine.RetryVictims): Cancel's flag on MySQL can be chosen as the
// victim against the run's own end, which locks the same request row
// through its primary key while the flag takes it through a secondary key
// that the end's write of status and updated_at then needs.
func (r *Runner) exec(ctx context.Context, q string, args ...any) (n int64, err error) {
	err = engine.RetryVictims(ctx, r.cfg.Dialect, r.db, func() error {
		res, err := r.db.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

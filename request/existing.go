package request

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// existing is a request as find reads it.
type existing struct {
	id, fingerprint, status, reply, result string
	generation                             int64
	interruptedBy                          string // who asked it to stop, or ""
	queued                                 int    // 1: it came through the queue
}

// errNoRequest is find's error for a request that does not exist: the
// first answer of every new message, made once.
var errNoRequest = fmt.Errorf("request: reading the existing request: %w", sql.ErrNoRows)

// find reads the request (session, client request id) of msg: one
// statement; sql.ErrNoRows (wrapped) when there is none.
func (r *Runner) find(ctx context.Context, msg Message) (existing, error) {
	var ex existing
	err := r.findStmt.queryRow(ctx, r.db, msg.SessionKey, msg.ClientRequestID).
		Scan(&ex.id, &ex.fingerprint, &ex.status, &ex.reply, &ex.result, &ex.generation, &ex.interruptedBy, &ex.queued)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ex, errNoRequest
	case err != nil:
		return ex, fmt.Errorf("request: reading the existing request: %w", err)
	}
	return ex, nil
}

// answer answers msg from its request: ex, as the claimer's statement read
// it, or, when ex is nil, the request as find reads it now (an error
// matching sql.ErrNoRows when there is none: beginOnce then claims a new
// one, or, its session busy, refuses or queues the message). Another
// fingerprint is a conflict; a finished request is replayed, or answers
// why it never runs again; a queued one answers its position; one that a
// live run holds is in flight; one whose run is gone after it was asked
// to stop is settled. A failed request, or one whose run died, is to be
// taken over: answer returns the claim that does it, and beginOnce makes
// it (claim). errVanished: the request changed between two reads.
func (r *Runner) answer(ctx context.Context, msg Message, ex *existing, holder string) (*claim, Outcome, error) {
	if ex == nil {
		read, err := r.find(ctx, msg)
		if err != nil {
			return nil, Outcome{}, err
		}
		ex = &read
	}
	if ex.fingerprint != msg.Fingerprint {
		return nil, Outcome{}, ErrFingerprintMismatch
	}
	switch ex.status {
	case schema.StoredSucceeded:
		return nil, Outcome{RequestID: ex.id, Reply: ex.reply, Result: rawOrNil(ex.result), Replayed: true, Attempt: ex.generation}, nil
	case schema.StoredExpired:
		return nil, Outcome{RequestID: ex.id, Attempt: ex.generation}, ErrExpired
	case schema.StoredInterrupted:
		return nil, Outcome{RequestID: ex.id, Attempt: ex.generation}, &InterruptedError{By: ex.interruptedBy}
	case schema.StoredCancelled:
		return nil, Outcome{RequestID: ex.id, Attempt: ex.generation}, ErrCancelled
	case schema.StoredWaiting, schema.StoredQueued:
		// Queued: the resend answers with its position; waiting for a
		// person, with the question. Both are read by Status.
		st, err := r.Status(ctx, msg.SessionKey, msg.ClientRequestID)
		switch {
		case errors.Is(err, lease.ErrNotFound):
			return nil, Outcome{}, errVanished
		case err != nil:
			return nil, Outcome{}, err
		case st.State != stateOf(ex.status):
			return nil, Outcome{}, errVanished
		case st.State == StateQueued:
			return nil, Outcome{RequestID: ex.id, Queued: true, Position: st.Position}, nil
		}
		return nil, Outcome{RequestID: ex.id, Attempt: ex.generation, Waiting: st.Waiting}, nil
	}
	if ex.status == schema.StoredProcessing {
		// Running now, or left by a run that died? The database clock
		// says; a live run is in flight, and nothing is taken.
		st, err := r.req.Inspect(ctx, r.db, ex.id)
		if errors.Is(err, lease.ErrNotFound) {
			return nil, Outcome{}, errVanished
		}
		if err != nil {
			return nil, Outcome{}, err
		}
		if st.Held {
			return nil, Outcome{}, fmt.Errorf("%w: %w", ErrInFlight,
				&lease.ConflictError{Key: ex.id, Holder: st.Holder, Generation: st.Generation, Remaining: st.Remaining})
		}
		if ex.interruptedBy != "" {
			// Asked to stop, and its run is gone: it is interrupted, and
			// never runs again.
			ok, err := r.settleInterrupted(ctx, msg.SessionKey, ex.id)
			if err != nil {
				return nil, Outcome{}, err
			}
			if !ok {
				return nil, Outcome{}, errVanished
			}
			r.notify()
			if ex.interruptedBy == msg.ClientRequestID {
				return nil, Outcome{RequestID: ex.id, Attempt: ex.generation}, ErrCancelled
			}
			return nil, Outcome{RequestID: ex.id, Attempt: ex.generation}, &InterruptedError{By: ex.interruptedBy}
		}
	}
	return &claim{kind: resend, msg: msg, id: ex.id, holder: holder, from: ex.status, fromQueue: ex.queued == 1}, Outcome{}, nil
}

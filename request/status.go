package request

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/rowlease/rowlease/internal/retry"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// State is the state of a request as Status reports it. It is the one
// vocabulary of the Go API and of the HTTP handlers (package httpapi). The
// request table stores each state under its own name, except two that keep
// the words of the first migration: StateSucceeded is stored as "success"
// and StateFailed as "error" (schema.StoredSucceeded, schema.StoredFailed).
type State string

// The states of a request.
const (
	// StateQueued: stored to run when its session is free.
	StateQueued State = "queued"
	// StateProcessing: running, or left by a run that stopped or died
	// (Status.Live tells them apart).
	StateProcessing State = "processing"
	// StateWaiting: its run stopped to wait for a person's answer
	// (Await); no lease is held. Status.Waiting is the question;
	// Runner.Answer runs it on, its deadline passing runs it on with the
	// expiry, Cancel and an interrupting message end it. Not final.
	StateWaiting State = "waiting"
	// StateSucceeded: finished; its reply is stored and replayed.
	StateSucceeded State = "succeeded"
	// StateFailed: the agent failed; a resend runs it again.
	StateFailed State = "failed"
	// StateInterrupted: stopped by another message of its session; it
	// never runs again.
	StateInterrupted State = "interrupted"
	// StateCancelled: cancelled by its client (Runner.Cancel); it never
	// runs again.
	StateCancelled State = "cancelled"
	// StateExpired: finished longer ago than the retention; its outcome
	// was swept and it never runs again.
	StateExpired State = "expired"
)

// Final reports whether the state never changes by itself: succeeded,
// interrupted, cancelled and expired never change; failed changes only
// when the message is sent again or cancelled (and expires).
func (s State) Final() bool {
	switch s {
	case StateSucceeded, StateFailed, StateInterrupted, StateCancelled, StateExpired:
		return true
	}
	return false
}

func stateOf(status string) State {
	switch status {
	case schema.StoredSucceeded:
		return StateSucceeded
	case schema.StoredFailed:
		return StateFailed
	}
	return State(status)
}

// Status is what Status and Wait read of a request. It holds no token.
type Status struct {
	RequestID       string
	SessionKey      string
	ClientRequestID string
	State           State
	// Position is, for a queued request, the number of queued messages
	// of its session that run before it (0: it runs next).
	Position int
	// Live: a run holds the request's lease now (by the database clock).
	// A processing request that is not live was left by a run that
	// stopped or died; a resend (or, for a queued message, a dispatcher)
	// resumes it.
	Live bool
	// Reply and Result are the stored answer of a succeeded request.
	Reply  string
	Result json.RawMessage
	// Error is the stored error text of a failed request (it may hold
	// details for the operator; do not show it to end users as it is).
	Error string
	// InterruptedBy is the client request id of the message that asked
	// the request to stop ("" if none did, or if its own client did).
	InterruptedBy string
	// CancelRequested: its client cancelled it (Cancel); a processing
	// request so marked stops within a heartbeat interval.
	CancelRequested bool
	// Attempt is the request's generation: 0 for a queued message that
	// never ran, 1 for the first run.
	Attempt int64
	// Agent is the name of the request's agent (Message.Agent): "" for
	// the default agent.
	Agent string
	// Metadata is the JSON object stored with the message
	// (Message.Metadata); nil when it had none, and once the request
	// expired (the sweeper empties it with the content).
	Metadata json.RawMessage
	// Waiting is the open question of a waiting request (StateWaiting);
	// nil in every other state.
	Waiting *Question
}

// Outcome returns what Handle returns for a finished request: the stored
// reply of a succeeded one (Replayed), an *InterruptedError, ErrCancelled,
// ErrExpired,
// or for a failed one an error matching ErrAgentFailed with the stored
// text. For a queued request it is a queued Outcome; for a waiting one,
// an Outcome whose Waiting is its question; for a processing one, an
// error matching ErrInFlight.
func (s Status) Outcome() (Outcome, error) {
	switch s.State {
	case StateSucceeded:
		return Outcome{RequestID: s.RequestID, Reply: s.Reply, Result: s.Result, Replayed: true, Attempt: s.Attempt}, nil
	case StateFailed:
		return Outcome{RequestID: s.RequestID, Attempt: s.Attempt}, fmt.Errorf("%w: %s", ErrAgentFailed, s.Error)
	case StateInterrupted:
		return Outcome{RequestID: s.RequestID, Attempt: s.Attempt}, &InterruptedError{By: s.InterruptedBy}
	case StateCancelled:
		return Outcome{RequestID: s.RequestID, Attempt: s.Attempt}, ErrCancelled
	case StateExpired:
		return Outcome{RequestID: s.RequestID, Attempt: s.Attempt}, ErrExpired
	case StateQueued:
		return Outcome{RequestID: s.RequestID, Queued: true, Position: s.Position}, nil
	case StateWaiting:
		return Outcome{RequestID: s.RequestID, Attempt: s.Attempt, Waiting: s.Waiting}, nil
	}
	return Outcome{RequestID: s.RequestID, Attempt: s.Attempt}, ErrInFlight
}

// Status reads the state of the request (sessionKey, clientRequestID)
// and its stored outcome, in one statement and without taking any lock.
// An unknown request gives an error matching ErrNotFound (and
// lease.ErrNotFound); bad input an error matching lease.ErrInvalid.
func (r *Runner) Status(ctx context.Context, sessionKey, clientRequestID string) (Status, error) {
	if err := validateKeys(sessionKey, clientRequestID); err != nil {
		return Status{}, err
	}
	st := Status{SessionKey: sessionKey, ClientRequestID: clientRequestID}
	var status, result, metadata, waitName, question string
	var live, hasDeadline int
	var left int64
	err := r.db.QueryRowContext(ctx, r.sql.status, sessionKey, clientRequestID).Scan(&st.RequestID, &status,
		&st.Reply, &result, &st.Error, &st.Attempt, &st.InterruptedBy, &live, &st.Position, &st.Agent, &metadata,
		&waitName, &question, &hasDeadline, &left)
	if errors.Is(err, sql.ErrNoRows) {
		return Status{}, fmt.Errorf("request: no message %q in session %q: %w", clientRequestID, sessionKey, lease.ErrNotFound)
	}
	if err != nil {
		return Status{}, fmt.Errorf("request: reading the request's status: %w", err)
	}
	st.State, st.Live, st.Result, st.Metadata = stateOf(status), live == 1, rawOrNil(result), rawOrNil(metadata)
	if st.InterruptedBy == clientRequestID {
		st.InterruptedBy, st.CancelRequested = "", true
	}
	if st.State == StateWaiting {
		st.Waiting = &Question{Name: waitName, Question: rawOrNil(question)}
		if hasDeadline == 1 {
			d := time.Now().Add(time.Duration(left) * time.Microsecond)
			st.Waiting.Deadline = &d
		}
	}
	return st, nil
}

func validateKeys(sessionKey, clientRequestID string) error {
	switch {
	case sessionKey == "" || len(sessionKey) > schema.MaxSessionKeyLen || !utf8.ValidString(sessionKey):
		return invalid("session key", "empty, longer than 191 bytes or not UTF-8")
	case clientRequestID == "" || len(clientRequestID) > schema.MaxClientRequestIDLen || !utf8.ValidString(clientRequestID):
		return invalid("client request id", "empty, longer than 191 bytes or not UTF-8")
	}
	return nil
}

// Wait waits until the request (sessionKey, clientRequestID) is in a
// final state (succeeded, failed, interrupted or expired: see
// State.Final) or waits for a person's answer (StateWaiting), and
// returns its Status, with the stored outcome
// (Status.Outcome gives what Handle would). It works across processes:
// it reads the status (one statement) with a jittered backoff from
// QueueConfig.PollMin to PollMax, and is woken at once when a request of
// its own process starts or ends. It takes no lock and changes nothing.
//
// When ctx ends first it returns the last Status read and an error that
// matches ctx's cause (context.DeadlineExceeded for a timeout). Each read
// runs to its end even if ctx ends meanwhile (bounded by
// Config.ReleaseTimeout), so that there is always a last Status to
// return. An unknown request gives ErrNotFound at once.
func (r *Runner) Wait(ctx context.Context, sessionKey, clientRequestID string) (Status, error) {
	delay := r.cfg.Queue.PollMin
	for {
		changed := r.changedChan()
		rctx, cancel := r.detached(ctx)
		st, err := r.Status(rctx, sessionKey, clientRequestID)
		err = r.readTimeout().Of(rctx, err)
		cancel()
		if err != nil {
			return st, err
		}
		if st.State.Final() || st.State == StateWaiting {
			return st, nil
		}
		t := time.NewTimer(retry.Jitter(delay))
		select {
		case <-ctx.Done():
			t.Stop()
			return st, fmt.Errorf("request: still %s: %w", st.State, context.Cause(ctx))
		case <-changed:
			t.Stop()
		case <-t.C:
		}
		delay = min(delay*2, r.cfg.Queue.PollMax)
	}
}

func rawOrNil(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

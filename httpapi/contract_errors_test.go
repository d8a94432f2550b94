package httpapi_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// contractErrors are the errors the library returns, each built as the
// package that returns it builds it (the statement or function named in
// the comment), by name. TestHTTPContract pins what httpapi answers for
// each; only this file follows the packages when the way an error is
// built changes, the table of answers never does.
func contractErrors() map[string]error {
	conflict := func(left time.Duration) error {
		return &lease.ConflictError{Key: "k", Holder: "h", Generation: 3, Remaining: left}
	}
	lost := &lease.LostError{Key: "k", Op: "renew"}
	poolExhausted := fmt.Errorf("%w: waited for one to renew until the trust deadline: %w", lease.ErrPoolExhausted, context.DeadlineExceeded)
	agentFailed := func(err error) error { // request's finish: the agent's error, joined with the mark's
		return errors.Join(fmt.Errorf("%w: %w", request.ErrAgentFailed, err), nil)
	}
	_, _, invalidArgs := toolexec.CanonicalArguments([]byte("not json"))
	_, _, notObject := toolexec.CanonicalArguments([]byte("[1]"))
	keyTaken := &toolexec.KeyTakenError{Tool: "pay", EffectKey: "e-1", RequestID: "r-old",
		Err: &engine.DuplicateKeyError{Key: "e-1", Err: errors.New("1062")}}
	sessionBusy := &session.BusyError{Key: "s", Err: conflict(2100 * time.Millisecond)}             // session.wrap
	sessionNotFound := &session.NotFoundError{Key: "s"}                                             // session.wrap
	toolBusy := &toolexec.BusyError{Tool: "t", Err: conflict(7 * time.Second)}                      // toolexec's claim
	toolChanging := &toolexec.BusyError{Tool: "t", Err: errors.New("the call kept changing state")} // toolexec's claim
	takenOver := fmt.Errorf("%w: %w", request.ErrTakenOver, &heartbeat.LostError{Lease: "request", Reason: heartbeat.ReasonGone, Err: lost})
	return map[string]error{
		"nil": nil,
		// lease
		"lease held":               conflict(2100 * time.Millisecond),
		"lease held, no time left": conflict(0),
		"lease lost":               lost,
		"lease not found":          fmt.Errorf("%w (key %q)", lease.ErrNotFound, "k"), // Inspect
		"lease exists":             &engine.DuplicateKeyError{Key: "k", Err: errors.New("1062")},
		"lease state":              &engine.StateError{Key: "k", State: "success", Want: []string{"error"}},
		"lease invalid":            &engine.ValidationError{Field: "ttl", Reason: "below the minimum"},
		"lease invalid, of request": &engine.ValidationError{Package: "request", Field: "client request id",
			Reason: "empty"},
		"lease invalid, bare":     lease.ErrInvalid,
		"pool exhausted":          poolExhausted,
		"node behind":             fmt.Errorf("%w (%v)", lease.ErrNodeBehind, lost), // fence
		"deadlock":                &mysql.MySQLError{Number: 1213, Message: "Deadlock found"},
		"lock wait timeout":       &mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"},
		"connection refused":      fmt.Errorf("store: get session: %w", refused()),
		"bad connection":          driver.ErrBadConn,
		"marked unavailable":      httpapi.Unavailable(errors.New("health check timed out")),
		"own timeout":             &engine.TimeoutError{Wait: "request: the final mark", Limit: 5 * time.Second, Setting: "request.Config.ReleaseTimeout", Err: context.DeadlineExceeded},
		"caller's deadline":       context.DeadlineExceeded,
		"caller cancelled":        context.Canceled,
		"unknown error":           errors.New("whatever"),
		"model API down":          agentFailed(&url.Error{Op: "Post", URL: "https://api.example", Err: refused()}),
		"session busy":            sessionBusy,
		"session not found":       sessionNotFound,
		"session lost on touch":   lost,
		"session busy, request":   sessionBusy,                                                                                                      // request's claim
		"session busy, queued":    &session.BusyError{Key: "s", Err: errors.New("queue ahead")},                                                     // request's claim, messages ahead
		"in flight":               fmt.Errorf("%w: %w", request.ErrInFlight, conflict(2100*time.Millisecond)),                                       // request's onExisting
		"in flight, long lease":   fmt.Errorf("%w: %w", request.ErrInFlight, conflict(25*time.Second)),                                              // request's onExisting
		"in flight, changing":     fmt.Errorf("%w: the request kept changing state", request.ErrInFlight),                                           // request's claim
		"in flight, bare":         request.ErrInFlight,                                                                                              // Status.Outcome
		"in flight, refused":      fmt.Errorf("%w: the database kept refusing the locks: %w", request.ErrInFlight, &mysql.MySQLError{Number: 1213}), // request's claim
		"taken over":              takenOver,
		"taken over, recording":   fmt.Errorf("%w: recording step %d: %w", request.ErrTakenOver, 2, lost), // Step
		"taken over, deadline":    fmt.Errorf("%w: %w", request.ErrTakenOver, &heartbeat.LostError{Lease: "request", Reason: heartbeat.ReasonDeadline, Err: refused()}),
		"taken over, rolled back": fmt.Errorf("%w: %w", request.ErrTakenOver, &heartbeat.LostError{Lease: "request", Reason: heartbeat.ReasonDeadline, Err: heartbeat.ErrRolledBack}),
		"heartbeat no connection": fmt.Errorf("request: run stopped, its heartbeat had no connection: %w",
			&heartbeat.LostError{Lease: "session", Reason: heartbeat.ReasonPoolExhausted, Err: poolExhausted}),
		"heartbeat invalid":        &heartbeat.LostError{Lease: "session", Reason: heartbeat.ReasonInvalid, Err: &engine.ValidationError{Package: "heartbeat", Field: "ttl", Reason: "disagrees"}},
		"heartbeat stopped":        heartbeat.ErrStopped,
		"heartbeat started":        heartbeat.ErrStarted,
		"heartbeat write lock":     heartbeat.ErrWriteLocked,
		"fingerprint":              request.ErrFingerprintMismatch,
		"expired":                  request.ErrExpired,
		"queue full":               &request.QueueFullError{Max: 20},
		"interrupted":              &request.InterruptedError{By: "m-2"},
		"interrupted, unknown":     &request.InterruptedError{},
		"cancelled":                request.ErrCancelled,
		"cancelled, joined":        errors.Join(request.ErrCancelled, errors.New("mark failed")),                        // markStopped
		"request not found":        fmt.Errorf("request: no message %q in session %q: %w", "m", "s", lease.ErrNotFound), // Status
		"runner closed":            request.ErrClosed,
		"agent failed":             agentFailed(errors.New("model exploded")),
		"agent failed, stored":     fmt.Errorf("%w: %s", request.ErrAgentFailed, "model exploded"), // Status.Outcome
		"agent's invalid input":    agentFailed(&engine.ValidationError{Field: "ttl", Reason: "0"}),
		"unknown agent":            &request.UnknownAgentError{Name: "chat"},
		"metadata too large":       &request.MetadataTooLargeError{Size: 70000, Limit: 65536},
		"step diverged":            agentFailed(&request.StepDivergedError{Position: 1, Recorded: "a", Asked: "b"}),
		"step diverged, bare":      &request.StepDivergedError{Position: 1, Recorded: "a", Asked: "b"},
		"step too large":           agentFailed(&request.StepTooLargeError{Name: "plan", Size: 2 << 20, Limit: 1 << 20}),
		"step too large, bare":     &request.StepTooLargeError{Name: "plan", Size: 2 << 20, Limit: 1 << 20},
		"unknown tool":             fmt.Errorf("%w: %q", toolexec.ErrUnknownTool, "nope"), // Registry
		"unknown tool, agent":      agentFailed(fmt.Errorf("%w: %q", toolexec.ErrUnknownTool, "nope")),
		"tool busy":                toolBusy,
		"tool busy, agent":         agentFailed(toolBusy),
		"tool busy, changing":      toolChanging,
		"tool failed":              &toolexec.FailedError{Tool: "mail", Err: errors.New("refused")},
		"tool failed, agent":       agentFailed(&toolexec.FailedError{Tool: "mail", Err: refused()}),
		"tool not performed":       agentFailed(&toolexec.FailedError{Tool: "pay", Err: toolexec.NotPerformed(errors.New("declined"))}),
		"tool transient":           &toolexec.TransientError{Tool: "t", Err: &mysql.MySQLError{Number: 1213}},
		"tool transient, agent":    agentFailed(&toolexec.TransientError{Tool: "t", Err: &mysql.MySQLError{Number: 1213}}),
		"key taken":                keyTaken,
		"key taken, agent":         agentFailed(keyTaken),
		"call of another session":  fmt.Errorf("%w: the call exists under another session key", lease.ErrExists),
		"outcome unknown":          &toolexec.UnknownOutcomeError{Tool: "notify", EffectKey: "k", Err: refused()},
		"outcome unknown, agent":   agentFailed(&toolexec.UnknownOutcomeError{Tool: "notify", EffectKey: "k", Err: io.ErrUnexpectedEOF}),
		"outcome unknown, db down": errors.Join(&toolexec.UnknownOutcomeError{Tool: "notify", EffectKey: "k", Err: refused()}, driver.ErrBadConn),
		"outside tx":               agentFailed(&toolexec.OutsideTxError{Tool: "t", Err: sqliteError(5)}),
		"outside tx, bare":         &toolexec.OutsideTxError{Tool: "t", Err: sqliteError(5)},
		"invalid arguments":        invalidArgs,
		"arguments not an object":  notObject,
		"invalid arguments, agent": agentFailed(invalidArgs),
		// Answer's refusals (readWait's checks), and Await's expiry returned by an agent.
		"not waiting, other name":   &request.NotWaitingError{Name: "approve", State: request.StateWaiting, Waiting: "confirm"},
		"not waiting, none":         &request.NotWaitingError{Name: "approve", State: request.StateSucceeded},
		"already answered":          &request.AnsweredError{Name: "approve"},
		"wait expired":              &request.WaitExpiredError{Name: "approve"},
		"wait expired, agent":       agentFailed(&request.WaitExpiredError{Name: "approve"}),
		"waiting, outside an agent": request.ErrWaiting,
	}
}

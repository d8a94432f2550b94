package request

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/rowlease/rowlease/internal/retry"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// ErrStepDiverged: a resumed run asked for a step under another name than
// the one its request recorded at that position: the agent's code between
// steps did not replay deterministically. The run fails with it (the
// request is marked error); nothing recorded is handed to the wrong step.
// The concrete error is a *StepDivergedError.
var ErrStepDiverged = errors.New("request: replay diverged from the recorded steps")

// StepDivergedError reports a divergent replay. It matches
// ErrStepDiverged.
type StepDivergedError struct {
	Position int    // the step's position in the run, from 0
	Recorded string // the name recorded at that position
	Asked    string // the name the run asked for
}

// Error describes the divergence.
func (e *StepDivergedError) Error() string {
	return fmt.Sprintf("request: replay diverged from the recorded steps: step %d was recorded as %q and is now asked for as %q",
		e.Position, e.Recorded, e.Asked)
}

// Is makes errors.Is(err, ErrStepDiverged) true.
func (e *StepDivergedError) Is(target error) bool { return target == ErrStepDiverged }

// MaxStepNameLen bounds a step's name, in bytes.
const MaxStepNameLen = 128

// stepRecord is one recorded step, as the steps column stores it.
type stepRecord struct {
	Name   string          `json:"name"`
	Output json.RawMessage `json:"output"`
}

// decodeSteps reads the steps column ("" or NULL: none).
func decodeSteps(s string) ([]stepRecord, error) {
	if s == "" {
		return nil, nil
	}
	var out []stepRecord
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("request: the recorded steps are not valid JSON: %w", err)
	}
	return out, nil
}

// Step runs fn once per position of this request's run and records its
// output (JSON) on the request's row, fenced by the request lease: one
// token-checked UPDATE of the request row per step, which a stale run
// cannot make (it gets an error matching ErrTakenOver and lease.ErrLost,
// and its work context is cancelled on loss anyway).
//
// A run that resumes the request (a takeover after a crash or a failure,
// a resend, the service's own resume) gets the recorded outputs back, in
// order, without calling fn: the model is asked at most once per recorded
// step, and what the run does with the outputs is the same as before. A
// step whose output was not recorded before the run died runs again:
// steps are at-least-once; effects (CallTool) exactly-once.
//
// Steps of one run are taken one after the other: a Step called while
// another one runs (from fn itself, or from another goroutine) is refused
// with a *lease.ValidationError, since positions would then depend on
// timing. A resumed run that asks for the step of a recorded position
// under another name gets a *StepDivergedError (ErrStepDiverged), and the
// run fails with it even if the agent goes on. (A resumed run that ends
// before asking for every recorded step is not refused: the steps it did
// not ask for are left unused.) fn's output must be valid JSON (nil
// records null); it is returned as recorded. name must be non-empty UTF-8
// of at most MaxStepNameLen bytes. fn's error is returned as it is, and
// nothing is recorded.
func (run *Run) Step(ctx context.Context, name string, fn func(ctx context.Context) (json.RawMessage, error)) (json.RawMessage, error) {
	if name == "" || len(name) > MaxStepNameLen || !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
		return nil, invalid("step name", "empty, longer than 128 bytes, not UTF-8 or with a NUL byte")
	}
	if fn == nil {
		return nil, invalid("step function", "nil")
	}
	if err := run.stopped(); err != nil {
		return nil, err
	}
	run.stepMu.Lock()
	if run.diverged != nil {
		run.stepMu.Unlock()
		return nil, run.diverged
	}
	if run.stepBusy {
		run.stepMu.Unlock()
		return nil, invalid("step", "called while another step of the run is running")
	}
	pos := run.stepPos
	if pos < len(run.steps) {
		defer run.stepMu.Unlock()
		rec := run.steps[pos]
		if rec.Name != name {
			run.diverged = &StepDivergedError{Position: pos, Recorded: rec.Name, Asked: name}
			return nil, run.diverged
		}
		run.stepPos++
		run.replayed++
		return append(json.RawMessage(nil), rec.Output...), nil
	}
	run.stepBusy = true
	run.stepMu.Unlock()
	defer func() {
		run.stepMu.Lock()
		run.stepBusy = false
		run.stepMu.Unlock()
	}()
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	out, err := fn(ctx)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	if !json.Valid(out) {
		return nil, invalid("step output", "not valid JSON")
	}
	if err := run.stopped(); err != nil {
		return nil, err
	}
	// Only this Step changes steps and stepPos while stepBusy is set.
	run.stepMu.Lock()
	next := append(append([]stepRecord(nil), run.steps...), stepRecord{Name: name, Output: out})
	run.stepMu.Unlock()
	if err := run.recordSteps(ctx, next); err != nil {
		return nil, err
	}
	run.stepMu.Lock()
	run.steps = next
	run.stepPos++
	run.stepMu.Unlock()
	return append(json.RawMessage(nil), out...), nil
}

// recordSteps writes the whole steps column in one token-checked UPDATE
// of the request row that keeps (and renews) the lease: a write of the
// lease row, which a multi-primary cluster certifies against a takeover.
// A transaction that ended as a deadlock or certification victim changed
// nothing and is sent again, bounded. On SQLite, a step recorded while
// one of the run's fenced transactions is open (InTx, a tool call on
// another goroutine) goes into that transaction, as the heartbeat's
// renewals do: it counts only if the transaction commits. Rolled back,
// the step is written again with the next one; a crash before that runs
// it again on resume (steps are at-least-once).
func (run *Run) recordSteps(ctx context.Context, steps []stepRecord) error {
	b, err := json.Marshal(steps)
	if err != nil {
		return err
	}
	r := run.r
	for attempt := 1; ; attempt++ {
		var g lease.Grant[string]
		g, err = r.req.Transition(ctx, run.flowDB(), run.req, lease.ChangeOptions{
			From: []string{schema.StoredProcessing}, To: schema.StoredProcessing, Keep: true, TTL: r.cfg.TTL,
			Set: []lease.Assignment{lease.Set(schema.ColSteps, string(b))},
		})
		if err == nil && g.Generation != run.req.Generation {
			// Request tokens are fresh for every grant, so this cannot
			// happen; refuse to go on rather than trust a mismatch.
			err = &lease.LostError{Key: run.id, Op: "record step"}
		}
		if err == nil {
			return nil
		}
		if errors.Is(err, lease.ErrLost) {
			return fmt.Errorf("%w: recording step %d: %w", ErrTakenOver, len(steps)-1, err)
		}
		if !lease.IsTransient(err) || attempt == retry.MaxAttempts || !retry.Backoff(ctx, attempt) {
			return fmt.Errorf("request: recording step %d: %w", len(steps)-1, err)
		}
	}
}

// divergence returns the divergence that failed the run, or nil.
func (run *Run) divergence() error {
	run.stepMu.Lock()
	defer run.stepMu.Unlock()
	if run.diverged == nil {
		return nil
	}
	return run.diverged
}

// StepsReplayed reports how many recorded steps this run has replayed so
// far (returned without calling their functions).
func (run *Run) StepsReplayed() int {
	run.stepMu.Lock()
	defer run.stepMu.Unlock()
	return run.replayed
}

// StepsRecorded reports how many steps the request has recorded, by this
// run and the runs before it.
func (run *Run) StepsRecorded() int {
	run.stepMu.Lock()
	defer run.stepMu.Unlock()
	return len(run.steps)
}

// Step is the typed form of Run.Step: fn's value is marshalled to JSON
// when it is recorded, and the recorded JSON is unmarshalled into T on
// replay. A fresh run gets the value back through the same JSON, so a
// fresh run and a replay see the same T.
func Step[T any](ctx context.Context, run *Run, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if fn == nil {
		return zero, invalid("step function", "nil")
	}
	raw, err := run.Step(ctx, name, func(ctx context.Context) (json.RawMessage, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("request: step %q: marshalling its output: %w", name, err)
		}
		return b, nil
	})
	if err != nil {
		return zero, err
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return zero, fmt.Errorf("request: step %q: unmarshalling its recorded output: %w", name, err)
	}
	return v, nil
}

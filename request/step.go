package request

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/retry"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// StepDivergedError reports a divergent replay: a resumed run asked for a
// step under another name than the one its request recorded at that
// position, so the agent's code between steps did not replay
// deterministically. The run fails with it (the request is marked error);
// nothing recorded is handed to the wrong step. It is none of lease's
// kinds: the agent's bug, which a retry repeats.
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

// MaxStepNameLen bounds a step's name, in bytes.
const MaxStepNameLen = 128

// DefaultMaxStepOutput is Config.MaxStepOutput's default: 1 MiB.
const DefaultMaxStepOutput = 1 << 20

// StepTooLargeError reports a step's output larger than
// Config.MaxStepOutput; nothing was recorded. It is none of lease's
// kinds: the agent's output, not the client's input, so not ErrInvalid
// (a web handler answers 500).
type StepTooLargeError struct {
	Name  string // the step's name
	Size  int    // the output's size, in bytes
	Limit int    // Config.MaxStepOutput
}

// Error names the step, the size and the limit.
func (e *StepTooLargeError) Error() string {
	return fmt.Sprintf("request: step %q output is %d bytes, more than the limit of %d (Config.MaxStepOutput); nothing was recorded",
		e.Name, e.Size, e.Limit)
}

// stepRecord is one recorded step, as a row of the step table holds it
// (Output is kept only for the steps a run loaded, to replay them).
type stepRecord struct {
	Name   string
	Output json.RawMessage
}

// Step runs fn once per position of this request's run and records its
// output (JSON) as one row of the step table (Config.StepTable), fenced by
// the request lease (engine.ConfirmPut): a write that a stale run cannot
// make (it gets an error matching ErrTakenOver and lease.ErrLost, and its
// work context is cancelled on loss anyway). Recording a step costs the
// same whatever its position: one statement on PostgreSQL and SQLite, a
// transaction of two on MySQL (the confirmation of the request lease, a
// write of its row that a Galera cluster certifies, then the insert).
//
// When Step returns, the step is committed on its own: it never rides in
// another transaction of the run (InTx, a tool call on another
// goroutine), so the failure of one cannot undo it. On SQLite, where such
// a transaction holds the database's write lock, Step waits for it to end
// (the busy timeout): do not call Step from inside InTx's fn or a side
// effect.
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
// with an error matching lease.ErrInvalid, since positions would then depend on
// timing. A resumed run that asks for the step of a recorded position
// under another name gets a *StepDivergedError, and the
// run fails with it even if the agent goes on. (A resumed run that ends
// before asking for every recorded step is not refused: the steps it did
// not ask for are left unused.) fn's output must be valid JSON (nil
// records null) of at most Config.MaxStepOutput bytes (else a
// *StepTooLargeError, and nothing is recorded); it is
// returned as recorded. name must be non-empty UTF-8 of at most
// MaxStepNameLen bytes, and not begin with "await:" (the waits of Await
// are recorded under such names). fn's error is returned as it is, and
// nothing is recorded.
//
// A request that fails keeps the steps that its committed tool calls
// followed, and its resend asks again from there (see Runner.Handle): a
// model output the agent could not use is asked for again, a booking it
// made is not repeated.
func (run *Run) Step(ctx context.Context, name string, fn func(ctx context.Context) (json.RawMessage, error)) (json.RawMessage, error) {
	if name == "" || len(name) > MaxStepNameLen || !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
		return nil, invalid("step name", "empty, longer than 128 bytes, not UTF-8 or with a NUL byte")
	}
	if strings.HasPrefix(name, waitStepPrefix) {
		return nil, invalid("step name", "begins with "+waitStepPrefix+", which names the waits of Await")
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
	if len(out) > run.r.cfg.MaxStepOutput {
		return nil, &StepTooLargeError{Name: name, Size: len(out), Limit: run.r.cfg.MaxStepOutput}
	}
	if !json.Valid(out) {
		return nil, invalid("step output", "not valid JSON")
	}
	if err := run.stopped(); err != nil {
		return nil, err
	}
	// Only this Step changes steps and stepPos while stepBusy is set.
	if err := run.recordStep(ctx, pos, name, out); err != nil {
		return nil, err
	}
	run.stepMu.Lock()
	run.steps = append(run.steps, stepRecord{Name: name})
	run.stepPos++
	run.stepMu.Unlock()
	return append(json.RawMessage(nil), out...), nil
}

// recordStep writes the step at position pos: one row of the step table,
// through engine.ConfirmPut on the pool, never into a transaction of the
// flow (a rollback of that transaction would undo it after Step said it
// was stored). A write refused as a deadlock or certification victim, or
// on SQLite as busy, changed nothing and is sent again, bounded; a write
// whose outcome was unknown is made again as an upsert of the same row.
func (run *Run) recordStep(ctx context.Context, pos int, name string, out json.RawMessage) error {
	r := run.r
	row := engine.Row{Table: r.cfg.StepTable, Key: []string{schema.ColRequestID, schema.ColSeq},
		Columns: []string{schema.ColRequestID, schema.ColSeq, schema.ColName, schema.ColOutput, schema.ColGeneration},
		Values:  []any{run.id, pos, name, string(out), run.req.Generation}}
	for attempt := 1; ; attempt++ {
		err := engine.ConfirmPut(ctx, r.req, r.db, run.req, row)
		if err == nil {
			return nil
		}
		if errors.Is(err, lease.ErrLost) {
			return fmt.Errorf("%w: recording step %d: %w", ErrTakenOver, pos, err)
		}
		if !lease.IsTransient(err) || attempt == retry.MaxAttempts || !retry.Backoff(ctx, attempt) {
			return fmt.Errorf("request: recording step %d: %w", pos, err)
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

// stepsSoFar is how many steps the run has recorded or replayed: those
// that can have decided a tool call it makes now (a step still running
// has returned nothing yet).
func (run *Run) stepsSoFar() int {
	run.stepMu.Lock()
	defer run.stepMu.Unlock()
	return run.stepPos
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

// loadSteps reads the steps a request recorded, in order, inside the
// transaction that has just taken it over (its lease row is then locked
// by that transaction's write, and a stale run's step, fenced by that
// row, can no longer be added).
func (r *Runner) loadSteps(ctx context.Context, db lease.DB, id string) ([]stepRecord, error) {
	rows, err := db.QueryContext(ctx, r.sql.steps, id)
	if err != nil {
		return nil, fmt.Errorf("request: reading the recorded steps: %w", err)
	}
	defer rows.Close()
	var out []stepRecord
	for rows.Next() {
		var rec stepRecord
		var output string
		if err := rows.Scan(&rec.Name, &output); err != nil {
			return nil, fmt.Errorf("request: reading the recorded steps: %w", err)
		}
		rec.Output = json.RawMessage(output)
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("request: reading the recorded steps: %w", err)
	}
	return out, nil
}

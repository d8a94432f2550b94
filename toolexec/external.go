package toolexec

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// ErrNotPerformed, wrapped by an external effect's error (see NotPerformed),
// says the remote side did not perform the effect: the call is then marked
// error and can be retried, with the same effect key. It is none of
// lease's kinds: a definite answer of the remote side, which only the
// effect can give.
var ErrNotPerformed = errors.New("toolexec: effect not performed")

// NotPerformed marks err as a definite answer that the effect did not
// happen (a payment declined, a request refused with 4xx). An external
// effect that fails for any other reason — a timeout, a dropped connection,
// a cancelled context — leaves the outcome unknown.
func NotPerformed(err error) error {
	if err == nil {
		err = errors.New("not performed")
	}
	return notPerformed{err}
}

type notPerformed struct{ err error }

func (e notPerformed) Error() string        { return e.err.Error() }
func (e notPerformed) Unwrap() error        { return e.err }
func (e notPerformed) Is(target error) bool { return target == ErrNotPerformed }

// UnknownOutcomeError reports a call whose external effect may or may not
// have happened: an effect outside the database was announced for the
// call (its intent recorded with its effect key) and no result was ever
// recorded. The call is left started and free, and is never run again
// under another key. Reconcile it (see ExternalOptions). It is none of
// lease's kinds (502 in httpapi), and unwraps to the error that left it
// unknown (nil when an earlier run did).
type UnknownOutcomeError struct {
	Tool        string
	ExecutionID string
	// EffectKey is the key the effect was (or would have been) performed
	// under: ask the remote side about it, or act again with it.
	EffectKey  string
	Generation int64
	Err        error
}

// Error describes the call; it never contains a token.
func (e *UnknownOutcomeError) Error() string {
	s := fmt.Sprintf("tool %s: outcome of the external effect with key %s unknown", e.Tool, e.EffectKey)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the error that left the outcome unknown.
func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// Foreign makes it a engine.ForeignError: the error that left the outcome
// unknown is the external effect's (or its reconciler's), not the
// database's, even a refused or reset connection, so lease.IsUnavailable,
// and httpapi's 503, do not look below it.
func (e *UnknownOutcomeError) Foreign() {}

// External is what an external effect receives.
type External struct {
	// EffectKey identifies this tool execution's effect: the same across
	// retries, takeovers and restarts, and never reused for another call.
	// Send it as the remote side's idempotency key (an Idempotency-Key
	// header); it is the execution id, a UUID: derived from the call when
	// it carries a client request id (ExecutionID), so that it also
	// survives the loss of the call's row; random when it does not.
	EffectKey string
	// Generation is the tool execution's fencing generation, for remote
	// sides that fence with it (refuse a lower one).
	Generation int64
	// Fences are the generations of the other levels (session, request), by name.
	Fences map[string]int64
	// Call is the call, and Canonical its canonical arguments.
	Call      Call
	Canonical []byte
	// ExecutionID is the tool execution's row id.
	ExecutionID string
	// Again is true when this effect was announced before, by this flow or
	// one that died, without a recorded result: it may already have
	// happened under EffectKey.
	Again bool
}

// ExternalEffect performs a tool's effect outside the database with
// x.EffectKey, under ctx (cancelled when the run loses a lease), and
// returns the JSON result to record. An error wrapped with NotPerformed is
// recorded as the tool's failure; any other error leaves the outcome
// unknown.
type ExternalEffect func(ctx context.Context, x External) (json.RawMessage, error)

// Reconciler asks the remote side what became of an announced effect
// (x.EffectKey). It returns the result when the effect happened, an error
// matching ErrNotPerformed when it did not (the effect is then performed,
// with the same key), or another error when it cannot tell (the outcome
// stays unknown).
type Reconciler func(ctx context.Context, x External) (json.RawMessage, error)

// ExternalOptions say how a call is reconciled when its intent is found
// without a result (x.Again).
type ExternalOptions struct {
	// Reconcile, when set, is asked first.
	Reconcile Reconciler
	// Repeat performs the effect again with the same key when there is no
	// Reconcile: right for remote sides that honour idempotency keys, which
	// answer a repeated key with the first outcome instead of acting twice.
	Repeat bool
}

// ExecuteExternal runs a call whose effect happens outside the database, in
// three steps, each recorded on the tool execution's row:
//
//  1. the intent: processing → started, in a transaction fenced by o.Fences
//     (session, request), so nothing acts for a flow that lost its locks;
//  2. the act: fn, with no transaction open, with the stable effect key;
//  3. the result: started → success with fn's result, fenced like step 1
//     and token-checked on the tool row.
//
// A previous success returns its stored result without acting. A call
// found started (an intent without a result, left by this or a dead flow)
// is reconciled with eo: Reconcile, else Repeat, else *UnknownOutcomeError.
// A NotPerformed error marks the call error (*FailedError); any other error
// of fn leaves it started and returns *UnknownOutcomeError. A lost fence
// after the act leaves it started too, for the flow that owns the request
// now to reconcile.
func (s *Store) ExecuteExternal(ctx context.Context, db Beginner, call Call, o ExecOptions, eo ExternalOptions, fn ExternalEffect) (Result, error) {
	if fn == nil {
		return Result{}, &engine.ValidationError{Package: "toolexec", Field: "external effect", Reason: "nil"}
	}
	c, err := s.start(ctx, db, call, &o)
	if err != nil || c.res != nil {
		return c.result(err)
	}
	g, again, canonical := c.g, c.started, c.canonical
	unwatch := watch(o, g)
	defer unwatch()

	gens := generations(o.Fences)
	x := External{EffectKey: g.Key, Generation: g.Generation, Fences: gens, Call: call, Canonical: canonical, ExecutionID: g.Key, Again: again}

	if !again {
		// 1. The intent, before acting: fenced, and kept held.
		err := s.retryTransient(ctx, call.Tool, func() error {
			return s.runFenced(ctx, db, call.Tool, "intent", engine.FencedTx{Fences: o.Fences, Flow: o.Flow,
				Mark: func() []engine.JointOp {
					return []engine.JointOp{engine.TransitionOp(s.l, g, lease.ChangeOptions{
						From: []string{schema.StoredProcessing}, To: schema.StoredStarted, Keep: true, TTL: g.TTL,
					})}
				}}, func(*sql.Tx) error { return nil })
		})
		if err != nil {
			unwatch()
			return Result{}, s.giveBack(ctx, db, g, o, err)
		}
	}

	// 2. The act (or what the remote side says of an earlier one).
	out, err := s.act(ctx, x, eo, fn)
	if err != nil {
		unwatch()
		if errors.Is(err, ErrNotPerformed) {
			return Result{}, s.afterFailure(ctx, db, g, o, &FailedError{Tool: call.Tool, Err: err})
		}
		var ue *UnknownOutcomeError
		if !errors.As(err, &ue) {
			err = s.unknown(call, g, err)
		}
		return Result{}, s.giveBack(ctx, db, g, o, err)
	}
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	if !json.Valid(out) {
		unwatch()
		return Result{}, s.giveBack(ctx, db, g, o, s.unknown(call, g, errors.New("result is not valid JSON")))
	}

	// 3. The result: fenced and token-checked, like an in-transaction mark.
	// The effect happened, so a transient failure is retried harder.
	err = s.retryTransient(ctx, call.Tool, func() error {
		return s.runFenced(ctx, db, call.Tool, "result", engine.FencedTx{Fences: o.Fences, Flow: o.Flow,
			Mark: func() []engine.JointOp {
				unwatch()
				return []engine.JointOp{s.succeededOp(g, schema.StoredStarted, out)}
			}}, func(*sql.Tx) error { return nil })
	})
	unwatch()
	if err != nil {
		// The effect happened but is not recorded: the call stays started,
		// and whoever runs it next reconciles it.
		return Result{}, s.giveBack(ctx, db, g, o, err)
	}
	return Result{ExecutionID: g.Key, Output: out, Generation: g.Generation}, nil
}

// act performs the effect, or reconciles an earlier announcement of it.
func (s *Store) act(ctx context.Context, x External, eo ExternalOptions, fn ExternalEffect) (json.RawMessage, error) {
	if x.Again {
		switch {
		case eo.Reconcile != nil:
			out, err := eo.Reconcile(ctx, x)
			if err == nil {
				return out, nil
			}
			if !errors.Is(err, ErrNotPerformed) {
				return nil, &UnknownOutcomeError{Tool: x.Call.Tool, ExecutionID: x.ExecutionID, EffectKey: x.EffectKey, Generation: x.Generation,
					Err: fmt.Errorf("reconcile: %w", err)}
			}
			// Not performed: perform it now, under the same key.
		case eo.Repeat:
		default:
			return nil, &UnknownOutcomeError{Tool: x.Call.Tool, ExecutionID: x.ExecutionID, EffectKey: x.EffectKey, Generation: x.Generation}
		}
	}
	out, err := fn(ctx, x)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ErrNotPerformed) {
		err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
	}
	return out, err
}

func (s *Store) unknown(call Call, g Grant, err error) error {
	return &UnknownOutcomeError{Tool: call.Tool, ExecutionID: g.Key, EffectKey: g.Key, Generation: g.Generation, Err: err}
}

// giveBack releases the tool lease (bounded, even when ctx is done) and
// returns err: the row keeps its state for the next run.
func (s *Store) giveBack(ctx context.Context, db Beginner, g Grant, o ExecOptions, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.ReleaseTimeout)
	defer cancel()
	if rerr := s.l.Release(cctx, o.db(db), g); rerr != nil && !errors.Is(rerr, lease.ErrLost) {
		return errors.Join(err, releaseTimeout(o).Of(cctx, rerr))
	}
	return err
}

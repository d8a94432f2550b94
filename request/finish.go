package request

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// finish ends a run after its agent returned: it marks the request, by
// how the run ended, and frees the session, or gives the leases back and
// leaves the request to be resumed. ictx is the context the work ran
// under: its cause says whether the run was cancelled or interrupted.
func (r *Runner) finish(ctx, ictx context.Context, run *Run, ans Answer, aerr error) (Outcome, error) {
	if d := run.divergence(); aerr == nil && d != nil {
		aerr = d // the agent went on after a divergent replay
	}
	if aerr == nil && len(ans.Result) > 0 && !json.Valid(ans.Result) {
		// Stored, it would break every replay of the request.
		aerr = invalid("answer result", "not valid JSON")
	}
	base := Outcome{RequestID: run.id, Resumed: run.resumed, Attempt: run.req.Generation}

	if run.isAbandoned() {
		return base, fmt.Errorf("request: run abandoned: %w", context.Canceled)
	}
	if lost := run.sup.Lost(); lost != nil || errors.Is(aerr, lease.ErrLost) {
		if lost == nil {
			lost = aerr
		}
		// Give back whatever we may still hold; token-checked, so nothing
		// changes where someone else holds it now.
		r.releaseAll(ctx, run)
		if errors.Is(lost, lease.ErrPoolExhausted) {
			// The renewals found no free connection until the trust
			// deadline: the work was stopped, but nobody took it over.
			// The request stays processing and free, as after a takeover.
			return base, fmt.Errorf("request: run stopped, its heartbeat had no connection: %w", lost)
		}
		return base, fmt.Errorf("%w: %w", ErrTakenOver, lost)
	}
	if aerr != nil && ctx.Err() == nil && errors.Is(context.Cause(ictx), ErrCancelled) {
		// Its client cancelled it, and it stopped: it is cancelled,
		// token-checked, and frees the session, as an interrupt does.
		return base, r.markStopped(ctx, run, schema.StoredCancelled, ErrCancelled)
	}
	var ie *InterruptedError
	if aerr != nil && ctx.Err() == nil && errors.As(context.Cause(ictx), &ie) {
		// Another message asked this run to stop, and it stopped: it is
		// interrupted, token-checked, and frees the session. Its tool
		// calls that committed stay; it never runs again.
		return base, r.markStopped(ctx, run, schema.StoredInterrupted, ie)
	}
	if p := run.parkedAt(); p != nil {
		// The agent stopped at a wait (Await): the request waits for its
		// answer, with no lease held, whatever the agent returned.
		return r.park(ctx, run, p)
	}
	if aerr != nil && ctx.Err() != nil {
		// The caller gave up (shutdown, client gone) and the agent
		// stopped: leave the request processing but free, so a retry
		// resumes it. (An answer that came back is stored below, even if
		// the caller has gone meanwhile: a retry replays it instead of
		// paying for the model rounds again.)
		r.releaseAll(ctx, run)
		return base, context.Cause(ctx)
	}
	if aerr != nil {
		if err := r.trimSteps(ctx, run); err != nil {
			if errors.Is(err, lease.ErrLost) {
				r.releaseAll(ctx, run)
				return base, fmt.Errorf("%w: %w", ErrTakenOver, err)
			}
			// The request stays processing and free: a resend or the
			// service's resume runs it again, with every step.
			r.releaseAll(ctx, run)
			return base, errors.Join(fmt.Errorf("%w: %w", ErrAgentFailed, aerr), err)
		}
		set := []lease.Assignment{lease.Set(schema.ColError, schema.ErrorText(aerr.Error()))}
		err := r.mark(ctx, run, schema.StoredFailed, set)
		if errors.Is(err, ErrTakenOver) {
			return base, err
		}
		return base, errors.Join(fmt.Errorf("%w: %w", ErrAgentFailed, aerr), err)
	}
	set := []lease.Assignment{lease.Set(schema.ColReply, ans.Reply)}
	if len(ans.Result) > 0 {
		set = append(set, lease.Set(schema.ColResult, string(ans.Result)))
	}
	if err := r.mark(ctx, run, schema.StoredSucceeded, set); err != nil {
		return base, err
	}
	base.Reply, base.Result = ans.Reply, ans.Result
	return base, nil
}

// trimSteps deletes the steps that a resend of the failed run's request
// must not replay, before the request is marked error:
//
//   - after a divergent replay (taken from the run, whatever the agent's
//     error says), the steps from the diverged position on: the resend
//     replays those before it, which matched, instead of diverging again;
//   - otherwise, the steps after the last one that a tool call whose
//     effect may have happened (succeeded, or an external effect started)
//     followed (toolexec.Store.StepsBefore, over every run of the request):
//     a step that made the run fail (a model output the agent could not
//     use) is asked for again, and a step that decided a committed effect
//     is replayed, so the resend does not repeat the effect in another
//     form.
//
// The delete runs in a transaction fenced by the run's leases: a stale run
// deletes nothing (*lease.LostError). Nothing to delete sends nothing.
func (r *Runner) trimSteps(ctx context.Context, run *Run) error {
	run.stepMu.Lock()
	n, diverged := len(run.steps), run.diverged
	run.stepMu.Unlock()
	if n == 0 {
		return nil
	}
	cctx, cancel := r.detached(ctx)
	defer cancel()
	var keep int
	if diverged != nil {
		keep = diverged.Position
	} else {
		var err error
		if keep, err = r.tools.StepsBefore(cctx, r.db, run.msg.SessionKey, run.id); err != nil {
			return fmt.Errorf("request: reading which steps decided tool calls: %w", err)
		}
	}
	// A person's answer is kept whatever followed it: it is not asked
	// for again.
	run.stepMu.Lock()
	for i, rec := range run.steps[:min(n, len(run.steps))] {
		if strings.HasPrefix(rec.Name, waitStepPrefix) && i+1 > keep && (diverged == nil || i < diverged.Position) {
			keep = i + 1
		}
	}
	run.stepMu.Unlock()
	if keep >= n {
		return nil
	}
	err := engine.RunFenced(cctx, r.db, engine.FencedTx{Fences: run.Fences()}, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(cctx, r.sql.trimSteps, run.id, keep)
		return err
	})
	if err != nil {
		return fmt.Errorf("request: deleting the steps after step %d of a failed run: %w", keep, err)
	}
	return nil
}

// mark ends the run: it moves the request from processing to its final
// status to, with set, token-checked, and frees the session, both with a
// bounded context that survives the caller's cancellation. The two writes
// go as one statement on PostgreSQL (engine.Joint), each made or lost on
// its own as when sent alone, and one after the other elsewhere. The session
// is freed whatever the mark did; when the joint statement's outcome is
// unknown (a driver error), the release is sent again alone. A lost
// request lease gives an error matching ErrTakenOver (and lease.ErrLost);
// any other error of the mark is returned as it is.
func (r *Runner) mark(ctx context.Context, run *Run, to string, set []lease.Assignment) error {
	cctx, cancel := r.detached(ctx)
	defer cancel()
	if r.cfg.Dialect != lease.Postgres {
		// SQLite has no statement that writes two tables, and MariaDB's
		// multi-table UPDATE costs the server more than the two writes
		// alone (see lease.RunFenced): the request is marked first, so
		// that a resend never finds it processing with its session free,
		// then the session is freed.
		_, err := r.req.Transition(cctx, r.db, run.req, lease.ChangeOptions{From: []string{schema.StoredProcessing}, To: to, Set: set})
		r.releaseQuietly(ctx, func(c context.Context) error { return r.sessions.Release(c, r.db, run.sess) })
		return r.markTimeout().Of(cctx, takenOver(err))
	}
	// PostgreSQL: one statement, in lock order: the session first, as
	// everywhere.
	errs := engine.Joint(cctx, r.db,
		engine.ReleaseOp(r.sessions.Lease(), run.sess),
		engine.TransitionOp(r.req, run.req, lease.ChangeOptions{From: []string{schema.StoredProcessing}, To: to, Set: set}))
	if rerr := errs[0]; rerr != nil && !errors.Is(rerr, lease.ErrLost) {
		r.releaseQuietly(ctx, func(c context.Context) error { return r.sessions.Release(c, r.db, run.sess) })
	}
	return r.markTimeout().Of(cctx, takenOver(errs[1]))
}

// takenOver maps a lost request lease to ErrTakenOver (still matching
// lease.ErrLost); other errors are returned as they are.
func takenOver(err error) error {
	if errors.Is(err, lease.ErrLost) {
		return fmt.Errorf("%w: %w", ErrTakenOver, err)
	}
	return err
}

// markStopped marks the run's request as stopped on request (to:
// interrupted or cancelled) and frees its session (mark). It returns why
// (the interruption, or ErrCancelled), joined with the mark's error if the
// mark failed; ErrTakenOver if the lease was lost.
func (r *Runner) markStopped(ctx context.Context, run *Run, to string, why error) error {
	err := r.mark(ctx, run, to, nil)
	switch {
	case errors.Is(err, ErrTakenOver):
		return err
	case err != nil:
		return errors.Join(why, err)
	}
	return why
}

// releaseAll gives back the run's request and session leases, as
// releaseQuietly does: token-checked, so nothing changes where another
// run holds them now. The request stays as it is (processing: free for a
// retry or a dispatcher to resume).
func (r *Runner) releaseAll(ctx context.Context, run *Run) {
	r.releaseQuietly(ctx, func(c context.Context) error { return r.req.Release(c, r.db, run.req) })
	r.releaseQuietly(ctx, func(c context.Context) error { return r.sessions.Release(c, r.db, run.sess) })
}

// detached returns the context of a write that must run to its end even
// when ctx ends (the caller gave up, the run was stopped): ctx's values
// without its cancellation, bounded by Config.ReleaseTimeout.
func (r *Runner) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ReleaseTimeout)
}

// releaseQuietly runs a clean-up write with a bounded context that
// survives the caller's cancellation, and logs (never returns) a failure.
func (r *Runner) releaseQuietly(ctx context.Context, f func(context.Context) error) {
	cctx, cancel := r.detached(ctx)
	defer cancel()
	if err := f(cctx); err != nil && !errors.Is(err, lease.ErrLost) {
		r.log.Warn("rowlease: release failed; the lease will expire after its TTL", "err", err)
	}
}

package request

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/retry"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// continueQueue looks, in a goroutine of the Runner, for the next queued
// message of a session that a run of this process has just freed.
func (r *Runner) continueQueue(sessionKey string) {
	r.q.mu.Lock()
	if r.q.stopped {
		r.q.mu.Unlock()
		return
	}
	r.q.runs.Add(1)
	r.q.mu.Unlock()
	go func() {
		defer r.q.runs.Done()
		ctx, cancel := context.WithTimeout(r.q.life, r.cfg.ReleaseTimeout)
		defer cancel()
		run, err := r.claimHead(ctx, sessionKey)
		if err != nil {
			r.log.Warn("rowlease: starting the next queued message failed; the dispatcher will", "err", err)
			return
		}
		if run != nil {
			r.deliver(run)
		}
	}()
}

// kick starts the head of the session's queue if the session is free, in
// a bounded context that survives the caller's cancellation.
func (r *Runner) kick(ctx context.Context, sessionKey string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ReleaseTimeout)
	defer cancel()
	if err := r.tryStart(cctx, sessionKey); err != nil {
		r.log.Warn("rowlease: starting a queued message failed; the dispatcher will", "err", err)
	}
}

// tryStart starts the head of the session's queue if the session's lock
// is free: one read while it is held.
func (r *Runner) tryStart(ctx context.Context, sessionKey string) error {
	st, err := r.sessions.Inspect(ctx, r.db, sessionKey)
	if err != nil || st.Held {
		return err
	}
	run, err := r.claimHead(ctx, sessionKey)
	if err != nil || run == nil {
		return err
	}
	r.deliver(run)
	return nil
}

// queuedHead is the head of a session's queue, as headQ reads it.
type queuedHead struct {
	id, clientRequestID, fingerprint, content, status string
	generation                                        int64
	deaths                                            int64  // see deaths in resume.go
	agent                                             string // its agent's name, "" for the default
	metadata                                          string // its metadata, "" for none
}

// claimHead takes the session for the head of its queue and starts it:
// the session, then the request (queued → processing, or a dead run's
// request taken over), in one transaction, which also marks interrupted
// the dead runs that were asked to stop. It returns nil when there is
// nothing to start or the session is busy, and when the head's agent is
// not one this Runner has: the head is left alone (and reported once, see
// skipForAgent), and nothing behind it overtakes it; a Runner that has
// its agent starts it.
func (r *Runner) claimHead(ctx context.Context, sessionKey string) (*Run, error) {
	for attempt := 0; attempt < 5; attempt++ {
		var h queuedHead
		err := r.db.QueryRowContext(ctx, r.sql.head, sessionKey, sessionKey).Scan(&h.id, &h.clientRequestID, &h.fingerprint,
			&h.content, &h.status, &h.generation, &h.deaths, &h.agent, &h.metadata)
		if errors.Is(err, sql.ErrNoRows) {
			r.unhint(sessionKey)
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if r.agentOf(h.agent) == nil {
			r.skipForAgent(ctx, h.id, h.agent)
			return nil, nil
		}
		var slot *sync.Once
		if h.status == schema.StoredProcessing {
			// A dead run to resume: not after MaxAttempts runs, and not
			// more than MaxConcurrent at once in this Runner.
			if h.deaths >= int64(r.cfg.Resume.MaxAttempts) {
				if _, err := r.giveUp(ctx, h); err != nil {
					return nil, err
				}
				r.notify()
				continue
			}
			if !r.takeResumeSlot() {
				return nil, nil
			}
			slot = new(sync.Once)
		}
		run, err := r.claim(ctx, claim{kind: queueHead, id: h.id, holder: r.holder(), from: h.status, fromQueue: true,
			msg: Message{SessionKey: sessionKey, ClientRequestID: h.clientRequestID, Content: h.content, Fingerprint: h.fingerprint,
				Agent: h.agent, Metadata: rawOrNil(h.metadata)}})
		if slot != nil {
			if err != nil {
				r.giveResumeSlot()
			} else {
				run.slot = slot
			}
		}
		switch {
		case err == nil:
			r.notify()
			return run, nil
		case errors.Is(err, errAskedToStop):
			// Cancelled or interrupted after the head was read: it is
			// settled, not resumed; then the next head.
			if _, err := r.settleInterrupted(ctx, sessionKey, h.id); err != nil {
				return nil, err
			}
			r.notify()
			continue
		case errors.As(err, new(*session.BusyError)):
			return nil, nil
		case errors.As(err, new(*session.NotFoundError)):
			return nil, err
		case errors.Is(err, lease.ErrState), errors.Is(err, lease.ErrHeld), errors.Is(err, lease.ErrNotFound), engine.IsRetryable(err):
			continue // the head changed under us: read it again
		}
		return nil, err
	}
	return nil, nil
}

// deliver hands a claimed run to the Handle of this process that waits to
// run it (an interrupting message), or starts it with its agent (the one
// its Message.Agent names: Config.Agent or one of Config.Agents) in a
// goroutine of the Runner. After Close it gives the leases back instead:
// the request stays processing and free, and a dispatcher resumes it.
func (r *Runner) deliver(run *Run) {
	r.q.mu.Lock()
	if ch, ok := r.q.owners[run.id]; ok {
		// Handed over under the lock: a disown that finds the owner gone
		// then finds the run in the channel, and starts it. (Buffered, and
		// only one run is ever delivered per owner: it never blocks.)
		delete(r.q.owners, run.id)
		ch <- run
		r.q.mu.Unlock()
		if f := afterOwnerFound.Load(); f != nil {
			(*f)(run)
		}
		return
	}
	agent := r.agentOf(run.msg.Agent)
	if r.q.stopped || agent == nil {
		r.q.mu.Unlock()
		run.endResume()
		r.releaseAll(r.q.life, run)
		r.notify()
		return
	}
	r.q.runs.Add(1)
	r.q.mu.Unlock()
	go func() {
		defer r.q.runs.Done()
		_, _ = r.runAndContinue(r.q.life, run, agent)
	}()
}

// afterOwnerFound is nil but in tests, which set it to act (as a waiter
// that gives up, say) once deliver has chosen the waiting Handle and let
// go of the lock.
var afterOwnerFound atomic.Pointer[func(run *Run)]

// Start starts the Runner's background work: the dispatcher, which starts
// queued messages of sessions that no process of this service is running
// (the process that held the session crashed, or freed it without knowing
// of the queue) and resumes the runs whose process died, those of messages
// accepted at once included (see ResumeConfig), if Config.Agent or
// Config.Agents is set — only the requests whose agent it has (see
// Agents); and the retention sweeper, if
// Config.Retention.After is set. They stop when ctx is done or Close is
// called. A second Start returns an error; so does a Start after Close.
//
// Runs of queued messages started by a finishing run (a continuation)
// need no Start: they run in goroutines of the Runner from the first
// queued message on. Call Close before the program ends in either case.
func (r *Runner) Start(ctx context.Context) error {
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	switch {
	case r.q.stopped:
		return ErrClosed
	case r.q.started:
		return errors.New("request: runner already started")
	}
	r.q.started = true
	lctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.q.life, cancel)
	r.q.stopLoop = func() { stop(); cancel() }
	if r.dispatches() {
		r.q.loops.Add(1)
		go func() {
			defer r.q.loops.Done()
			r.loop(lctx, r.cfg.Queue.DispatchInterval, func(ctx context.Context) { r.dispatchOnce(ctx) })
		}()
	}
	if r.cfg.Retention.After > 0 {
		r.q.loops.Add(1)
		go func() {
			defer r.q.loops.Done()
			r.loop(lctx, r.cfg.Retention.Interval, func(ctx context.Context) {
				if _, err := r.Sweep(ctx, r.cfg.Retention.After); err != nil && ctx.Err() == nil {
					r.log.Warn("rowlease: sweeping expired requests failed; retrying at the next interval", "err", err)
				}
			})
		}()
	}
	return nil
}

// loop calls fn every interval (jittered) until ctx is done.
func (r *Runner) loop(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	for retry.Sleep(ctx, interval/2+retry.Jitter(interval)) {
		fn(ctx)
	}
}

// dispatchOnce reads up to DispatchBatch sessions that have a message to
// start whose agent the Runner has, or a run to settle, and no live run
// (one statement), going on from the last session of the previous poll;
// it settles the runs asked to stop whose process died (Cancel, an
// interrupt: they end cancelled or interrupted, one statement for each
// such session), and starts the head of each session whose lock is free
// or expired (one read for each that is held). A poll that reads fewer
// than DispatchBatch sessions has reached the last one: the next starts
// again from the first. On its first poll and every foreignEvery polls
// it also reads the requests that wait for an agent it does not have,
// and reports them (reportForeign: one statement). It returns how many
// it started.
func (r *Runner) dispatchOnce(ctx context.Context) int {
	r.q.mu.Lock()
	from := r.q.cursor
	r.q.mu.Unlock()
	r.reportForeign(ctx)
	own, args := r.ownAgents()
	rows, err := r.db.QueryContext(ctx, r.sql.candidates(own), append(append([]any{from}, args...), r.cfg.Queue.DispatchBatch)...)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("rowlease: reading the queue failed; retrying at the next interval", "err", err)
		}
		return 0
	}
	var keys []string
	stopped := map[string]bool{}
	for rows.Next() {
		var k string
		var settle int
		if err := rows.Scan(&k, &settle); err != nil {
			break
		}
		keys = append(keys, k)
		stopped[k] = settle == 1
	}
	_ = rows.Close()
	next := ""
	if len(keys) == r.cfg.Queue.DispatchBatch {
		next = keys[len(keys)-1]
	}
	r.q.mu.Lock()
	r.q.cursor = next
	r.q.mu.Unlock()
	started := 0
	for _, k := range keys {
		if ctx.Err() != nil {
			break
		}
		r.hint(k)
		if stopped[k] {
			// Asked to stop, and its process died before its heartbeat
			// read the flag: no run will mark it, and none may resume it.
			n, err := r.exec(ctx, r.sql.settle, k)
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("rowlease: settling a stopped run failed; retrying at the next interval", "err", err)
				}
				continue
			}
			if n > 0 {
				r.notify()
			}
		}
		st, err := r.sessions.Inspect(ctx, r.db, k)
		if err != nil || st.Held {
			continue
		}
		run, err := r.claimHead(ctx, k)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("rowlease: starting a queued message failed; retrying at the next interval", "err", err)
			}
			continue
		}
		if run != nil {
			r.deliver(run)
			started++
		}
	}
	return started
}

// stop stops the dispatcher and the sweeper at once, lets the runs that
// the Runner started from the queue finish until ctx is done, then
// cancels the rest and waits for them (see Close). It returns ctx's error
// when it had to cancel runs, and is safe to call twice.
func (r *Runner) stop(ctx context.Context) error {
	r.q.mu.Lock()
	r.q.stopped = true
	stopLoop := r.q.stopLoop
	r.q.mu.Unlock()
	if stopLoop != nil {
		stopLoop()
	}
	r.q.loops.Wait()
	done := make(chan struct{})
	go func() {
		r.q.runs.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		r.q.stopLife(ErrClosed)
		<-done
	}
	r.q.stopLife(ErrClosed)
	return err
}

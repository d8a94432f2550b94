package request

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rowlease/rowlease/internal/retry"
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
		run, empty, err := r.claimHead(ctx, sessionKey)
		if empty {
			r.unhint(sessionKey)
		}
		if err != nil {
			r.log.Warn("rowlease: starting the next queued message failed; the dispatcher will", "err", err)
			return
		}
		if run != nil {
			r.deliver(run)
		}
	}()
}

// onPlaced acts, for Handle, on where the queue put a new message of a
// busy session (p): the session is hinted, so that a run of this process
// that frees it looks for the next message; then a queued message is
// answered at once with its position, after one try to start the head of
// the queue (the session may have been freed between the busy answer and
// the insert, by a run that did not know of this message: kick), and an
// interrupting one waits until it can run (awaitOwn).
func (r *Runner) onPlaced(ctx context.Context, msg Message, p placement) (*Run, Outcome, error) {
	r.hint(msg.SessionKey)
	if p.policy == Queue {
		r.kick(ctx, msg.SessionKey)
		return nil, Outcome{RequestID: p.id, Queued: true, Position: p.position}, nil
	}
	defer r.disown(p.id, p.own)
	return r.awaitOwn(ctx, msg, p.id, p.position, p.own)
}

// kick starts the head of the session's queue if the session is free, in
// a bounded context that survives the caller's cancellation.
func (r *Runner) kick(ctx context.Context, sessionKey string) {
	cctx, cancel := r.detached(ctx)
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
	run, empty, err := r.claimHead(ctx, sessionKey)
	if empty {
		r.unhint(sessionKey)
	}
	if err != nil || run == nil {
		return err
	}
	r.deliver(run)
	return nil
}

// awaitOwn waits, for an interrupting Handle, until its queued message
// can start, and returns the claimed run (to execute with the caller's
// agent) — or, when another process started it, its final outcome. When
// ctx ends first, the message stays queued (and runs later) or running
// elsewhere, and the error matches ctx's cause.
func (r *Runner) awaitOwn(ctx context.Context, msg Message, id string, pos int, ch chan *Run) (*Run, Outcome, error) {
	delay := r.cfg.Queue.PollMin
	for {
		changed := r.changedChan()
		if err := r.tryStart(ctx, msg.SessionKey); err != nil && ctx.Err() == nil {
			r.log.Warn("rowlease: starting a queued message failed; retrying", "err", err)
		}
		select {
		case run := <-ch:
			return run, Outcome{}, nil
		default:
		}
		// Queued still, or started: by a run of this process that is about
		// to hand it over on ch, or elsewhere (then wait for its outcome).
		st, err := r.Status(ctx, msg.SessionKey, msg.ClientRequestID)
		if err == nil && st.State.Final() {
			out, err := st.Outcome()
			return nil, out, err
		}
		if err == nil && st.State == StateQueued {
			pos = st.Position
		}
		t := time.NewTimer(retry.Jitter(delay))
		select {
		case run := <-ch:
			t.Stop()
			return run, Outcome{}, nil
		case <-ctx.Done():
			t.Stop()
			if st.State == StateProcessing {
				return nil, Outcome{RequestID: id}, fmt.Errorf("%w: %w", ErrInFlight, context.Cause(ctx))
			}
			return nil, Outcome{RequestID: id, Queued: true, Position: pos},
				fmt.Errorf("request: still queued to interrupt the running message: %w", context.Cause(ctx))
		case <-changed:
			t.Stop()
		case <-t.C:
		}
		delay = min(delay*2, r.cfg.Queue.PollMax)
	}
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

// disown ends the registration; a run delivered just as the caller gave
// up is started as any other, not lost.
func (r *Runner) disown(id string, ch chan *Run) {
	r.q.mu.Lock()
	if r.q.owners[id] == ch {
		delete(r.q.owners, id)
	}
	r.q.mu.Unlock()
	select {
	case run := <-ch:
		r.deliver(run)
	default:
	}
}

// hint records that the session may have queued messages: a run of this
// process that frees it then looks for the next one.
func (r *Runner) hint(sessionKey string) {
	r.q.mu.Lock()
	if len(r.q.hints) >= maxHints {
		// Hints only save the dispatcher's delay; forget them rather than
		// grow without bound.
		clear(r.q.hints)
	}
	r.q.hints[sessionKey] = struct{}{}
	r.q.mu.Unlock()
}

// maxHints bounds the sessions a Runner remembers as having queued
// messages.
const maxHints = 10000

// unhint forgets the hint of a session found with nothing queued to start.
func (r *Runner) unhint(sessionKey string) {
	r.q.mu.Lock()
	delete(r.q.hints, sessionKey)
	r.q.mu.Unlock()
}

// hinted reports whether the session may have queued messages (hint).
func (r *Runner) hinted(sessionKey string) bool {
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	_, ok := r.q.hints[sessionKey]
	return ok
}

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
		run, empty, err := r.claimHead(ctx, k)
		if empty {
			r.unhint(k)
		}
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

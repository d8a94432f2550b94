package request

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/rowlease/rowlease/internal/retry"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// Policy says what Handle does with a new message whose session is busy
// running another one (Message.OnBusy).
type Policy int

// The busy-session policies.
const (
	// Reject answers ErrSessionBusy and changes nothing: the client
	// retries. The default.
	Reject Policy = iota
	// Queue stores the message as queued for its session and returns at
	// once (Outcome.Queued, with its position). Queued messages run in
	// arrival order, each once, started by the process that frees the
	// session or by any Runner's dispatcher (Start). Needs Config.Agent.
	Queue
	// Interrupt asks the running request of the session to stop (its
	// context is cancelled with a cause matching ErrInterrupted), queues
	// the message ahead of the plain queued ones, and waits until it has
	// run: Handle returns its outcome. Needs Config.Agent.
	Interrupt
)

// String returns "reject", "queue" or "interrupt".
func (p Policy) String() string {
	switch p {
	case Reject:
		return "reject"
	case Queue:
		return "queue"
	case Interrupt:
		return "interrupt"
	}
	return "Policy(" + strconv.Itoa(int(p)) + ")"
}

// ParsePolicy maps "reject", "queue" and "interrupt" (and "" to Reject);
// anything else is a *lease.ValidationError.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "", "reject":
		return Reject, nil
	case "queue":
		return Queue, nil
	case "interrupt":
		return Interrupt, nil
	}
	return Reject, invalid("on busy", fmt.Sprintf("%q is not reject, queue or interrupt", s))
}

// Errors of the queue, interrupts and retention. Test with errors.Is.
var (
	// ErrQueueFull: the session already has QueueConfig.Max messages
	// queued (429). Nothing was written. The concrete error is a
	// *QueueFullError.
	ErrQueueFull = errors.New("request: queue full")
	// ErrInterrupted: the request was interrupted by another message of
	// its session (409). Its committed tool calls stay; it never runs
	// again, and every resend of its id answers this. The concrete error
	// is an *InterruptedError; it is also the cause of the run's context.
	ErrInterrupted = errors.New("request: interrupted")
	// ErrExpired: the request finished longer ago than the retention and
	// its outcome was swept (410). It never runs again.
	ErrExpired = errors.New("request: expired")
	// ErrNotFound: no request has this (session, client request id)
	// (Status, Wait). It wraps, and so matches, lease.ErrNotFound.
	ErrNotFound = fmt.Errorf("request: not found: %w", lease.ErrNotFound)
	// ErrClosed is the cause with which Close cancels the runs that the
	// Runner started from the queue.
	ErrClosed = errors.New("request: runner closed")
)

// QueueFullError reports a full queue. It matches ErrQueueFull.
type QueueFullError struct {
	Max int // the limit, QueueConfig.Max
}

// Error describes the failure.
func (e *QueueFullError) Error() string {
	return fmt.Sprintf("request: queue full (%d messages already queued for the session)", e.Max)
}

// Is makes errors.Is(err, ErrQueueFull) true.
func (e *QueueFullError) Is(target error) bool { return target == ErrQueueFull }

// InterruptedError reports an interrupted request. It matches
// ErrInterrupted.
type InterruptedError struct {
	// By is the client request id of the message that interrupted it
	// ("" when it is not known).
	By string
}

// Error describes the interruption; it names the interrupting message's
// client request id, never a token.
func (e *InterruptedError) Error() string {
	if e.By == "" {
		return "request: interrupted by another message of the session"
	}
	return fmt.Sprintf("request: interrupted by message %q of the session", e.By)
}

// Is makes errors.Is(err, ErrInterrupted) true.
func (e *InterruptedError) Is(target error) bool { return target == ErrInterrupted }

// Defaults of QueueConfig.
const (
	DefaultQueueMax         = 20
	DefaultDispatchInterval = time.Second
	DefaultDispatchBatch    = 8
	DefaultPollMin          = 25 * time.Millisecond
	DefaultPollMax          = time.Second
)

// QueueConfig configures the queue, the dispatcher and the waits. The
// zero value means the defaults.
type QueueConfig struct {
	// Max is the most messages queued per session; a message beyond it is
	// refused with ErrQueueFull. 0 means DefaultQueueMax.
	Max int
	// DispatchInterval is the time between two polls of the dispatcher
	// that Start runs (jittered); 0 means DefaultDispatchInterval.
	DispatchInterval time.Duration
	// DispatchBatch bounds the sessions one poll looks at; 0 means
	// DefaultDispatchBatch. A poll sends at most 1 + DispatchBatch
	// statements while no session can be started.
	DispatchBatch int
	// PollMin and PollMax bound the polling of Wait and of an
	// interrupting Handle: the wait between two reads grows from PollMin
	// (doubling, jittered) to PollMax. A waiter sends at most one read
	// (two, for an interrupting Handle) per PollMin/2. 0 means
	// DefaultPollMin and DefaultPollMax. A request that finishes in the
	// waiter's own process wakes it at once.
	PollMin, PollMax time.Duration
}

func (c *QueueConfig) fill() error {
	if c.Max == 0 {
		c.Max = DefaultQueueMax
	}
	if c.DispatchInterval == 0 {
		c.DispatchInterval = DefaultDispatchInterval
	}
	if c.DispatchBatch == 0 {
		c.DispatchBatch = DefaultDispatchBatch
	}
	if c.PollMin == 0 {
		c.PollMin = DefaultPollMin
	}
	if c.PollMax == 0 {
		c.PollMax = max(DefaultPollMax, c.PollMin)
	}
	switch {
	case c.Max < 1 || c.Max > 10000:
		return invalid("queue max", "not between 1 and 10000")
	case c.DispatchInterval < time.Millisecond:
		return invalid("dispatch interval", "below 1ms")
	case c.DispatchBatch < 1 || c.DispatchBatch > 1000:
		return invalid("dispatch batch", "not between 1 and 1000")
	case c.PollMin < time.Millisecond:
		return invalid("poll min", "below 1ms")
	case c.PollMax < c.PollMin:
		return invalid("poll max", "below poll min")
	}
	return nil
}

// queueState is the Runner's part of the queue: its goroutines, what it
// knows of sessions with queued messages, the Handle calls of this
// process that wait to run a queued message themselves, and a signal for
// local waiters.
type queueState struct {
	mu      sync.Mutex
	started bool
	stopped bool
	// life is the context of the runs the Runner starts from the queue;
	// Close cancels it with ErrClosed.
	life     context.Context
	stopLife context.CancelCauseFunc
	runs     sync.WaitGroup // runs started from the queue, and continuations
	loops    sync.WaitGroup // dispatcher and sweeper
	stopLoop context.CancelFunc
	hints    map[string]struct{}  // sessions that may have queued messages
	owners   map[string]chan *Run // request id → its own Handle, waiting to run it
	changed  chan struct{}        // closed and replaced when a request of this process starts or ends
}

func (r *Runner) initQueue() {
	q := &r.q
	q.life, q.stopLife = context.WithCancelCause(context.Background())
	q.hints = map[string]struct{}{}
	q.owners = map[string]chan *Run{}
	q.changed = make(chan struct{})
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

func (r *Runner) unhint(sessionKey string) {
	r.q.mu.Lock()
	delete(r.q.hints, sessionKey)
	r.q.mu.Unlock()
}

func (r *Runner) hinted(sessionKey string) bool {
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	_, ok := r.q.hints[sessionKey]
	return ok
}

// changedChan returns a channel that is closed the next time a request of
// this process starts or ends.
func (r *Runner) changedChan() <-chan struct{} {
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	return r.q.changed
}

// notify wakes the local waiters.
func (r *Runner) notify() {
	r.q.mu.Lock()
	close(r.q.changed)
	r.q.changed = make(chan struct{})
	r.q.mu.Unlock()
}

// queuedHead is the head of a session's queue, as headQ reads it.
type queuedHead struct {
	id, clientRequestID, fingerprint, content, status string
	generation                                        int64
}

// enqueue stores msg as queued for its session, in one transaction: the
// queue's length is checked against Max and the message gets the next
// arrival number; with Interrupt, the processing requests of the session
// are asked to stop in the same transaction. It returns the new request's
// id and its position (the queued messages ahead of it).
func (r *Runner) enqueue(ctx context.Context, msg Message, id string) (position int, err error) {
	for attempt := 0; ; attempt++ {
		position, err = r.enqueueTx(ctx, msg, id)
		if err == nil || !(lease.IsDuplicateKey(err) || lease.IsRetryable(err)) || attempt == 20 {
			break
		}
		// Another message took the same arrival number, or a duplicate
		// of this one was inserted meanwhile: which?
		if _, ferr := r.find(ctx, msg); ferr == nil {
			return 0, errVanished
		}
	}
	if err != nil {
		return 0, err
	}
	r.hint(msg.SessionKey)
	return position, nil
}

func (r *Runner) enqueueTx(ctx context.Context, msg Message, id string) (position int, err error) {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var queued, interrupting int
	var last int64
	if err := tx.QueryRowContext(ctx, r.sql.stats, msg.SessionKey).Scan(&queued, &interrupting, &last); err != nil {
		return 0, err
	}
	if queued >= r.cfg.Queue.Max {
		return 0, &QueueFullError{Max: r.cfg.Queue.Max}
	}
	if _, err := tx.ExecContext(ctx, r.sql.insert, id, msg.SessionKey, msg.ClientRequestID, msg.Fingerprint,
		msg.Content, last+1, msg.OnBusy.String()); err != nil {
		return 0, err
	}
	position = queued
	if msg.OnBusy == Interrupt {
		position = interrupting
		if _, err := tx.ExecContext(ctx, r.sql.flag, msg.ClientRequestID, msg.SessionKey); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return position, nil
}

// ahead reports whether the session has messages that a new message with
// this policy must not overtake: any runnable one for Queue, an
// interrupting one (or a run to resume) for Interrupt. It runs inside the
// transaction that has just taken the session.
func (r *Runner) ahead(ctx context.Context, db lease.DB, msg Message) (bool, error) {
	q := r.sql.ahead
	if msg.OnBusy == Interrupt {
		q = r.sql.aheadInterrupt
	}
	var n int
	if err := db.QueryRowContext(ctx, q, msg.SessionKey).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

// errQueueAhead: the session was free but queued messages come first.
var errQueueAhead = errors.New("request: messages are queued ahead")

// busy handles a new message whose session is busy, under its policy.
func (r *Runner) busy(ctx context.Context, msg Message, busyErr error) (*Run, Outcome, error) {
	if r.cfg.Agent == nil {
		return nil, Outcome{}, busyErr
	}
	id := uuid.NewString()
	var own chan *Run
	if msg.OnBusy == Interrupt {
		// This call runs the message itself when it can start: say so
		// before it is queued, so that a run of this process that frees
		// the session hands it over instead of starting it elsewhere.
		own = r.own(id)
	}
	pos, err := r.enqueue(ctx, msg, id)
	if err != nil {
		if own != nil {
			r.disown(id, own)
		}
		return nil, Outcome{}, err
	}
	if msg.OnBusy == Queue {
		// The session may have been freed between the busy answer and the
		// insert, by a run that did not know of this message: start it.
		r.kick(ctx, msg.SessionKey)
		return nil, Outcome{RequestID: id, Queued: true, Position: pos}, nil
	}
	defer r.disown(id, own)
	return r.awaitOwn(ctx, msg, id, pos, own)
}

// own registers a Handle call of this process that waits to run the
// queued request id itself: deliver hands it the claimed run.
func (r *Runner) own(id string) chan *Run {
	ch := make(chan *Run, 1)
	r.q.mu.Lock()
	r.q.owners[id] = ch
	r.q.mu.Unlock()
	return ch
}

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

// claimHead takes the session for the head of its queue and starts it:
// the session, then the request (queued → processing, or a dead run's
// request taken over), in one transaction, which also marks interrupted
// the dead runs that were asked to stop. It returns nil when there is
// nothing to start or the session is busy.
func (r *Runner) claimHead(ctx context.Context, sessionKey string) (*Run, error) {
	for attempt := 0; attempt < 5; attempt++ {
		var h queuedHead
		err := r.db.QueryRowContext(ctx, r.sql.head, sessionKey, sessionKey).Scan(&h.id, &h.clientRequestID, &h.fingerprint, &h.content, &h.status, &h.generation)
		if errors.Is(err, sql.ErrNoRows) {
			r.unhint(sessionKey)
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var slot *sync.Once
		if h.status == schema.StoredProcessing {
			// A dead run to resume: not after MaxAttempts runs, and not
			// more than MaxConcurrent at once in this Runner.
			if h.generation >= int64(r.cfg.Resume.MaxAttempts) {
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
			msg: Message{SessionKey: sessionKey, ClientRequestID: h.clientRequestID, Content: h.content, Fingerprint: h.fingerprint}})
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
		case errors.Is(err, session.ErrBusy):
			return nil, nil
		case errors.Is(err, session.ErrNotFound):
			return nil, err
		case errors.Is(err, lease.ErrState), errors.Is(err, lease.ErrHeld), errors.Is(err, lease.ErrNotFound), lease.IsRetryable(err):
			continue // the head changed under us: read it again
		}
		return nil, err
	}
	return nil, nil
}

// deliver hands a claimed run to the Handle of this process that waits to
// run it (an interrupting message), or starts it with Config.Agent in a
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
	if r.q.stopped || r.cfg.Agent == nil {
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
		_, _ = r.runAndContinue(r.q.life, run, r.cfg.Agent)
	}()
}

// afterOwnerFound is nil but in tests, which set it to act (as a waiter
// that gives up, say) once deliver has chosen the waiting Handle and let
// go of the lock.
var afterOwnerFound atomic.Pointer[func(run *Run)]

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

// runAndContinue executes run and then, unless it was abandoned, wakes the
// local waiters and starts the session's next queued message if there may
// be one: the run came from the queue, was interrupted (its interrupter is
// queued), or this process knows of queued messages for the session.
func (r *Runner) runAndContinue(ctx context.Context, run *Run, agent Agent) (Outcome, error) {
	out, err := r.execute(ctx, run, agent)
	run.endResume()
	if run.abandoned != nil && run.isAbandoned() {
		return out, err
	}
	r.notify()
	if run.fromQueue || errors.Is(err, ErrInterrupted) || r.hinted(run.msg.SessionKey) {
		r.continueQueue(run.msg.SessionKey)
	}
	return out, err
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

// Start starts the Runner's background work: the dispatcher, which starts
// queued messages of sessions that no process of this service is running
// (the process that held the session crashed, or freed it without knowing
// of the queue) and resumes the runs whose process died, those of messages
// accepted at once included (see ResumeConfig), if Config.Agent is set;
// and the retention sweeper, if
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
	if r.cfg.Agent != nil {
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

// dispatchOnce reads the sessions with queued messages (one statement)
// and starts the head of each whose lock is free or expired (one read for
// each that is held). It returns how many it started.
func (r *Runner) dispatchOnce(ctx context.Context) int {
	rows, err := r.db.QueryContext(ctx, r.sql.candidates, r.cfg.Queue.DispatchBatch)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("rowlease: reading the queue failed; retrying at the next interval", "err", err)
		}
		return 0
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			break
		}
		keys = append(keys, k)
	}
	_ = rows.Close()
	started := 0
	for _, k := range keys {
		if ctx.Err() != nil {
			break
		}
		r.hint(k)
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

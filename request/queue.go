package request

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// Policy says what Handle does with a new message whose session is busy
// running another one (Message.OnBusy).
type Policy int

// The busy-session policies.
const (
	// Reject answers *session.BusyError and changes nothing: the client
	// retries. The default.
	Reject Policy = iota
	// Queue stores the message as queued for its session and returns at
	// once (Outcome.Queued, with its position). Queued messages run in
	// arrival order, each once, started by the process that frees the
	// session or by any Runner's dispatcher (Start), with the agent the
	// message names. Needs that agent: Config.Agent, or for a named one
	// Config.Agents.
	Queue
	// Interrupt asks the running request of the session to stop (its
	// context is cancelled with an *InterruptedError as its cause), queues
	// the message ahead of the plain queued ones, and waits until it has
	// run: Handle returns its outcome. Needs the message's agent, as
	// Queue does.
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
// anything else is an error matching lease.ErrInvalid.
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
	// ErrExpired: the request finished longer ago than the retention and
	// its outcome was swept (410). It never runs again. It is none of
	// lease's kinds: the request existed and is final, so neither
	// ErrNotFound nor a state to wait out.
	ErrExpired = errors.New("request: expired")
	// ErrClosed is the cause with which Close cancels the runs that the
	// Runner started from the queue: the caller's own shutdown, none of
	// lease's kinds.
	ErrClosed = errors.New("request: runner closed")
)

// QueueFullError reports a full queue: the session already has
// QueueConfig.Max messages queued (429). Nothing was written. It is none
// of lease's kinds: the session is not held by this message's lease, and a
// retry later may find room.
type QueueFullError struct {
	Max int // the limit, QueueConfig.Max
}

// Error describes the failure.
func (e *QueueFullError) Error() string {
	return fmt.Sprintf("request: queue full (%d messages already queued for the session)", e.Max)
}

// InterruptedError reports a request interrupted by another message of
// its session (409). Its committed tool calls stay; it never runs again,
// and every resend of its id answers this. It is also the cause of the
// run's context. It is none of lease's kinds: a final outcome of the
// request, not of a lease.
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
	// refused with *QueueFullError. 0 means DefaultQueueMax.
	Max int
	// DispatchInterval is the time between two polls of the dispatcher
	// that Start runs (jittered); 0 means DefaultDispatchInterval.
	DispatchInterval time.Duration
	// DispatchBatch bounds the sessions one poll looks at; 0 means
	// DefaultDispatchBatch. Sessions with a live run are not among them,
	// and the polls take the others in turn, DispatchBatch at a time. A
	// poll sends at most 1 + DispatchBatch statements while no session
	// can be started.
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
	cursor   string               // the dispatcher's next poll reads the sessions after this key
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

// notify wakes the local waiters.
func (r *Runner) notify() {
	r.q.mu.Lock()
	close(r.q.changed)
	r.q.changed = make(chan struct{})
	r.q.mu.Unlock()
}

// changedChan returns a channel that is closed the next time a request of
// this process starts or ends.
func (r *Runner) changedChan() <-chan struct{} {
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	return r.q.changed
}

// placement is what the queue did with a new message whose session was
// busy (onBusy), for Handle to act on (onPlaced, dispatch.go): the queue
// itself starts nothing and waits for nothing.
type placement struct {
	// policy is the message's OnBusy, Queue or Interrupt, once the queue
	// has stored it; Reject until then.
	policy Policy
	// id is the queued request's id, chosen once per Handle.
	id string
	// position is how many queued messages of the session run before it.
	position int
	// own is, for Interrupt, where a run of this process that starts the
	// message hands it to this Handle (own): registered before the message
	// is stored, and given up by Handle (disown).
	own chan *Run
}

// placed reports whether the queue stored the message.
func (p placement) placed() bool { return p.policy != Reject }

// onBusy places a new message whose session is busy, under its policy
// (Queue or Interrupt), into p: it stores it as queued (enqueue), an
// interrupting one ahead of the plain queued messages, with the session's
// processing requests asked to stop. An interrupting message's Handle
// runs it itself when it can start: onBusy says so before the message is
// stored (own), so that a run of this process that frees the session
// hands it over instead of starting it elsewhere. p keeps its id and that
// registration across begin's attempts.
func (r *Runner) onBusy(ctx context.Context, msg Message, p *placement) error {
	if p.id == "" {
		p.id = uuid.NewString()
		if msg.OnBusy == Interrupt {
			p.own = r.own(p.id)
		}
	}
	pos, err := r.enqueue(ctx, msg, p.id)
	if err != nil {
		return err
	}
	p.policy, p.position = msg.OnBusy, pos
	return nil
}

// enqueue stores msg as queued for its session, in one transaction: the
// queue's length is checked against Max and the message gets the next
// arrival number; with Interrupt, the processing requests of the session
// are asked to stop in the same transaction. It returns the new request's
// id and its position (the queued messages ahead of it).
func (r *Runner) enqueue(ctx context.Context, msg Message, id string) (position int, err error) {
	for attempt := 0; ; attempt++ {
		position, err = r.enqueueTx(ctx, msg, id)
		if err == nil || !(lease.IsDuplicateKey(err) || engine.IsRetryable(err)) || attempt == 20 {
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
		msg.Content, last+1, msg.OnBusy.String(), agentValue(msg.Agent), metadataValue(msg.Metadata)); err != nil {
		return 0, err
	}
	position = queued
	if msg.OnBusy == Interrupt {
		position = interrupting
		if _, err := tx.ExecContext(ctx, r.sql.flag, msg.ClientRequestID, msg.SessionKey); err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, r.sql.stopWaits, msg.ClientRequestID, msg.SessionKey); err != nil {
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
		// An interrupting message ends the session's open question: a
		// request waiting for an answer is interrupted, and this message
		// runs in its place.
		if _, err := db.ExecContext(ctx, r.sql.stopWaits, msg.ClientRequestID, msg.SessionKey); err != nil {
			return false, err
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, q, msg.SessionKey).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

// errQueueAhead: the session was free but queued messages come first.
var errQueueAhead = errors.New("request: messages are queued ahead")

// own registers a Handle call of this process that waits to run the
// queued request id itself: deliver hands it the claimed run, and disown
// ends the registration (dispatch.go).
func (r *Runner) own(id string) chan *Run {
	ch := make(chan *Run, 1)
	r.q.mu.Lock()
	r.q.owners[id] = ch
	r.q.mu.Unlock()
	return ch
}

package request

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/crash"
	"github.com/rowlease/rowlease/internal/retry"
	"github.com/rowlease/rowlease/internal/valid"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// Errors a web handler maps to a status code. Test with errors.Is.
var (
	// ErrSessionBusy: the session is running another request (409, "session
	// busy"). Also matches session.ErrBusy and lease.ErrHeld.
	ErrSessionBusy = errors.New("request: session busy")
	// ErrInFlight: the same request is running elsewhere (409, "request in
	// flight"). Also matches lease.ErrHeld.
	ErrInFlight = errors.New("request: request in flight")
	// ErrTakenOver: this run lost its lease while running (409, "taken
	// over"); its work context was cancelled and it wrote nothing more.
	// Also matches lease.ErrLost.
	ErrTakenOver = errors.New("request: taken over")
	// ErrFingerprintMismatch: the client request id was used before with
	// different content (422). Nothing was changed.
	ErrFingerprintMismatch = errors.New("request: client request id reused with different content")
	// ErrAgentFailed: the agent function returned an error. The request is
	// marked error and can be retried with the same client request id.
	ErrAgentFailed = errors.New("request: agent failed")
)

// Columns returns the request table's lease columns: a copy, so that no
// package can change what New uses.
func Columns() lease.Columns {
	return lease.Columns{
		Key: schema.ColID, Holder: schema.ColHolder, Token: schema.ColToken, ExpiresAt: schema.ColExpiresAt,
		Generation: schema.ColGeneration, State: schema.ColStatus, UpdatedAt: schema.ColUpdatedAt,
	}
}

// Beginner is a database that can begin transactions: *sql.DB or *sqlx.DB.
type Beginner = toolexec.Beginner

// Config configures a Runner. DB is required; the rest have defaults.
type Config struct {
	DB Beginner
	// Dialect; zero means detect it from DB.
	Dialect lease.Dialect
	// TTL of every lease of a flow; default 30s.
	TTL time.Duration
	// HeartbeatInterval between renewals; default TTL/3. It must be at most TTL/3.
	HeartbeatInterval time.Duration
	// SeparateHeartbeats makes every run renew its own leases, one
	// statement per lease per interval. By default the Runner's runs share
	// one heartbeat.Batcher: every interval, one statement per table
	// renews the leases of every run in flight (1,000 runs: a few
	// statements instead of 2,000), each run still losing its work context
	// on its own when one of its leases is lost.
	SeparateHeartbeats bool
	// ReleaseTimeout bounds the final writes and releases, which run even
	// when the caller's context is already cancelled; default 5s.
	ReleaseTimeout time.Duration
	// HolderPrefix names this process in holder columns; default host:pid.
	HolderPrefix string
	// Session configures the session lock (table, column mapping). Its
	// Dialect and Lease fields are filled in from this Config.
	Session session.Config
	// RequireSession keeps a missing session row an error on the shipped
	// session table: a message for a session key without a row gets
	// session.ErrNotFound (404) and nothing is written, for a service that
	// creates its sessions itself (Sessions().Create) and wants any other
	// key refused. Without it, on the shipped table (Session.Table empty),
	// a new session's first message creates its row, as if
	// Session.AutoCreate were set. On a session table of your own
	// (Session.Table set) only Session.AutoCreate creates rows.
	RequireSession bool
	// RequestTable is the request table; empty means schema.RequestTable.
	// It has the shipped table's columns (schema), under any valid name
	// (optionally schema-qualified, see lease.NewTable).
	RequestTable string
	// ToolExecutionTable is the tool-execution table; empty means
	// schema.ToolExecutionTable. Like RequestTable, only its name may
	// differ from the shipped one.
	ToolExecutionTable string
	// Tools are the tools a run may call; nil means none.
	Tools *toolexec.Registry
	// Lease options (safety margin, clock) for every level. The heartbeat
	// reads the same clock as the leases' trust deadlines (Lease.Clock).
	// On a MariaDB Galera pool whose connections reach several nodes, set
	// Lease.MultiPrimary: it also makes the Runner's own lookup of a
	// request causal (see lease.Options.MultiPrimary).
	Lease lease.Options
	// Logger; nil means slog.Default(). Tokens are never logged.
	Logger *slog.Logger
	// Observer, when set, receives a span per Handle with children for the
	// lease operations, the model rounds the agent reports (Run.ModelRound),
	// the tool calls and their fenced transactions; and the heartbeat's
	// retries and losses as events. It is also used for every level's
	// lease operations (it overrides Lease.Observer). Nil costs nothing.
	// See package contrib/otel for OpenTelemetry.
	Observer lease.Observer
	// Agent runs the messages that this Runner starts from the queue (a
	// continuation or the dispatcher: see Start), and the messages of
	// Handle calls whose agent is nil. The Queue and Interrupt policies
	// need it: a queued message may be started by any process of the
	// service, so every Runner of the service must be given the same
	// work here.
	Agent Agent
	// Queue configures the queue, the dispatcher and the waits.
	Queue QueueConfig
	// Retention configures the sweeper that Start runs.
	Retention RetentionConfig
	// Resume bounds how a Started Runner with an Agent resumes the runs
	// whose process died, those of messages accepted at once included
	// (see ResumeConfig and the package documentation, "Resume").
	Resume ResumeConfig
}

// Runner runs messages through the three-level lock. It is safe for
// concurrent use.
type Runner struct {
	cfg      Config
	db       Beginner
	sessions *session.Locker
	req      *lease.Lease[string]
	tools    *toolexec.Store
	log      *slog.Logger
	sql      statements
	q        queueState
	batcher  *heartbeat.Batcher // nil with Config.SeparateHeartbeats
	watch    watching           // runs whose interrupts the batcher's rounds read
	local    localRuns          // runs executing here, for Cancel
	resumes  resumeSlots        // resumed runs at once, for ResumeConfig.MaxConcurrent
}

// New validates cfg and returns a Runner.
func New(cfg Config) (*Runner, error) {
	if cfg.DB == nil {
		return nil, invalid("db", "nil")
	}
	if cfg.Dialect == 0 {
		d, err := lease.DetectDialect(cfg.DB)
		if err != nil {
			return nil, err
		}
		cfg.Dialect = d
	}
	if cfg.TTL == 0 {
		cfg.TTL = 30 * time.Second
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = cfg.TTL / 3
	}
	if cfg.ReleaseTimeout <= 0 {
		cfg.ReleaseTimeout = 5 * time.Second
	}
	if cfg.HolderPrefix == "" {
		host, _ := os.Hostname()
		cfg.HolderPrefix = host + ":" + strconv.Itoa(os.Getpid())
	}
	if len(cfg.HolderPrefix) > 120 {
		return nil, invalid("holder prefix", "longer than 120 bytes")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Observer != nil {
		cfg.Lease.Observer = cfg.Observer
	}
	if err := cfg.Queue.fill(); err != nil {
		return nil, err
	}
	if err := cfg.Retention.fill(); err != nil {
		return nil, err
	}
	if err := cfg.Resume.fill(cfg.TTL); err != nil {
		return nil, err
	}
	// Validate TTL and interval once, as the heartbeat will.
	if err := (heartbeat.Config{Interval: cfg.HeartbeatInterval, TTL: cfg.TTL}).Validate(); err != nil {
		return nil, err
	}
	// The shipped session table holds nothing but the lock: its row is
	// created with a session's first message unless the service asks
	// otherwise. A table of the user's own keeps its rows to the user.
	if cfg.Session.Table == "" && !cfg.RequireSession {
		cfg.Session.AutoCreate = true
	}
	sc := cfg.Session
	sc.Dialect, sc.Lease = cfg.Dialect, cfg.Lease
	sessions, err := session.New(sc)
	if err != nil {
		return nil, err
	}
	if cfg.RequestTable == "" {
		cfg.RequestTable = schema.RequestTable
	}
	reqTable, err := lease.NewTable(cfg.RequestTable, Columns())
	if err != nil {
		return nil, err
	}
	req, err := lease.New[string](cfg.Dialect, reqTable, cfg.Lease)
	if err != nil {
		return nil, err
	}
	tools, err := toolexec.New(toolexec.Config{Dialect: cfg.Dialect, Table: cfg.ToolExecutionTable, Lease: cfg.Lease})
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, db: cfg.DB, sessions: sessions, req: req, tools: tools, log: cfg.Logger}
	if !cfg.SeparateHeartbeats {
		if r.batcher, err = heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: cfg.HeartbeatInterval, Clock: cfg.Lease.Clock, Logger: cfg.Logger,
			AfterRound: r.checkInterrupts}); err != nil {
			return nil, err
		}
	}
	r.sql = r.newStatements(reqTable)
	r.initQueue()
	return r, nil
}

// Sessions returns the session locker (to create sessions, inspect them).
func (r *Runner) Sessions() *session.Locker { return r.sessions }

// Message is one user message.
type Message struct {
	SessionKey      string
	ClientRequestID string // the client's idempotency key for this message
	Content         string
	// Fingerprint identifies the content; empty means the hex SHA-256 of
	// Content. The same ClientRequestID with another fingerprint is
	// ErrFingerprintMismatch.
	Fingerprint string
	// OnBusy says what to do when the session is busy with another
	// message: Reject (the default), Queue or Interrupt.
	OnBusy Policy
}

// Answer is what an agent returns.
type Answer struct {
	Reply string
	// Result is optional JSON stored with the reply (e.g. result ids). If
	// it is not valid JSON, nothing is stored: the request is marked error
	// and Handle returns an error matching ErrAgentFailed and
	// lease.ErrInvalid (a *lease.ValidationError).
	Result json.RawMessage
}

// Outcome is what Handle returns. It encodes to JSON with snake_case
// names; it holds no token.
type Outcome struct {
	RequestID string          `json:"request_id"`
	Reply     string          `json:"reply"`
	Result    json.RawMessage `json:"result,omitempty"`
	Replayed  bool            `json:"replayed"` // a stored success, returned without running anything or taking any lock
	Resumed   bool            `json:"resumed"`  // this run took the request over from a failed or crashed run
	Attempt   int64           `json:"attempt"`  // the request's generation: 1 for the first run
	// Queued: the message was stored to run when its session is free
	// (Queue policy, or a resend of a queued message); nothing ran yet,
	// Reply is empty. Wait returns its outcome.
	Queued bool `json:"queued,omitempty"`
	// Position is, when Queued, the number of queued messages of the
	// session that run before it (0: it runs next).
	Position int `json:"position,omitempty"`
}

// ToolRecord is a tool call of this request that already succeeded (in an
// earlier run that crashed or failed).
type ToolRecord struct {
	ExecutionID   string
	Tool          string
	ArgumentsHash string
	Result        json.RawMessage
}

// Agent is the caller's work: model rounds and tool calls. ctx dies as
// soon as any lease of the flow is lost (cause matches lease.ErrLost), or
// another message of the session interrupts it (cause matches
// ErrInterrupted).
type Agent func(ctx context.Context, run *Run) (Answer, error)

func validate(m *Message) error {
	// One text rule for keys and ids on every dialect (lease.CheckText):
	// no NUL, no trailing space (MySQL's PAD SPACE collations would make
	// "abc" and "abc " one id), valid UTF-8, bounded.
	if err := valid.Text("request", "session key", m.SessionKey, schema.MaxSessionKeyLen); err != nil {
		return err
	}
	if err := valid.Text("request", "client request id", m.ClientRequestID, schema.MaxClientRequestIDLen); err != nil {
		return err
	}
	switch {
	case !utf8.ValidString(m.Content):
		return invalid("content", "not UTF-8")
	case strings.IndexByte(m.Content, 0) >= 0:
		// A queued message's content is stored, and PostgreSQL's text
		// cannot hold a NUL: refused on every dialect alike.
		return invalid("content", "contains a NUL byte")
	case m.OnBusy < Reject || m.OnBusy > Interrupt:
		return invalid("on busy", "not Reject, Queue or Interrupt")
	}
	if m.Fingerprint == "" {
		sum := sha256.Sum256([]byte(m.Content))
		m.Fingerprint = hex.EncodeToString(sum[:])
	} else if len(m.Fingerprint) > 64 {
		return invalid("fingerprint", "longer than 64 bytes")
	}
	return nil
}

type existing struct {
	id, fingerprint, status, reply, result string
	generation                             int64
	interruptedBy                          string // who asked it to stop, or ""
	queued                                 int    // 1: it came through the queue
}

// Handle runs one message through the whole flow:
//
//  1. read the request (one SELECT);
//  2. a stored success is replayed, taking no lock; another fingerprint
//     is ErrFingerprintMismatch; a live run is ErrInFlight; a queued
//     message answers its position (Outcome.Queued), an interrupted one
//     ErrInterrupted, a swept one ErrExpired;
//  3. take the session, then the request — a new one inserted, an
//     existing one taken over — in one transaction, so they succeed or
//     fail together; a busy session is ErrSessionBusy, or, as
//     msg.OnBusy says, the message is queued (Queue: Handle returns at
//     once) or interrupts the running one (Interrupt: Handle waits to
//     run it);
//  4. on a takeover, read the tool calls that already committed;
//  5. run agent under a heartbeat, with a context that dies on lease loss
//     or on an interrupt;
//  6. mark success (storing the reply), error or interrupted,
//     token-checked;
//  7. release the session, with a bounded timeout even if ctx is done,
//     and start the session's next queued message if there may be one.
//
// A nil agent means Config.Agent.
func (r *Runner) Handle(ctx context.Context, msg Message, agent Agent) (out Outcome, err error) {
	if obs := r.cfg.Observer; obs != nil {
		var end func(error, ...lease.Attr)
		ctx, end = obs.Start(ctx, lease.Span{Name: SpanHandle, Attrs: []lease.Attr{{Key: AttrSession, Value: msg.SessionKey}}})
		defer func() { end(err, handleEnd(out, err)...) }()
	}
	if agent == nil {
		agent = r.cfg.Agent
	}
	if agent == nil {
		return Outcome{}, invalid("agent", "nil, and Config.Agent is nil")
	}
	if err := validate(&msg); err != nil {
		return Outcome{}, err
	}
	if msg.OnBusy != Reject && r.cfg.Agent == nil {
		return Outcome{}, invalid("on busy", msg.OnBusy.String()+" needs Config.Agent")
	}
	run, out, err := r.begin(ctx, msg)
	if err != nil || run == nil {
		return out, err
	}
	return r.runAndContinue(ctx, run, agent)
}

func (r *Runner) holder() string { return r.cfg.HolderPrefix + "/" + uuid.NewString()[:13] }

// begin takes the locks, or returns a replayed outcome.
func (r *Runner) begin(ctx context.Context, msg Message) (*Run, Outcome, error) {
	holder := r.holder()
	// A request read as missing may be inserted by a duplicate a moment
	// later, and one read as existing may change state before it is taken;
	// and MySQL or PostgreSQL may roll a transaction back to break a
	// deadlock. Either way nothing was changed: start again.
	var last error // the last attempt's error, kept as the cause
	for attempt := 0; attempt < 5; attempt++ {
		run, out, err := r.beginOnce(ctx, msg, holder)
		if errors.Is(err, errVanished) {
			last = nil
			continue
		}
		if lease.IsRetryable(err) && retry.Backoff(ctx, attempt+1) {
			last = err
			continue // a jittered pause: a certification failure repeats at once on Galera
		}
		return run, out, err
	}
	if last != nil {
		// A database that keeps refusing (a deadlock each time, SQLite busy
		// with no busy timeout) is told apart from a request that kept
		// changing state: errors.Is matches both ErrInFlight and the cause.
		return nil, Outcome{}, fmt.Errorf("%w: the database kept refusing the locks: %w", ErrInFlight, last)
	}
	return nil, Outcome{}, fmt.Errorf("%w: the request kept changing state", ErrInFlight)
}

// errVanished: the request row appeared, was deleted, or changed state,
// between two statements of beginOnce; begin tries again.
var errVanished = errors.New("request: row changed under us")

func (r *Runner) beginOnce(ctx context.Context, msg Message, holder string) (*Run, Outcome, error) {
	ex, err := r.find(ctx, msg)
	if errors.Is(err, sql.ErrNoRows) {
		run, err := r.create(ctx, msg, holder)
		switch {
		case err == nil:
			return run, Outcome{}, nil
		case errors.Is(err, lease.ErrExists):
			return nil, Outcome{}, errVanished // a duplicate inserted it meanwhile: read it
		case errors.Is(err, ErrSessionBusy):
			// Busy with this very message, sent a moment ago by a
			// duplicate? Then the answer is about the request.
			ex, ferr := r.find(ctx, msg)
			if ferr == nil {
				return r.resume(ctx, msg, ex, holder)
			}
			if !errors.Is(ferr, sql.ErrNoRows) {
				return nil, Outcome{}, ferr
			}
			if msg.OnBusy != Reject {
				return r.busy(ctx, msg, err)
			}
		}
		return nil, Outcome{}, err
	}
	if err != nil {
		return nil, Outcome{}, err
	}
	return r.resume(ctx, msg, ex, holder)
}

// resume deals with a request that exists: replay, conflict or takeover.
func (r *Runner) resume(ctx context.Context, msg Message, ex existing, holder string) (*Run, Outcome, error) {
	if ex.fingerprint != msg.Fingerprint {
		return nil, Outcome{}, ErrFingerprintMismatch
	}
	switch ex.status {
	case schema.StoredSucceeded:
		return nil, Outcome{RequestID: ex.id, Reply: ex.reply, Result: rawOrNil(ex.result), Replayed: true, Attempt: ex.generation}, nil
	case schema.StoredExpired:
		return nil, Outcome{RequestID: ex.id, Attempt: ex.generation}, ErrExpired
	case schema.StoredInterrupted:
		return nil, Outcome{RequestID: ex.id, Attempt: ex.generation}, &InterruptedError{By: ex.interruptedBy}
	case schema.StoredCancelled:
		return nil, Outcome{RequestID: ex.id, Attempt: ex.generation}, ErrCancelled
	case schema.StoredQueued:
		st, err := r.Status(ctx, msg.SessionKey, msg.ClientRequestID)
		if errors.Is(err, ErrNotFound) {
			return nil, Outcome{}, errVanished
		}
		if err != nil {
			return nil, Outcome{}, err
		}
		if st.State != StateQueued {
			return nil, Outcome{}, errVanished
		}
		return nil, Outcome{RequestID: ex.id, Queued: true, Position: st.Position}, nil
	}
	if ex.status == schema.StoredProcessing {
		// Running now, or left by a run that died? The database clock
		// says; a live run is in flight, and nothing is taken.
		st, err := r.req.Inspect(ctx, r.db, ex.id)
		if errors.Is(err, lease.ErrNotFound) {
			return nil, Outcome{}, errVanished
		}
		if err != nil {
			return nil, Outcome{}, err
		}
		if st.Held {
			return nil, Outcome{}, fmt.Errorf("%w: %w", ErrInFlight,
				&lease.ConflictError{Key: ex.id, Holder: st.Holder, Generation: st.Generation, Remaining: st.Remaining})
		}
		if ex.interruptedBy != "" {
			// Asked to stop, and its run is gone: it is interrupted, and
			// never runs again.
			ok, err := r.settleInterrupted(ctx, msg.SessionKey, ex.id)
			if err != nil {
				return nil, Outcome{}, err
			}
			if !ok {
				return nil, Outcome{}, errVanished
			}
			r.notify()
			if ex.interruptedBy == msg.ClientRequestID {
				return nil, Outcome{RequestID: ex.id, Attempt: ex.generation}, ErrCancelled
			}
			return nil, Outcome{RequestID: ex.id, Attempt: ex.generation}, &InterruptedError{By: ex.interruptedBy}
		}
	}
	run, err := r.claim(ctx, claim{kind: resend, msg: msg, id: ex.id, holder: holder, from: ex.status, fromQueue: ex.queued == 1})
	switch {
	case errors.Is(err, session.ErrNotFound):
		// The session row is gone: that is final, and the same answer
		// as on the new-request path (it also matches lease.ErrNotFound,
		// so it is told apart first).
		return nil, Outcome{}, err
	case errors.Is(err, lease.ErrState) || errors.Is(err, lease.ErrNotFound):
		return nil, Outcome{}, errVanished // it finished, failed or went away under us
	}
	return run, Outcome{}, err
}

// create starts a new request (claim, newRequest). A session without a
// lock row gets one first when Config.Session.AutoCreate is set: inserted
// on its own, outside the claim's transaction, and the claim made again.
func (r *Runner) create(ctx context.Context, msg Message, holder string) (*Run, error) {
	c := claim{kind: newRequest, msg: msg, id: uuid.NewString(), holder: holder}
	run, err := r.claim(ctx, c)
	if errors.Is(err, session.ErrNotFound) && r.cfg.Session.AutoCreate {
		if err := r.sessions.Create(ctx, r.db, msg.SessionKey); err != nil {
			return nil, err
		}
		run, err = r.claim(ctx, c)
		// On a multi-primary cluster the transaction may run on a node
		// that has not applied the insert yet (inside a transaction
		// wsrep_sync_wait does not wait): try again, briefly.
		for attempt := 1; errors.Is(err, session.ErrNotFound) && r.cfg.Lease.MultiPrimary &&
			attempt < retry.MaxAttempts && retry.Backoff(ctx, attempt); attempt++ {
			run, err = r.claim(ctx, c)
		}
	}
	return run, err
}

// claimKind is the path that takes a request.
type claimKind int

const (
	// newRequest: a new message; its request is inserted, born held by
	// the run.
	newRequest claimKind = iota
	// resend: a resend of a failed request, or of one whose run died (its
	// lease expired or given back): the request is taken over.
	resend
	// queueHead: the head of a session's queue: a queued message started
	// (queued → processing), or the dead run of a message that came
	// through the queue (or was accepted at once) taken over.
	queueHead
)

// claim is what claim needs to take one request.
type claim struct {
	kind   claimKind
	msg    Message // for queueHead, as it was stored
	id     string  // the request's id: the session's holder
	holder string  // this run, in the request's holder column
	// from is the request's stored status (resend, queueHead): the claim
	// takes it only in that status. A dead or failed run's request
	// (processing, error) is taken over with its tool calls and steps.
	from string
	// fromQueue: the request came through the queue (see Run.fromQueue).
	fromQueue bool
}

// claim takes the session and then the request, in one transaction: the
// one lock order, and both or neither. Every path that runs a request
// comes through it (claimKind). A busy session is an error matching
// ErrSessionBusy (and session.ErrBusy); a request held by a live run, one
// matching ErrInFlight (and lease.ErrHeld); either way the transaction
// rolls back and nothing was written, so no session is left held by a
// request that does not exist.
//
// Inside the transaction, after the session:
//   - a new Queue or Interrupt message counts the messages it must not
//     overtake (ahead): if there are any, the session counts as busy;
//   - a queue head first marks interrupted (or cancelled) the dead runs of
//     the session that were asked to stop;
//   - a takeover (from processing or error) frees the leases of the
//     request's tool executions still marked running — a dead run's tool
//     lease can outlive its request lease, and freed, this run claims the
//     same call at once and the old run can mark none of them — and reads
//     the tool calls that committed (Run.Prior) and the recorded steps.
//
// When the commit's outcome is unknown (the connection dropped, or ctx was
// cancelled, with the reply on the wire) whatever took effect is given
// back at once, token-checked, so no lock is left held for a TTL with no
// heartbeat: the session first (its release waits for a commit still in
// progress to end, so the request's undo then sees the row), then a new
// request is deleted and a taken one released (it stays processing and
// free, and a retry resumes it).
func (r *Runner) claim(ctx context.Context, c claim) (run *Run, err error) {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	key := c.msg.SessionKey
	var sg session.Grant
	if c.kind == resend {
		// Acquire: with Session.AutoCreate it creates a missing lock
		// row inside this transaction. A new message creates it outside
		// (create), and a queue head does not create it.
		sg, err = r.sessions.Acquire(ctx, tx, key, c.id, r.cfg.TTL)
	} else {
		sg, err = r.sessions.AcquireExisting(ctx, tx, key, c.id, r.cfg.TTL)
	}
	switch {
	case err != nil:
	case c.kind == newRequest && c.msg.OnBusy != Reject:
		// The session is free, but messages queued before this one (or,
		// for Interrupt, interrupting ones) go first.
		var ahead bool
		if ahead, err = r.ahead(ctx, tx, c.msg); err == nil && ahead {
			err = fmt.Errorf("%w: %w", session.ErrBusy, errQueueAhead)
		}
	case c.kind == queueHead:
		_, err = tx.ExecContext(ctx, r.sql.settle, key)
	}
	if err != nil {
		if errors.Is(err, session.ErrBusy) {
			return nil, fmt.Errorf("%w: %w", ErrSessionBusy, err)
		}
		return nil, err
	}
	var g lease.Grant[string]
	if c.kind == newRequest {
		g, err = r.req.Create(ctx, tx, c.id, c.holder, r.cfg.TTL, lease.CreateOptions{State: schema.StoredProcessing, Set: []lease.Assignment{
			lease.Set(schema.ColSessionKey, key), lease.Set(schema.ColClientRequestID, c.msg.ClientRequestID),
			lease.Set(schema.ColFingerprint, c.msg.Fingerprint),
			// The content, so that the service can resume the run if it
			// dies and its client never resends (see resume.go).
			lease.Set(schema.ColContent, c.msg.Content),
		}})
	} else {
		opts := lease.AcquireOptions{InStates: []string{c.from}, SetState: schema.StoredProcessing}
		if c.from == schema.StoredFailed {
			opts.Set = []lease.Assignment{lease.Set(schema.ColError, nil)}
		}
		g, err = r.req.AcquireWith(ctx, tx, c.id, c.holder, r.cfg.TTL, opts)
		if errors.Is(err, lease.ErrHeld) {
			err = fmt.Errorf("%w: %w", ErrInFlight, err)
		}
	}
	if err != nil {
		return nil, err
	}
	run = &Run{r: r, msg: c.msg, id: c.id, holder: c.holder, sess: sg, req: g, fromQueue: c.fromQueue}
	if c.kind != newRequest && c.from != schema.StoredQueued {
		if _, err := r.tools.ReleaseForRequest(ctx, tx, key, c.id); err != nil {
			return nil, err
		}
		if run.prior, err = r.prior(ctx, tx, key, c.id); err != nil {
			return nil, err
		}
		if run.steps, err = r.loadSteps(ctx, tx, c.id); err != nil {
			return nil, err
		}
		run.resumed = true
	}
	if err := tx.Commit(); err != nil {
		r.releaseQuietly(ctx, func(c context.Context) error { return r.sessions.Release(c, r.db, sg) })
		if c.kind == newRequest {
			r.releaseQuietly(ctx, func(c context.Context) error { return r.req.Delete(c, r.db, g) })
		} else {
			r.releaseQuietly(ctx, func(c context.Context) error { return r.req.Release(c, r.db, g) })
		}
		return nil, err
	}
	return run, nil
}

func (r *Runner) find(ctx context.Context, msg Message) (existing, error) {
	var ex existing
	err := r.db.QueryRowContext(ctx, r.sql.find, msg.SessionKey, msg.ClientRequestID).
		Scan(&ex.id, &ex.fingerprint, &ex.status, &ex.reply, &ex.result, &ex.generation, &ex.interruptedBy, &ex.queued)
	if err != nil {
		return ex, fmt.Errorf("request: reading the existing request: %w", err)
	}
	return ex, nil
}

// prior reads the request's tool calls that committed (through toolexec,
// which owns their table).
func (r *Runner) prior(ctx context.Context, db lease.DB, sessionKey, requestID string) ([]ToolRecord, error) {
	recs, err := r.tools.Succeeded(ctx, db, sessionKey, requestID)
	if err != nil || recs == nil {
		return nil, err
	}
	out := make([]ToolRecord, len(recs))
	for i, rec := range recs {
		out[i] = ToolRecord(rec)
	}
	return out, nil
}

func rawOrNil(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// releaseQuietly runs a clean-up write with a bounded context that
// survives the caller's cancellation, and logs (never returns) a failure.
func (r *Runner) releaseQuietly(ctx context.Context, f func(context.Context) error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ReleaseTimeout)
	defer cancel()
	if err := f(cctx); err != nil && !errors.Is(err, lease.ErrLost) {
		r.log.Warn("rowlease: release failed; the lease will expire after its TTL", "err", err)
	}
}

// Run is one run of a request, handed to the Agent.
type Run struct {
	r       *Runner
	msg     Message
	id      string
	holder  string
	sess    session.Grant
	req     lease.Grant[string]
	resumed bool
	prior   []ToolRecord
	sup     *heartbeat.Supervisor
	// fromQueue: the request came through the queue; when it ends, the
	// session's next queued message is started.
	fromQueue bool
	// work is the agent's context, set before the agent is called: once
	// it is done, CallTool and InTx refuse to write.
	work context.Context

	flowOnce sync.Once
	flow     *lease.FlowDB // the heartbeat's database; see flowDB

	abandoned   chan struct{}
	abandonOnce sync.Once

	// Steps (step.go): the request's recorded steps, the position of the
	// next one, how many were replayed, and the divergence that failed
	// the run.
	stepMu   sync.Mutex
	stepBusy bool // a step's function is running
	steps    []stepRecord
	stepPos  int
	replayed int
	diverged *StepDivergedError
	// slot: the run holds one of the Runner's resume slots (resume.go).
	slot *sync.Once
}

// RequestID is the request's id (the session lock's holder).
func (run *Run) RequestID() string { return run.id }

// SessionKey is the session's key.
func (run *Run) SessionKey() string { return run.msg.SessionKey }

// ClientRequestID is the client's id of the message.
func (run *Run) ClientRequestID() string { return run.msg.ClientRequestID }

// Content is the message.
func (run *Run) Content() string { return run.msg.Content }

// Resumed reports whether this run took over a failed or crashed run.
func (run *Run) Resumed() bool { return run.resumed }

// Prior lists tool calls of this request that committed in earlier runs.
func (run *Run) Prior() []ToolRecord { return append([]ToolRecord(nil), run.prior...) }

// Generations are the fencing generations of the session and the request.
func (run *Run) Generations() (sessionGen, requestGen int64) {
	return run.sess.Generation, run.req.Generation
}

// Fences check, inside a transaction, that the session and the request
// are still held by this run (see lease.Fence). CallTool uses them.
func (run *Run) Fences() []lease.Fence {
	return []lease.Fence{run.r.sessions.Fence(run.sess), run.r.req.Fence("request", run.req)}
}

// InTx runs fn in a transaction that ends by checking the run's fences, so
// fn's writes commit only if this run still holds its session and request
// (see lease.RunFenced). Use it for the flow's own writes that are not
// tool calls, such as storing the conversation. The lease rows are locked
// only for the end of the transaction, so a long fn does not hold up the
// heartbeat; on SQLite the heartbeat renews inside the transaction.
//
// fn may run more than once: a transaction that ended as a deadlock,
// serialization or (on Galera) certification victim committed nothing, and
// is run again from the start, fences included, a few times (the back-off
// of internal/retry, MaxAttempts runs in all) with a jittered pause; after
// the last, the database's error is returned (lease.IsTransient reports
// it).
func (run *Run) InTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	if obs := run.r.cfg.Observer; obs != nil {
		var end func(error, ...lease.Attr)
		ctx, end = obs.Start(ctx, lease.Span{Name: lease.SpanFencedTx, Attrs: []lease.Attr{{Key: "rowlease.phase", Value: "flow"}}})
		defer func() { end(err, lease.Attr{Key: lease.AttrVerdict, Value: lease.VerdictOf(err, lease.VerdictOK)}) }()
	}
	if err := run.stopped(); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err = lease.RunFenced(ctx, run.r.db, lease.FencedTx{Fences: run.Fences(), Flow: run.flowDB()}, fn)
		if err == nil || !lease.IsTransient(err) || attempt == retry.MaxAttempts || !retry.Backoff(ctx, attempt) {
			return err
		}
	}
}

// flowDB is the database the run's heartbeat renews through (see
// lease.FlowDB).
func (run *Run) flowDB() *lease.FlowDB {
	run.flowOnce.Do(func() { run.flow = lease.NewFlowDB(run.r.db, run.r.cfg.Dialect) })
	return run.flow
}

// CallTool runs a registered tool through toolexec: a previous success of
// the same call (same request, tool and canonical arguments) is returned
// without running it again. A tool registered with Register writes its
// side effect in one transaction with the fences of the session, the
// request and the tool; one registered with RegisterExternal records its
// intent, acts outside the database with a stable effect key, and records
// the result (see toolexec.Store.ExecuteExternal). A tool's own failure is a
// *toolexec.FailedError (give its text to the model); an external effect
// whose outcome is unknown is a *toolexec.UnknownOutcomeError; an unknown
// tool is an error matching toolexec.ErrUnknownTool. ctx (with its values)
// is passed on to the effect.
func (run *Run) CallTool(ctx context.Context, tool string, args json.RawMessage) (res toolexec.Result, err error) {
	if obs := run.r.cfg.Observer; obs != nil {
		kind := "tx"
		if run.r.cfg.Tools.External(tool) {
			kind = "external"
		}
		var end func(error, ...lease.Attr)
		ctx, end = obs.Start(ctx, lease.Span{Name: lease.SpanTool, Attrs: []lease.Attr{
			{Key: lease.AttrTool, Value: tool}, {Key: lease.AttrToolKind, Value: kind}, {Key: AttrRequest, Value: run.id}}})
		defer func() { end(err, toolEnd(res, err)...) }()
	}
	if err := run.stopped(); err != nil {
		return toolexec.Result{}, err
	}
	flow := run.flowDB()
	// One renewer per call: a run of the side effect after a transient
	// error is watched again from the tool lease's last renewal.
	var ren *heartbeat.LeaseRenewer[string]
	return run.r.tools.Call(ctx, run.r.db, run.r.cfg.Tools, toolexec.Call{
		SessionKey: run.msg.SessionKey, RequestID: run.id, Tool: tool, Arguments: args,
	}, toolexec.ExecOptions{
		Holder: run.holder, TTL: run.r.cfg.TTL, Fences: run.Fences(), ReleaseTimeout: run.r.cfg.ReleaseTimeout, Flow: flow,
		Watch: func(g toolexec.Grant) func() {
			if run.sup == nil {
				return func() {}
			}
			if ren == nil || ren.Grant().Token != g.Token || ren.Grant().Generation != g.Generation {
				ren = heartbeat.ForLease("tool:"+tool, run.r.tools.Lease(), flow, g)
			}
			return run.sup.Add(ren)
		},
	})
}

// stopped returns an *InterruptedError once another message has
// interrupted the run, so that an agent that carries on with another
// context writes nothing more: its leases are still valid until it marks
// itself interrupted, so the fences alone would let the write through. (A
// run that lost a lease is refused by the fences.)
func (run *Run) stopped() error {
	var ie *InterruptedError
	if run.work != nil && errors.As(context.Cause(run.work), &ie) {
		return ie
	}
	if run.work != nil && errors.Is(context.Cause(run.work), ErrCancelled) {
		return ErrCancelled
	}
	return nil
}

func init() { crash.Abandon = func(run any) { run.(*Run).abandon() } }

// abandon stops the heartbeat and makes Handle return without writing or
// releasing anything, as if the process had crashed: the leases expire
// after their TTL and another run takes the request over. It is for crash
// tests (rowleasetest.Crash). The agent should return soon after.
func (run *Run) abandon() {
	run.abandonOnce.Do(func() { close(run.abandoned) })
	if run.sup != nil {
		run.sup.Stop()
	}
}

func (run *Run) isAbandoned() bool {
	select {
	case <-run.abandoned:
		return true
	default:
		return false
	}
}

// execute runs the agent under supervision and finishes the request.
func (r *Runner) execute(ctx context.Context, run *Run, agent Agent) (Outcome, error) {
	run.abandoned = make(chan struct{})
	hc := heartbeat.Config{Interval: r.cfg.HeartbeatInterval, TTL: r.cfg.TTL, Clock: r.cfg.Lease.Clock, Logger: r.log, Batcher: r.batcher}
	if r.cfg.Observer != nil {
		hc.OnEvent = heartbeatEvent(ctx, r.cfg.Observer)
	}
	sup, err := heartbeat.New(hc)
	if err != nil {
		r.releaseAll(ctx, run)
		return Outcome{}, err
	}
	// The request's renewals also read whether another message asked the
	// run to stop: then ictx, and with it the work context, is cancelled
	// with an *InterruptedError.
	ictx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	// An interrupt asked by the run's own client is a cancel (cancel.go).
	interrupt := func(cause error) { stop(run.stopCause(cause)) }
	defer r.addLocal(run.id, stop)()
	sup.Add(heartbeat.ForLease("session", r.sessions.Lease(), run.flowDB(), run.sess))
	if r.batcher != nil {
		// Batched: the request lease is renewed with every run's, and one
		// read per round finds the runs asked to stop (checkInterrupts).
		sup.Add(heartbeat.ForLease("request", r.req, run.flowDB(), run.req))
		defer r.watchInterrupts(run.id, interrupt)()
	} else {
		sup.Add(&interruptWatch{LeaseRenewer: heartbeat.ForLease("request", r.req, run.flowDB(), run.req),
			r: r, run: run, cancel: interrupt})
	}
	work, err := sup.Start(ictx)
	if err != nil {
		r.releaseAll(ctx, run)
		return Outcome{}, err
	}
	run.sup, run.work = sup, work
	ans, aerr := runAgent(work, run, agent)
	sup.Stop()
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
	if lost := sup.Lost(); lost != nil || errors.Is(aerr, lease.ErrLost) {
		if lost == nil {
			lost = aerr
		}
		// Give back whatever we may still hold; token-checked, so nothing
		// changes where someone else holds it now.
		r.releaseAll(ctx, run)
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
		set := []lease.Assignment{lease.Set(schema.ColError, schema.ErrorText(aerr.Error()))}
		if errors.Is(aerr, ErrStepDiverged) {
			// A resend starts the steps afresh instead of diverging again
			// (the committed tool calls still count: same call, same result).
			set = append(set, lease.Set(schema.ColSteps, nil))
		}
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

// runAgent calls the agent and turns a panic into an error, so the locks
// are still released.
func runAgent(ctx context.Context, run *Run, agent Agent) (ans Answer, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("request: agent panicked: %v", p)
		}
	}()
	return agent(ctx, run)
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

// mark ends the run: it moves the request from processing to its final
// status to, with set, token-checked, and frees the session, both with a
// bounded context that survives the caller's cancellation. The session
// is freed whatever the mark did. A lost request lease gives an error
// matching ErrTakenOver (and lease.ErrLost); any other error of the mark
// is returned as it is.
func (r *Runner) mark(ctx context.Context, run *Run, to string, set []lease.Assignment) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ReleaseTimeout)
	defer cancel()
	_, err := r.req.Transition(cctx, r.db, run.req, lease.ChangeOptions{
		From: []string{schema.StoredProcessing}, To: to, Set: set,
	})
	r.releaseQuietly(ctx, func(c context.Context) error { return r.sessions.Release(c, r.db, run.sess) })
	if errors.Is(err, lease.ErrLost) {
		return fmt.Errorf("%w: %w", ErrTakenOver, err)
	}
	return err
}

func (r *Runner) releaseAll(ctx context.Context, run *Run) {
	r.releaseQuietly(ctx, func(c context.Context) error { return r.req.Release(c, r.db, run.req) })
	r.releaseQuietly(ctx, func(c context.Context) error { return r.sessions.Release(c, r.db, run.sess) })
}

// Close shuts the Runner down; it is its one shutdown. It stops the
// dispatcher and the sweeper at once, lets the runs that the Runner started
// from the queue finish until ctx is done, then cancels the rest (their
// context's cause is ErrClosed: they give their leases back, and their
// requests stay processing and free, to be resumed by a dispatcher of any
// process) and waits for them; then it closes the prepared statements of
// its session, request and tool-execution leases (see lease.Lease.Close).
// It returns an error matching ctx's error when it had to cancel runs.
//
// Close is safe to call while messages are being handled, without Start,
// and more than once. After Close the Runner starts no queued message
// itself, but still runs Handle calls (a run in progress finishes),
// sending its statements as text. Close the Runner before the database it
// was given.
func (r *Runner) Close(ctx context.Context) error {
	stopErr := r.stop(ctx)
	if stopErr != nil {
		stopErr = fmt.Errorf("request: close: queued runs cancelled (they resume on the next start): %w", stopErr)
	}
	return errors.Join(stopErr, r.sessions.Close(), r.req.Close(), r.tools.Close())
}

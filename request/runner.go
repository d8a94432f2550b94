package request

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/valid"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// Errors a web handler maps to a status code. Test with errors.Is. Each
// is an outcome of a request that none of lease's kinds names.
var (
	// ErrInFlight: the same request is running elsewhere (409, "request in
	// flight"). Also matches lease.ErrHeld when a live lease is in the
	// way. Kept beside that kind: this very message's reply is coming
	// (wait for it), which a busy session's is not.
	ErrInFlight = errors.New("request: request in flight")
	// ErrTakenOver: this run lost its lease while running (409, "taken
	// over"); its work context was cancelled and it wrote nothing more.
	// Also matches lease.ErrLost. Kept beside that kind: the message is
	// another run's now, and a resend gets that run's reply.
	ErrTakenOver = errors.New("request: taken over")
	// ErrFingerprintMismatch: the client request id was used before with
	// different content (422). Nothing was changed. None of lease's
	// kinds: the request exists, for another message.
	ErrFingerprintMismatch = errors.New("request: client request id reused with different content")
	// ErrAgentFailed: the agent function returned an error. The request is
	// marked error and can be retried with the same client request id.
	// None of lease's kinds: it wraps the agent's own error.
	ErrAgentFailed = errors.New("request: agent failed")
)

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
	//
	// The Batcher renews on a connection of DB that it keeps
	// (heartbeat.BatchConfig.Pool; DB must have a Conn method, as *sql.DB
	// and *sqlx.DB have): taken before the first run's agent starts, given
	// back by Close. A run's tool or InTx holds one connection for its
	// whole transaction, and the renewals then never wait behind them. So
	// DB needs, besides the heartbeat's one, a connection per run doing
	// database work at once (README, "Sizing the pool"); a pool that is
	// short makes the work wait for a connection, not the heartbeat. With
	// SeparateHeartbeats, each renewal takes a connection of DB when it
	// runs, and one that finds none free before its lease's trust deadline
	// loses the run: Handle then returns an error matching
	// lease.ErrPoolExhausted (503 in httpapi), not ErrTakenOver.
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
	// *session.NotFoundError (404) and nothing is written, for a service that
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
	// StepTable is the table of recorded steps (Run.Step); empty means
	// schema.StepTable. Like RequestTable, only its name may differ from
	// the shipped one.
	StepTable string
	// MaxStepOutput bounds one step's output, in bytes; 0 means
	// DefaultMaxStepOutput (1 MiB), at most 64 MiB. A larger output is
	// refused with a *StepTooLargeError and nothing is recorded. On MySQL
	// keep it below the server's max_allowed_packet.
	MaxStepOutput int
	// MaxMetadata bounds a message's Metadata, in bytes; 0 means
	// DefaultMaxMetadata (64 KiB), at most 16 MiB. Larger metadata is
	// refused with a *MetadataTooLargeError before any SQL.
	MaxMetadata int
	// Tools are the tools a run may call; nil means none.
	Tools *toolexec.Registry
	// Lease options (safety margin, clock) for every level. The heartbeat
	// reads the same clock as the leases' trust deadlines (Lease.Clock).
	// On a MariaDB Galera pool whose connections reach several nodes, set
	// Lease.MultiPrimary: it also makes the Runner's own reads of a
	// request causal — a resend's lookup, and Answer's reads of the wait
	// and of its recorded answer (see lease.Options.MultiPrimary).
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
	// Agent is the default agent: it runs the messages that name no agent
	// (Message.Agent empty) when this Runner starts them from the queue (a
	// continuation or the dispatcher: see Start) or resumes them, and the
	// messages of Handle calls whose agent is nil. The Queue and Interrupt
	// policies need the message's agent: a queued message may be started
	// by any process of the service, so every Runner that has a default
	// agent must be given the same work here. A Runner without it leaves
	// the unnamed messages to Runners that have one.
	Agent Agent
	// Agents are the named agents (see Agents): a message names its agent
	// (Message.Agent), the name is stored with its request, and this
	// Runner starts from the queue, and resumes, only the requests whose
	// agent it has — one registered here, or Config.Agent for an unnamed
	// one. The others are left to the Runners that have them
	// (SkippedForAgent counts them). nil means none.
	Agents *Agents
	// Queue configures the queue, the dispatcher and the waits.
	Queue QueueConfig
	// Retention configures the sweeper that Start runs.
	Retention RetentionConfig
	// Resume bounds how a Started Runner with an Agent resumes the runs
	// whose process died, those of messages accepted at once included
	// (see ResumeConfig and the package documentation, "Resume").
	Resume ResumeConfig
}

// Columns returns the request table's lease columns: a copy, so that no
// package can change what New uses.
func Columns() lease.Columns {
	return lease.Columns{
		Key: schema.ColID, Holder: schema.ColHolder, Token: schema.ColToken, ExpiresAt: schema.ColExpiresAt,
		Generation: schema.ColGeneration, State: schema.ColStatus, UpdatedAt: schema.ColUpdatedAt,
	}
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
	findStmt *keptStmt // sql.find, kept prepared where lease.Options.Prepare says
	q        queueState
	batcher  *heartbeat.Batcher // nil with Config.SeparateHeartbeats
	watch    watching           // runs whose interrupts the batcher's rounds read
	local    localRuns          // runs executing here, for Cancel
	resumes  resumeSlots        // resumed runs at once, for ResumeConfig.MaxConcurrent
	skips    agentSkips         // requests left alone for their agent (agents.go)
	claimer  claimer            // how a new message's locks are taken, by the dialect (claim.go)
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
	if cfg.StepTable == "" {
		cfg.StepTable = schema.StepTable
	}
	// The step table holds no lease: NewTable checks and quotes its name
	// (the column names are the step table's, named only to fill Columns).
	stepTable, err := lease.NewTable(cfg.StepTable, lease.Columns{Key: schema.ColRequestID, Holder: schema.ColName,
		Token: schema.ColOutput, ExpiresAt: schema.ColCreatedAt, Generation: schema.ColGeneration})
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.MaxStepOutput == 0:
		cfg.MaxStepOutput = DefaultMaxStepOutput
	case cfg.MaxStepOutput < 0 || cfg.MaxStepOutput > 64<<20:
		return nil, invalid("max step output", "negative or more than 64 MiB")
	}
	switch {
	case cfg.MaxMetadata == 0:
		cfg.MaxMetadata = DefaultMaxMetadata
	case cfg.MaxMetadata < 0 || cfg.MaxMetadata > 16<<20:
		return nil, invalid("max metadata", "negative or more than 16 MiB")
	}
	reqTable, err := lease.NewTable(cfg.RequestTable, Columns())
	if err != nil {
		return nil, err
	}
	req, err := lease.New[string](cfg.Dialect, reqTable, cfg.Lease)
	if err != nil {
		return nil, err
	}
	tools, err := toolexec.New(toolexec.Config{Dialect: cfg.Dialect, Table: cfg.ToolExecutionTable, Lease: cfg.Lease,
		RequestTable: cfg.RequestTable})
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, db: cfg.DB, sessions: sessions, req: req, tools: tools, log: cfg.Logger}
	if !cfg.SeparateHeartbeats {
		bc := heartbeat.BatchConfig{Interval: cfg.HeartbeatInterval, Clock: cfg.Lease.Clock, Logger: cfg.Logger,
			AfterRound: r.checkInterrupts}
		if p, ok := cfg.DB.(heartbeat.ConnPool); ok {
			// The heartbeat keeps a connection of its own: renewals never
			// wait behind the runs' transactions for one.
			bc.Pool = p
		}
		if r.batcher, err = heartbeat.NewBatcher(bc); err != nil {
			return nil, err
		}
	}
	r.sql = r.newStatements(reqTable, stepTable)
	r.findStmt = newKeptStmt(r.sql.find, cfg.Dialect, cfg.Lease.Prepare)
	r.claimer = newClaimer(r)
	r.initQueue()
	return r, nil
}

// Sessions returns the session locker (to create sessions, inspect them).
func (r *Runner) Sessions() *session.Locker { return r.sessions }

// HeartbeatInterval is the interval at which a run's leases are renewed
// (Config.HeartbeatInterval, or its default TTL/3). A client that finds a
// message in flight (ErrInFlight) may ask again at this pace: the run's
// lease usually has far longer left than the run needs (httpapi's
// MessageHandler sends it as the Retry-After of such a 409).
func (r *Runner) HeartbeatInterval() time.Duration { return r.cfg.HeartbeatInterval }

// Close shuts the Runner down; it is its one shutdown. It stops the
// dispatcher and the sweeper at once, lets the runs that the Runner started
// from the queue finish until ctx is done, then cancels the rest (their
// context's cause is ErrClosed: they give their leases back, and their
// requests stay processing and free, to be resumed by a dispatcher of any
// process) and waits for them; then it closes the prepared statements of
// its session, request and tool-execution leases (see lease.Lease.Close)
// and its own (the read of a message's request, kept prepared where
// lease.Options.Prepare prepares the leases' statements), and gives back
// the connection that the heartbeat kept (see Config.SeparateHeartbeats).
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
	var batchErr error
	if r.batcher != nil {
		batchErr = r.batcher.Close()
	}
	return errors.Join(stopErr, r.sessions.Close(), r.req.Close(), r.tools.Close(), r.findStmt.close(), batchErr)
}

// Message is one user message.
type Message struct {
	SessionKey      string
	ClientRequestID string // the client's idempotency key for this message
	Content         string
	// Metadata is an optional JSON object sent with the message: the
	// user, attachments' references, model settings. It is stored with
	// the request (by the statement that creates it, for a queued message
	// too), handed to the agent (Run.Metadata, also in a resumed run) and
	// shown by Status. It must be one JSON object of at most
	// Config.MaxMetadata bytes: larger is a *MetadataTooLargeError, not an
	// object an error matching lease.ErrInvalid, both before any SQL.
	Metadata json.RawMessage
	// Fingerprint identifies the message; empty means the hex SHA-256 of
	// Content, and with Metadata of Content, a NUL byte and the
	// metadata's canonical form (RFC 8785: its members in any order, any
	// white space): a message without metadata keeps the fingerprint it
	// always had. The same ClientRequestID with another fingerprint — other
	// content, or other metadata — is ErrFingerprintMismatch. A fingerprint
	// of the caller's own is used as it is: it should cover the metadata.
	Fingerprint string
	// OnBusy says what to do when the session is busy with another
	// message: Reject (the default), Queue or Interrupt.
	OnBusy Policy
	// Agent names the agent that runs the message: one registered in
	// Config.Agents, or "" for the default agent (Config.Agent; stored as
	// NULL, as the rows of versions before agents had names). The name is
	// stored with the request: a run that is resumed, or started from the
	// queue, runs with the agent of this name, in a Runner that has it. A
	// name that is not registered is an *UnknownAgentError, before any
	// SQL. A resend stores its own name.
	Agent string
}

// Answer is what an agent returns.
type Answer struct {
	Reply string
	// Result is optional JSON stored with the reply (e.g. result ids). If
	// it is not valid JSON, nothing is stored: the request is marked error
	// and Handle returns an error matching ErrAgentFailed and
	// lease.ErrInvalid.
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
	// Waiting is, when the run stopped at a wait for a person's answer
	// (Await), the open question; Reply is empty. Runner.Answer runs the
	// request on.
	Waiting *Question `json:"waiting,omitempty"`
}

// Agent is the caller's work: model rounds and tool calls. ctx dies as
// soon as any lease of the flow is lost (cause matches lease.ErrLost), or
// another message of the session interrupts it (cause matches
// *InterruptedError).
type Agent func(ctx context.Context, run *Run) (Answer, error)

// Handle runs one message through the whole flow:
//
//  1. read the request (one SELECT);
//  2. a stored success is replayed, taking no lock; another fingerprint
//     is ErrFingerprintMismatch; a live run is ErrInFlight; a queued
//     message answers its position (Outcome.Queued), an interrupted one
//     *InterruptedError, a swept one ErrExpired;
//  3. take the session, then the request — a new one inserted, an
//     existing one taken over — in one transaction, so they succeed or
//     fail together; a busy session is *session.BusyError, or, as
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
// A nil agent means the agent that msg.Agent names: Config.Agent when it
// is empty, else the one registered in Config.Agents under that name. A
// non-nil agent runs this call's run, and msg.Agent is still what is
// stored: name the agent registered for the same work, so that a resume
// of the request (its run died) or a start from the queue finds it.
// Steps 1 to 4 are claim.go's (begin), with existing.go's answers from a
// request that exists and the queue's placement (queue.go), which Handle
// acts on (onPlaced, dispatch.go); 5 is run.go's (runAndContinue), 6 and
// the release finish.go's, and the next queued message dispatch.go's.
func (r *Runner) Handle(ctx context.Context, msg Message, agent Agent) (out Outcome, err error) {
	if obs := r.cfg.Observer; obs != nil {
		var end func(error, ...lease.Attr)
		ctx, end = obs.Start(ctx, lease.Span{Name: SpanHandle, Attrs: []lease.Attr{{Key: AttrSession, Value: msg.SessionKey}}})
		defer func() { end(err, handleEnd(out, err)...) }()
	}
	named, err := r.namedAgent(msg.Agent)
	if err != nil {
		return Outcome{}, err
	}
	if err := r.checkMetadataSize(msg.Metadata); err != nil {
		return Outcome{}, err
	}
	if agent == nil {
		agent = named
	}
	if agent == nil {
		return Outcome{}, invalid("agent", "nil, and Config.Agent is nil")
	}
	if err := validate(&msg); err != nil {
		return Outcome{}, err
	}
	if msg.OnBusy != Reject && named == nil {
		return Outcome{}, invalid("on busy", msg.OnBusy.String()+" needs the message's agent: Config.Agent")
	}
	run, out, p, err := r.begin(ctx, msg)
	switch {
	case err == nil && p.placed():
		// The session was busy, and the queue stored the message: answer
		// with its position, or wait to run it.
		run, out, err = r.onPlaced(ctx, msg, p)
	case p.own != nil:
		// Registered to wait for a message that the queue did not store.
		r.disown(p.id, p.own)
	}
	if err != nil || run == nil {
		return out, err
	}
	return r.runAndContinue(ctx, run, agent)
}

// validate checks a message before any SQL, and fills in its default
// fingerprint.
func validate(m *Message) error {
	// One text rule for keys and ids on every dialect (engine.CheckText):
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
	fp, err := fingerprint(m.Content, m.Metadata) // also checks the metadata
	if err != nil {
		return err
	}
	if m.Fingerprint == "" {
		m.Fingerprint = fp
	} else if len(m.Fingerprint) > 64 {
		return invalid("fingerprint", "longer than 64 bytes")
	}
	return nil
}

// invalid is the *engine.ValidationError of bad input to this package.
func invalid(field, reason string) error {
	return &engine.ValidationError{Package: "request", Field: field, Reason: reason}
}

// holder names a new run in the holder columns: this process
// (Config.HolderPrefix) and a random suffix.
func (r *Runner) holder() string { return r.cfg.HolderPrefix + "/" + uuid.NewString()[:13] }

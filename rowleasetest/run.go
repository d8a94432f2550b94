package rowleasetest

import (
	"bytes"
	"database/sql"
	"errors"
	"log/slog"

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// The message Handle sends when WithMessage leaves these empty.
const (
	SessionKey      = "session-1"
	ClientRequestID = "message-1"
)

// HolderPrefix is the request.Config.HolderPrefix of the runners made here:
// holder columns read "rowleasetest/…".
const HolderPrefix = "rowleasetest"

// Option configures NewRunner and Handle. Options apply in order.
type Option func(*options)

type options struct {
	db        *sql.DB
	registry  *toolexec.Registry
	tools     []func(*toolexec.Registry) error
	clock     lease.Clock
	msg       request.Message
	configure []func(*request.Config)
	err       error // the first bad option, reported by t.Fatalf
}

func (o *options) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// WithDB runs on db instead of a new NewDB database: one of your own
// (with your tables next to the lock tables), or the Result.DB of an
// earlier Handle. It must have the lock tables (schema.Apply); any dialect
// rowlease speaks works, detected from the driver. It is not closed here.
func WithDB(db *sql.DB) Option {
	return func(o *options) {
		if db == nil {
			o.fail(errors.New("rowleasetest: WithDB(nil)"))
		}
		o.db = db
	}
}

// WithTools uses r as the runner's tool registry: the one your
// application builds. WithTool and WithExternalTool add to it (r is
// changed).
func WithTools(r *toolexec.Registry) Option {
	return func(o *options) {
		if r == nil {
			o.fail(errors.New("rowleasetest: WithTools(nil)"))
		}
		o.registry = r
	}
}

// WithTool registers a tool whose side effect writes in the database
// (toolexec.Registry.Register). A name registered twice, an empty name or
// a nil fn fails the test.
func WithTool(name string, fn toolexec.SideEffect) Option {
	return func(o *options) {
		o.tools = append(o.tools, func(r *toolexec.Registry) error { return r.Register(name, fn) })
	}
}

// WithExternalTool registers a tool whose effect happens outside the
// database (toolexec.Registry.RegisterExternal).
func WithExternalTool(name string, fn toolexec.ExternalEffect, eo toolexec.ExternalOptions) Option {
	return func(o *options) {
		o.tools = append(o.tools, func(r *toolexec.Registry) error { return r.RegisterExternal(name, fn, eo) })
	}
}

// WithClock gives the leases, and so the heartbeat, clk as their local
// clock (request.Config.Lease.Clock), typically a *Clock. See Clock for
// what it changes and what it does not.
func WithClock(clk lease.Clock) Option {
	return func(o *options) { o.clock = clk }
}

// WithMessage sets the message Handle sends. An empty SessionKey or
// ClientRequestID is filled in with the constants of this package; the
// other fields are sent as given. NewRunner ignores it.
func WithMessage(m request.Message) Option {
	return func(o *options) { o.msg = m }
}

// WithConfig changes the request.Config just before request.New: a TTL
// and heartbeat interval, table names, an Observer, a Logger. It runs
// after the other options have set their fields.
func WithConfig(fn func(*request.Config)) Option {
	return func(o *options) {
		if fn == nil {
			o.fail(errors.New("rowleasetest: WithConfig(nil)"))
			return
		}
		o.configure = append(o.configure, fn)
	}
}

func collect(opts []Option) *options {
	o := &options{}
	for _, opt := range opts {
		if opt == nil {
			o.fail(errors.New("rowleasetest: nil Option"))
			continue
		}
		opt(o)
	}
	return o
}

// NewRunner returns a *request.Runner and the database it runs on: db
// from WithDB, or a new NewDB database. Unless WithConfig says otherwise,
// the runner creates missing sessions (session.Config.AutoCreate), its
// holders start with HolderPrefix, its TTL and heartbeat are request's
// defaults (30 s, every 10 s), and it logs through t.Logf at level Info.
// A bad option or a Config that request.New refuses fails the test with
// t.Fatalf.
func NewRunner(t TB, opts ...Option) (*request.Runner, *sql.DB) {
	t.Helper()
	return newRunner(t, collect(opts))
}

func newRunner(t TB, o *options) (*request.Runner, *sql.DB) {
	t.Helper()
	if o.err != nil {
		t.Fatalf("%v", o.err)
	}
	db := o.db
	if db == nil {
		db = NewDB(t)
	}
	reg := o.registry
	if reg == nil {
		reg = toolexec.NewRegistry()
	}
	for _, add := range o.tools {
		if err := add(reg); err != nil {
			t.Fatalf("rowleasetest: %v", err)
		}
	}
	cfg := request.Config{
		DB:           db,
		Tools:        reg,
		HolderPrefix: HolderPrefix,
		Session:      session.Config{AutoCreate: true},
		Logger:       slog.New(slog.NewTextHandler(logWriter{t}, nil)),
	}
	cfg.Lease.Clock = o.clock
	for _, fn := range o.configure {
		fn(&cfg)
	}
	r, err := request.New(cfg)
	if err != nil {
		t.Fatalf("rowleasetest: request.New: %v", err)
	}
	return r, db
}

// Result is what Handle did.
type Result struct {
	// Outcome and Err are what request.Runner.Handle returned.
	Outcome request.Outcome
	Err     error
	// Message is the message that was sent (with the defaults filled in).
	Message request.Message
	// DB is the database it ran on, open until the test ends: read the
	// request and tool-execution rows (package schema names them) and
	// your own tables.
	DB *sql.DB
	// Runner is the runner it used: Handle another message, or the same
	// one again to see its replay.
	Runner *request.Runner
}

// Handle runs agent under a real *request.Run: it makes a runner as
// NewRunner does and hands one message (WithMessage, by default
// SessionKey and ClientRequestID with empty content) to Handle, under
// t.Context(). Handle's outcome and error come back in the Result and
// never fail the test by themselves; a failed set-up (database, option,
// Config) does, with t.Fatalf.
func Handle(t TB, agent request.Agent, opts ...Option) Result {
	t.Helper()
	o := collect(opts)
	r, db := newRunner(t, o)
	msg := o.msg
	if msg.SessionKey == "" {
		msg.SessionKey = SessionKey
	}
	if msg.ClientRequestID == "" {
		msg.ClientRequestID = ClientRequestID
	}
	out, err := r.Handle(t.Context(), msg, agent)
	return Result{Outcome: out, Err: err, Message: msg, DB: db, Runner: r}
}

// logWriter sends each record of a slog.TextHandler (one Write per
// record) to t.Logf, so that the runner's log shows with the failing
// test (or with -v) instead of on stderr.
type logWriter struct{ t TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimSuffix(p, []byte("\n")))
	return len(p), nil
}

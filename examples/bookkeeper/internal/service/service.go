// Package service wires the bookkeeper together — database, model, agent,
// rowlease's request Runner and the HTTP API — and serves it with a
// graceful, bounded shutdown. The server command and the demo both use it.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/agent"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/webhook"
	"github.com/rowlease/rowlease/request"
)

// Model back-ends.
const (
	// LLMRule is the offline rule model (llm.RuleModel).
	LLMRule = "rule"
	// LLMOpenAI is an OpenAI-compatible chat-completions endpoint.
	LLMOpenAI = "openai"
)

// Defaults of Config.
const (
	DefaultLLMLatency    = time.Second
	DefaultLeaseTTL      = 30 * time.Second
	DefaultShutdownGrace = 10 * time.Second
	DefaultOpenAIModel   = "gpt-4o-mini"
	// DefaultRetention is how long a finished message's reply is kept
	// (and replayed); after it, a resend of its id is 410 Gone.
	DefaultRetention = 720 * time.Hour
	// releaseTimeout bounds the Runner's final writes and releases.
	releaseTimeout = 3 * time.Second
)

// Config configures a Service; the zero value of each field means its
// default.
type Config struct {
	// DB is the -db value (see store.ParseDSN); "" means store.DefaultDB.
	DB string
	// LLM is LLMRule or LLMOpenAI; "" means LLMRule.
	LLM string
	// LLMLatency delays each round of the rule model; negative means none.
	LLMLatency time.Duration
	// LLMVary makes the rule model word each answer differently every
	// time it is asked (llm.RuleOptions.Vary), as a sampled model does.
	LLMVary bool
	// LLMBaseURL, LLMModel and LLMAPIKey configure the OpenAI client.
	LLMBaseURL, LLMModel, LLMAPIKey string
	// Model, when set, is used instead of the one LLM names (tests).
	Model llm.Model
	// LeaseTTL is the TTL of every lease; Heartbeat the renewal interval
	// (0 means LeaseTTL/3).
	LeaseTTL, Heartbeat time.Duration
	// ShutdownGrace is how long in-flight requests may run on after a
	// shutdown signal before they are abandoned (cancelled, leases
	// released).
	ShutdownGrace time.Duration
	// WebhookURL, when set, is notified of every booked transaction with
	// the tool call's effect key as Idempotency-Key (see package webhook);
	// "" means no notifications. WebhookTimeout bounds one post (0 means
	// webhook.DefaultTimeout).
	WebhookURL     string
	WebhookTimeout time.Duration
	// Retention is how long finished messages are kept; the sweeper, which
	// Serve runs, turns older ones into tombstones (a resend gets 410).
	// 0 means DefaultRetention; negative means keep them forever.
	Retention time.Duration
	// NoSteps turns the agent's steps off (agent.Config.NoSteps): a
	// resumed run asks the model again instead of replaying its recorded
	// rounds. For comparison only.
	NoSteps bool
	// InTxBesideStep runs a fenced transaction beside every model round's
	// step that fails every other time (agent.Config.InTxBesideStep); for
	// tests.
	InTxBesideStep bool
	// ToolFailEvery makes create_transaction fail as a tool, in round 1,
	// for one message in ToolFailEvery (agent.Config.ToolFailEvery); 0
	// means never. For tests.
	ToolFailEvery int
	// ApproveAbove is the threshold of approval, in cents: an expense
	// above it is booked only once a person approved it (the message
	// waits: request.Await; agent.Config.ApproveAbove). 0 means
	// agent.DefaultApproveAbove (1,000.00); negative never asks.
	ApproveAbove int64
	// ApprovalWithin is the deadline of an approval; past it, nothing is
	// booked and the reply says the approval expired
	// (agent.Config.ApprovalWithin). 0 means none.
	ApprovalWithin time.Duration
	// Resume bounds how the service resumes, on its own, messages whose
	// run died and that nobody resends (request.Config.Resume); the zero
	// value means rowlease's defaults (a grace of one lease TTL).
	Resume request.ResumeConfig
	// QueueMax bounds the messages queued per session ("on_busy":
	// "queue"); 0 means request.DefaultQueueMax.
	QueueMax int
	// Now is the clock for "today"; nil means time.Now.
	Now func() time.Time
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Service is the running bookkeeper.
type Service struct {
	// Store is the database.
	Store *store.Store
	// Runner is rowlease's request Runner.
	Runner *request.Runner
	// Agent is the bookkeeping agent.
	Agent *agent.Agent
	// API is the HTTP handler.
	API *api.Server

	cfg Config
	log *slog.Logger
}

// Open opens and migrates the database named by cfg.DB and builds the
// service. Close it.
func Open(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.DB == "" {
		cfg.DB = store.DefaultDB
	}
	st, err := store.Open(ctx, cfg.DB)
	if err != nil {
		return nil, err
	}
	svc, err := New(ctx, st, cfg)
	if err != nil {
		return nil, errors.Join(err, st.Close())
	}
	return svc, nil
}

// New migrates an open store and builds the service on it (cfg.DB is not
// used). Closing the Service closes st.
func New(ctx context.Context, st *store.Store, cfg Config) (*Service, error) {
	if cfg.LLM == "" {
		cfg.LLM = LLMRule
	}
	if cfg.LLMLatency == 0 {
		cfg.LLMLatency = DefaultLLMLatency
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = cfg.LeaseTTL / 3
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.ApproveAbove == 0 {
		cfg.ApproveAbove = agent.DefaultApproveAbove
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	model, maxRetryAfter, err := newModel(cfg)
	if err != nil {
		return nil, err
	}
	return build(ctx, st, model, maxRetryAfter, cfg)
}

func build(ctx context.Context, st *store.Store, model llm.Model, maxRetryAfter time.Duration, cfg Config) (*Service, error) {
	var hook *webhook.Sender
	if cfg.WebhookURL != "" {
		var err error
		if hook, err = webhook.NewSender(cfg.WebhookURL, cfg.WebhookTimeout); err != nil {
			return nil, fmt.Errorf("service: -webhook: %w", err)
		}
	}
	if err := st.Migrate(ctx); err != nil {
		return nil, err
	}
	ag, err := agent.New(agent.Config{Store: st, Model: model, Webhook: hook, NoSteps: cfg.NoSteps,
		InTxBesideStep: cfg.InTxBesideStep, ToolFailEvery: cfg.ToolFailEvery, ApproveAbove: max(cfg.ApproveAbove, 0),
		ApprovalWithin: cfg.ApprovalWithin, Now: cfg.Now, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	retention := request.RetentionConfig{After: max(cfg.Retention, 0)}
	runner, err := request.New(request.Config{DB: st.DB, Dialect: st.Dialect, TTL: cfg.LeaseTTL,
		HeartbeatInterval: cfg.Heartbeat, ReleaseTimeout: releaseTimeout, Tools: ag.Tools(), Logger: cfg.Logger,
		Agent: ag.Handle, Queue: request.QueueConfig{Max: cfg.QueueMax}, Retention: retention, Resume: cfg.Resume})
	if err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	srv, err := api.New(api.Config{Store: st, Runner: runner, Agent: ag, MaxRetryAfter: maxRetryAfter, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return &Service{Store: st, Runner: runner, Agent: ag, API: srv, cfg: cfg, log: cfg.Logger}, nil
}

// newModel builds the model and the cap of Retry-After that suits it: a
// busy session is usually free again after about one request's worth of
// model rounds.
func newModel(cfg Config) (llm.Model, time.Duration, error) {
	if cfg.Model != nil {
		return cfg.Model, max(time.Second, 2*cfg.LLMLatency), nil
	}
	switch cfg.LLM {
	case LLMRule:
		lat := max(cfg.LLMLatency, 0)
		return llm.NewRuleModel(llm.RuleOptions{Latency: lat, Now: cfg.Now, Vary: cfg.LLMVary}), max(time.Second, 2*lat), nil
	case LLMOpenAI:
		name := cfg.LLMModel
		if name == "" {
			name = DefaultOpenAIModel
		}
		c, err := llm.NewOpenAIClient(llm.OpenAIConfig{BaseURL: cfg.LLMBaseURL, Model: name, APIKey: cfg.LLMAPIKey})
		if err != nil {
			return nil, 0, err
		}
		return c, 5 * time.Second, nil
	}
	return nil, 0, fmt.Errorf("service: -llm %q: want %q or %q", cfg.LLM, LLMRule, LLMOpenAI)
}

// Close stops the Runner's work (queued messages it runs are let finish
// for up to releaseTimeout, then cancelled: another process, or this one
// restarted, resumes them), releases its prepared statements and closes
// the database.
func (s *Service) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	rerr := s.Runner.Close(ctx)
	if errors.Is(rerr, context.DeadlineExceeded) {
		s.log.Warn("closing the runner: queued messages still running were cancelled; they resume on the next start", "err", rerr)
		rerr = nil
	}
	// Then the pool the Runner's statements lived on.
	return errors.Join(rerr, s.Store.Close())
}

// Serve serves HTTP on ln until ctx is done, then shuts down: it stops
// accepting requests, lets in-flight ones finish for ShutdownGrace, then
// abandons the rest — their runs are cancelled and rowlease releases their
// leases within its release timeout, so a retry (here or on another
// process) takes them over at once. It returns when every handler it waited
// for has returned, or after a bounded wait.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.API,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	// The Runner's dispatcher (queued messages that no running process
	// starts, and messages whose run died and that nobody resends) and
	// sweeper (the retention), until the shutdown.
	rctx, stopRunner := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRunner()
	if err := s.Runner.Start(rctx); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.API.Close()
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down: draining in-flight requests", "grace", s.cfg.ShutdownGrace)
	gctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	err := hs.Shutdown(gctx)
	// Queued messages this process is running get what is left of the
	// grace; then they are cancelled and resume elsewhere.
	if serr := s.Runner.Close(gctx); serr != nil {
		s.log.Warn("shutdown grace over: cancelling the queued messages still running; they resume on the next start")
	}
	cancel()
	s.API.Close()
	if err != nil {
		s.log.Warn("shutdown grace over: abandoning in-flight requests and releasing their leases")
		wctx, cancel := context.WithTimeout(context.Background(), releaseTimeout+2*time.Second)
		if err := s.API.Wait(wctx); err != nil {
			s.log.Error("some requests did not stop in time; their leases expire after the TTL", "ttl", s.cfg.LeaseTTL)
		}
		cancel()
		// The handlers have returned; let net/http write their 503s out,
		// then close whatever is left.
		fctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = hs.Shutdown(fctx)
		cancel()
		_ = hs.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	s.log.Info("stopped")
	return nil
}

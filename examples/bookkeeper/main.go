package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/agent"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/demo"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/webhook"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage:
  bookkeeper [serve] [flags]   run the HTTP service
  bookkeeper demo [flags]      run the self-checking demo
  bookkeeper receiver [flags]  run a webhook receiver for -webhook (in memory)
  bookkeeper help              show this help (also -h, --help)
  bookkeeper <command> -h      show one command's flags
`

// run runs a command and returns the exit code: 0, 1 for a failure, 2 for
// bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		switch args[0] {
		case "help", "-h", "-help", "--help":
			printUsage(stdout)
			return 0
		}
		if !strings.HasPrefix(args[0], "-") {
			cmd, args = args[0], args[1:]
		}
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, stdout, stderr)
	case "demo":
		return runDemo(ctx, args, stdout, stderr)
	case "receiver":
		return runReceiver(ctx, args, stdout, stderr)
	}
	fmt.Fprintf(stderr, "bookkeeper: unknown command %q\n%s", cmd, usage)
	return 2
}

// printUsage writes the commands and the flags of each.
func printUsage(w io.Writer) {
	fmt.Fprint(w, usage)
	fmt.Fprintf(w, "\nbookkeeper [serve] flags:\n")
	fs, _ := serveFlags()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintf(w, "\nbookkeeper demo flags:\n")
	fs, _ = demoFlags()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintf(w, "\nbookkeeper receiver flags:\n")
	fs, _ = receiverFlags()
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parse parses a command's flags. -h prints the command's usage on stdout
// (exit 0); a bad flag prints the error and the usage on stderr (exit 2).
// ok is false when the command should exit with code.
func parse(fs *flag.FlagSet, synopsis string, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard) // the messages are written here, to the right stream
	printTo := func(w io.Writer) {
		fmt.Fprintf(w, "usage: %s\n\nflags:\n", synopsis)
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printTo(stdout)
		return 0, false
	case err != nil:
		fmt.Fprintf(stderr, "bookkeeper: %v\n", err)
		printTo(stderr)
		return 2, false
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "bookkeeper: unexpected arguments %q\n", fs.Args())
		return 2, false
	}
	return 0, true
}

// varyEnv names the environment variable that turns -llm-vary on by
// default.
const varyEnv = "BOOKKEEPER_MODEL_VARY"

// common are the flags serve and demo share.
type common struct {
	cfg     service.Config
	verbose bool
}

func (c *common) register(fs *flag.FlagSet, dbDefault string, latency time.Duration) {
	fs.StringVar(&c.cfg.DB, "db", dbDefault, "database: sqlite:PATH, mysql://user:pass@host:port/db or postgres://user:pass@host:port/db")
	fs.DurationVar(&c.cfg.LLMLatency, "llm-latency", latency, "delay of each rule-model round (makes concurrency visible); 0 for none")
	fs.BoolVar(&c.cfg.LLMVary, "llm-vary", os.Getenv(varyEnv) == "1", "the rule model words each answer differently every time it is asked (a random note, the category named otherwise), as a sampled model does (default $"+varyEnv+"=1)")
	fs.DurationVar(&c.cfg.LeaseTTL, "lease-ttl", service.DefaultLeaseTTL, "TTL of every lease (session, request, tool execution)")
	fs.DurationVar(&c.cfg.Heartbeat, "heartbeat", 0, "lease renewal interval (default a third of -lease-ttl)")
	c.cfg.ApproveAbove = agent.DefaultApproveAbove
	fs.Var((*thresholdFlag)(&c.cfg.ApproveAbove), "approve-above", "an expense above this amount is booked only once a person approves it (the message waits for the answer); 0 or negative never asks")
	fs.DurationVar(&c.cfg.ApprovalWithin, "approval-within", 0, "deadline of an approval: past it, nothing is booked and the reply says the approval expired; 0 for none")
	fs.BoolVar(&c.verbose, "v", false, "debug logging")
}

// thresholdFlag is an amount flag in cents: "1000.00", "2500"; 0 or a
// negative amount is stored as -1 (never ask; the zero Config value means
// the default).
type thresholdFlag int64

// String writes the amount with two decimals, or 0 when off.
func (f *thresholdFlag) String() string {
	if f == nil || *f <= 0 {
		return "0"
	}
	return store.FormatCents(int64(*f))
}

// Set reads an amount.
func (f *thresholdFlag) Set(s string) error {
	s = strings.ReplaceAll(strings.TrimSpace(s), ",", "")
	if v, err := strconv.ParseFloat(s, 64); err == nil && v <= 0 {
		*f = -1
		return nil
	}
	c, err := store.ParseAmount(s)
	if err != nil {
		return err
	}
	*f = thresholdFlag(c)
	return nil
}

func (c *common) logger(stderr io.Writer, level slog.Level) *slog.Logger {
	if c.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}

func (c *common) finish() {
	if c.cfg.LLMLatency == 0 {
		c.cfg.LLMLatency = -1 // an explicit 0: no delay (the zero Config value means the default)
	}
}

// serveOptions are serve's flags.
type serveOptions struct {
	common
	addr  string
	steps bool
}

func serveFlags() (*flag.FlagSet, *serveOptions) {
	o := &serveOptions{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	o.register(fs, store.DefaultDB, service.DefaultLLMLatency)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen address")
	fs.StringVar(&o.cfg.LLM, "llm", service.LLMRule, "model: rule (offline keyword rules) or openai")
	fs.StringVar(&o.cfg.LLMBaseURL, "llm-base-url", llm.DefaultOpenAIBaseURL, "OpenAI-compatible API root, for -llm openai")
	fs.StringVar(&o.cfg.LLMModel, "llm-model", service.DefaultOpenAIModel, "model name, for -llm openai (key from OPENAI_API_KEY)")
	fs.StringVar(&o.cfg.WebhookURL, "webhook", os.Getenv(webhookEnv), "URL notified of every booked transaction, with the tool call's Idempotency-Key (default $"+webhookEnv+"; off when empty)")
	fs.DurationVar(&o.cfg.WebhookTimeout, "webhook-timeout", webhook.DefaultTimeout, "bound of one webhook post; past it the outcome is unknown and the message fails until a retry settles it")
	fs.DurationVar(&o.cfg.ShutdownGrace, "shutdown-grace", service.DefaultShutdownGrace, "how long in-flight requests may finish after SIGINT/SIGTERM before they are abandoned")
	fs.BoolVar(&o.steps, "steps", true, "record every model round as a step, so a resumed message replays the model's decisions instead of asking it again; -steps=false asks again (for comparison)")
	fs.BoolVar(&o.cfg.InTxBesideStep, "intx-beside-step", false, "while every model round is asked and recorded as a step, run a fenced transaction of the run beside it that journals the round and fails every other time (rolled back, logged, the message goes on); for tests")
	fs.IntVar(&o.cfg.ToolFailEvery, "tool-fail-every", 0, "create_transaction fails as a tool, for the call model round 1 decided, in one message in N (by its client request id); the model is told it may retry; 0 never; for tests")
	fs.DurationVar(&o.cfg.Resume.Grace, "resume-grace", 0, "how long after a dead run's lease expired the service resumes the message by itself if its client has not resent it (default the -lease-ttl)")
	fs.DurationVar(&o.cfg.Retention, "retention", service.DefaultRetention, "how long finished messages are kept and replayed; a resend of an older one gets 410 Gone (negative: keep forever)")
	return fs, o
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, o := serveFlags()
	if code, ok := parse(fs, "bookkeeper [serve] [flags]", args, stdout, stderr); !ok {
		return code
	}
	c, addr := &o.common, &o.addr
	c.finish()
	c.cfg.NoSteps = !o.steps
	c.cfg.LLMAPIKey = os.Getenv("OPENAI_API_KEY")
	log := c.logger(stderr, slog.LevelInfo)
	c.cfg.Logger = log
	if c.cfg.LLM == service.LLMOpenAI && c.cfg.LLMAPIKey == "" {
		log.Warn("OPENAI_API_KEY is not set; requests are sent without a key")
	}

	svc, err := service.Open(ctx, c.cfg)
	if err != nil {
		fmt.Fprintf(stderr, "bookkeeper: %v\n", err)
		return 1
	}
	defer svc.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "bookkeeper: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "bookkeeper listening on http://%s (database: %s, model: %s)\n", ln.Addr(), svc.Store.Dialect, c.cfg.LLM)
	if err := svc.Serve(ctx, ln); err != nil {
		fmt.Fprintf(stderr, "bookkeeper: %v\n", err)
		return 1
	}
	return 0
}

// demoOptions are demo's flags.
type demoOptions struct {
	common
	demo demo.Config
}

func demoFlags() (*flag.FlagSet, *demoOptions) {
	o := &demoOptions{}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	o.register(fs, "", demo.DefaultLatency)
	fs.Lookup("db").Usage += " (default: a fresh SQLite file in a temporary directory)"
	fs.IntVar(&o.demo.Sessions, "sessions", demo.DefaultSessions, "sessions (users) played in parallel, three devices each")
	fs.IntVar(&o.demo.MaxAttempts, "max-attempts", demo.DefaultMaxAttempts, "attempts per message; a 409 is retried after Retry-After")
	fs.DurationVar(&o.demo.SlowTool, "slow-tool", demo.DefaultSlowTool, "how long the slow-tool scene's webhook receiver works before it answers; negative skips the scene")
	return fs, o
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, o := demoFlags()
	if code, ok := parse(fs, "bookkeeper demo [flags]", args, stdout, stderr); !ok {
		return code
	}
	c, dc := &o.common, &o.demo
	c.finish()
	c.cfg.Logger = c.logger(stderr, slog.LevelWarn)
	dc.Service = c.cfg
	ok, err := demo.Run(ctx, *dc, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bookkeeper demo: %v\n", err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}

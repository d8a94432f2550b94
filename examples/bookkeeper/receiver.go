package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/webhook"
)

// webhookEnv names the environment variable that is -webhook's default.
const webhookEnv = "BOOKKEEPER_WEBHOOK"

// runReceiver runs a webhook receiver (package webhook) until ctx is done:
// a stand-in for the service that -webhook notifies, which performs each
// Idempotency-Key's effect once and lists them at GET /effects. Its memory
// is its lifetime.
// receiverOptions are receiver's flags.
type receiverOptions struct {
	addr    string
	delay   time.Duration
	verbose bool
}

func receiverFlags() (*flag.FlagSet, *receiverOptions) {
	o := &receiverOptions{}
	fs := flag.NewFlagSet("receiver", flag.ContinueOnError)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:9090", "listen address")
	fs.DurationVar(&o.delay, "delay", 0, "how long it works on a new key before performing it (a slow receiver)")
	fs.BoolVar(&o.verbose, "v", false, "debug logging")
	return fs, o
}

func runReceiver(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, o := receiverFlags()
	if code, ok := parse(fs, "bookkeeper receiver [flags]", args, stdout, stderr); !ok {
		return code
	}
	addr, delay, verbose := &o.addr, &o.delay, &o.verbose
	if *delay < 0 {
		fmt.Fprintf(stderr, "bookkeeper receiver: negative -delay %s\n", *delay)
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	rcv := webhook.NewReceiver(webhook.ReceiverConfig{Delay: *delay, Logger: log})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "bookkeeper receiver: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "webhook receiver listening on http://%s (POST notifications with Idempotency-Key; GET /effects)\n", ln.Addr())
	hs := &http.Server{Handler: rcv, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		fmt.Fprintf(stderr, "bookkeeper receiver: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	<-errc
	st := rcv.Stats()
	log.Info("receiver stopped", "effects", st.Effects, "requests", st.Requests, "replays", st.Replays, "conflicts", st.Conflicts)
	return 0
}

package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// EffectsTable is the crash matrix's in-database side effect: one row per
// committed run of the "post" tool. It has no unique key on the call, so a
// duplicate would show.
const EffectsTable = "chaos_effects"

// Environment of a worker process (see WorkerMain).
const (
	WorkerEnv = "ROWLEASE_CHAOS_WORKER"
	envDriver = "CHAOS_DRIVER"
	envDSN    = "CHAOS_DSN"
	envRecv   = "CHAOS_RECEIVER"
	envJobs   = "CHAOS_JOBS"
	envKill   = "CHAOS_KILL"
	envPause  = "CHAOS_PAUSE"
	envTTL    = "CHAOS_TTL"
	envDwell  = "CHAOS_DWELL"
	envMulti  = "CHAOS_MULTI_PRIMARY"
)

// Stages a worker announces (and may be killed or paused at).
const (
	StageAgent     = "agent"          // the locks are held, the agent starts
	StageToolTx    = "tool-tx"        // inside the post tool's transaction, its row written
	StageToolDone  = "tool-done"      // the post tool committed
	StageActed     = "external-acted" // the receiver performed the effect; not yet recorded
	StageAgentDone = "agent-done"     // the agent returns: the success mark and the release follow
	StageHandled   = "handled"        // Handle returned
)

// CreateEffectsTable creates EffectsTable.
func CreateEffectsTable(ctx context.Context, db lease.DB) error {
	_, err := db.ExecContext(ctx, "CREATE TABLE "+EffectsTable+
		" (id VARCHAR(36) NOT NULL PRIMARY KEY, crid VARCHAR(191) NOT NULL, n INTEGER NOT NULL, exec_id VARCHAR(36) NOT NULL)")
	return err
}

// plan is where a worker kills or stops itself: at stage, in its job-th
// job, after delay.
type plan struct {
	stage string
	job   int
	delay time.Duration
}

func (p plan) String() string {
	if p.stage == "" {
		return ""
	}
	return fmt.Sprintf("%s:%d:%d", p.stage, p.job, p.delay.Microseconds())
}

func parsePlan(s string) plan {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return plan{}
	}
	job, _ := strconv.Atoi(parts[1])
	us, _ := strconv.Atoi(parts[2])
	return plan{stage: parts[0], job: job, delay: time.Duration(us) * time.Microsecond}
}

type worker struct {
	kill, pause plan
	job         int
	out         io.Writer
	dwell       time.Duration // each stage lasts up to this long (random)
}

func (w *worker) say(format string, args ...any) {
	fmt.Fprintf(w.out, format+"\n", args...)
}

// hook announces a stage and kills or stops the process there if the plan
// says so.
func (w *worker) hook(stage, crid string) {
	w.say("stage %s %s", stage, crid)
	if w.kill.stage == stage && w.kill.job == w.job {
		w.say("kill %s %s", stage, crid)
		if w.kill.delay == 0 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		d := w.kill.delay
		go func() {
			time.Sleep(d) // a kill at a random instant after this stage
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}()
	}
	if w.pause.stage == stage && w.pause.job == w.job {
		w.say("pause %s %s", stage, crid)
		stopHere()
		w.say("resumed %s %s", stage, crid)
	}
	if w.dwell > 0 {
		time.Sleep(rand.N(w.dwell))
	}
}

// stopHere stops the process with SIGSTOP sent to the calling thread: a
// SIGSTOP sent to the process may be taken by another thread, and this one
// would run on — into the fences — before the whole process stops.
func stopHere() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}

// WorkerMain is a worker process of the crash matrix: it runs its jobs
// (session/client-request-id pairs) through request.Runner.Handle, one
// after the other, with a "post" tool that writes EffectsTable in its
// transaction and a "notify" tool that calls the receiver with the effect
// key, and reports each outcome on stdout. It is the test binary run again
// with WorkerEnv set; it returns the exit code.
func WorkerMain() int {
	w := &worker{kill: parsePlan(os.Getenv(envKill)), pause: parsePlan(os.Getenv(envPause)), out: os.Stdout}
	if ms, err := strconv.Atoi(os.Getenv(envDwell)); err == nil && ms > 0 {
		w.dwell = time.Duration(ms) * time.Millisecond
	}
	if err := w.run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	return 0
}

func (w *worker) run() error {
	driver := os.Getenv(envDriver)
	db, err := sql.Open(driver, os.Getenv(envDSN))
	if err != nil {
		return err
	}
	defer db.Close()
	d, err := lease.ParseDialect(driver)
	if err != nil {
		return err
	}
	ttlMS, _ := strconv.Atoi(os.Getenv(envTTL))
	ttl := time.Duration(ttlMS) * time.Millisecond
	recv := os.Getenv(envRecv)
	tools := toolexec.NewRegistry()
	ins := d.Rebind("INSERT INTO " + EffectsTable + " (id, crid, n, exec_id) VALUES (?, ?, ?, ?)")
	if err := tools.Register("post", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		var a struct {
			Req string `json:"req"`
			N   int    `json:"n"`
		}
		if err := json.Unmarshal(x.Canonical, &a); err != nil {
			return nil, err
		}
		id := uuid.NewString()
		if _, err := x.Tx.ExecContext(ctx, ins, id, a.Req, a.N, x.ExecutionID); err != nil {
			return nil, err
		}
		w.hook(StageToolTx, a.Req)
		return json.Marshal(map[string]string{"effect": id})
	}); err != nil {
		return err
	}
	if err := tools.RegisterExternal("notify", func(ctx context.Context, x toolexec.External) (json.RawMessage, error) {
		var a struct {
			Req string `json:"req"`
		}
		_ = json.Unmarshal(x.Canonical, &a)
		w.say("intent %s %s", a.Req, x.EffectKey) // its intent committed: the act follows
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, recv, bytes.NewReader(x.Canonical))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Idempotency-Key", x.EffectKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("receiver: %d %v", resp.StatusCode, err)
		}
		w.hook(StageActed, a.Req)
		return body, nil
	}, toolexec.ExternalOptions{Repeat: true}); err != nil {
		return err
	}
	runner, err := request.New(request.Config{
		DB: db, Dialect: d, TTL: ttl, ReleaseTimeout: 2 * time.Second, Tools: tools,
		Session: session.Config{AutoCreate: true},
		Lease:   lease.Options{MultiPrimary: os.Getenv(envMulti) != ""},
		Logger:  discardLogger(),
	})
	if err != nil {
		return err
	}
	for i, job := range strings.Split(os.Getenv(envJobs), ",") {
		w.job = i
		sess, crid, ok := strings.Cut(job, "/")
		if !ok {
			return fmt.Errorf("bad job %q", job)
		}
		w.handle(runner, sess, crid, ttl)
	}
	return nil
}

func (w *worker) handle(runner *request.Runner, sess, crid string, ttl time.Duration) {
	agent := func(ctx context.Context, run *request.Run) (request.Answer, error) {
		sg, rg := run.Generations()
		w.say("grant %s %s %s %d %d", crid, run.SessionKey(), run.RequestID(), sg, rg)
		w.hook(StageAgent, crid)
		res, err := run.CallTool(ctx, "post", json.RawMessage(`{"req":"`+crid+`","n":1}`))
		if err != nil {
			return request.Answer{}, err
		}
		var posted struct {
			Effect string `json:"effect"`
		}
		if json.Unmarshal(res.Output, &posted) == nil && posted.Effect != "" {
			w.say("posted %s %s", crid, posted.Effect)
		}
		w.hook(StageToolDone, crid)
		if _, err := run.CallTool(ctx, "notify", json.RawMessage(`{"req":"`+crid+`","n":1}`)); err != nil {
			return request.Answer{}, err
		}
		w.hook(StageAgentDone, crid)
		return request.Answer{Reply: "ok " + crid}, nil
	}
	// Busy and in flight are retried here for a few TTLs: a killed
	// holder's leases expire within one.
	deadline := time.Now().Add(3 * ttl)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*ttl)
		out, err := runner.Handle(ctx, request.Message{SessionKey: sess, ClientRequestID: crid, Content: "pay " + crid}, agent)
		cancel()
		w.hook(StageHandled, crid)
		if err == nil {
			w.say("answer %s %v %s", crid, out.Replayed, out.Reply)
			return
		}
		class := errClass(err)
		if (class == "busy" || class == "inflight") && time.Now().Before(deadline) {
			time.Sleep(ttl/10 + rand.N(ttl/5))
			continue
		}
		w.say("status %s %s %d", crid, class, httpapi.StatusCode(err))
		w.say("error %s %s %s", crid, class, strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
}

func errClass(err error) string {
	switch {
	case errors.As(err, new(*session.BusyError)):
		return "busy"
	case errors.Is(err, request.ErrInFlight):
		return "inflight"
	case errors.Is(err, request.ErrTakenOver), errors.Is(err, lease.ErrLost):
		return "takenover"
	case errors.As(err, new(*toolexec.UnknownOutcomeError)):
		return "unknown-outcome"
	case errors.Is(err, request.ErrAgentFailed):
		return "agent-failed"
	}
	return "other"
}

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/schema"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Receiver is the remote side of the external "notify" tool: it performs
// an effect once per Idempotency-Key and answers a repeated key with the
// first receipt, as a payment provider does.
type Receiver struct {
	srv *httptest.Server

	mu        sync.Mutex
	receipts  map[string]string   // effect key → receipt
	performed map[string][]string // call (request:n) → effect keys performed
}

// NewReceiver starts a Receiver on a loopback port; Close stops it.
func NewReceiver() *Receiver {
	r := &Receiver{receipts: map[string]string{}, performed: map[string][]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// URL is where the notify tool posts.
func (r *Receiver) URL() string { return r.srv.URL + "/effect" }

// Close stops the server.
func (r *Receiver) Close() { r.srv.Close() }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	key := req.Header.Get("Idempotency-Key")
	var a struct {
		Req string `json:"req"`
		N   int    `json:"n"`
	}
	if key == "" || json.NewDecoder(req.Body).Decode(&a) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	receipt, seen := r.receipts[key]
	if !seen {
		receipt = fmt.Sprintf("receipt-%d", len(r.receipts)+1)
		r.receipts[key] = receipt
		call := a.Req + ":" + strconv.Itoa(a.N)
		r.performed[call] = append(r.performed[call], key)
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"receipt":%q}`, receipt)
}

// Performed returns, per call, how many effects were performed (distinct
// keys).
func (r *Receiver) Performed() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.performed))
	for c, keys := range r.performed {
		out[c] = len(keys)
	}
	return out
}

// CrashConfig configures RunCrash.
type CrashConfig struct {
	Env *Env
	// Sessions × PerSession requests are sent, resent until answered.
	Sessions, PerSession int
	// Procs worker processes run at once; each gets up to 3 requests.
	Procs int
	// KillOneIn: one process in KillOneIn is killed (0: none); Kills,
	// when set, keeps going (with new requests) until that many kills.
	KillOneIn, Kills int
	// TTL of the workers' leases.
	TTL time.Duration
	// MaxRounds bounds the resends; default 200.
	MaxRounds int
	// Restart, when set, restarts the database server every RestartEvery
	// while workers run (kill -9 and start on the same data).
	Restart      func() error
	RestartEvery time.Duration
	// Restarts, when set, keeps the run going (with new requests) until
	// that many restarts were made, and makes no more.
	Restarts int
	// RestartDelay, when set, draws each wait before a restart instead
	// of RestartEvery (a seeded source, so that a run can be replayed).
	RestartDelay func() time.Duration
	// Dwell, when set, makes each worker stay up to that long (at
	// random) at every stage it announces — in the tool's open
	// transaction, after the external act, and so on — so that a fault
	// at a random instant lands in every part of the flow, and leases
	// are renewed meanwhile.
	Dwell time.Duration
	// InFlow, when set, makes each restart wait (up to 6 TTLs) until a
	// worker is inside a request's flow — it announced a stage other
	// than "handled" last — and then up to Dwell more, at random: else
	// most restarts land while workers wait on each other's locks.
	InFlow bool
	// Verify, when set, resends every answered request once more after
	// the run, with no fault: each must be answered with its stored
	// reply (Replayed); one that runs again had its reply lost.
	Verify bool
	Log    func(format string, args ...any)
}

// CrashReport sums up RunCrash.
type CrashReport struct {
	Requests, Answered int
	Processes          int
	Kills              map[string]int // where the kills landed: the stage announced last
	Duplicates         int            // calls whose effect committed or was performed more than once
	Unanswered         int            // requests never answered on resend
	StillHeld          int            // lease rows still held a TTL after the last worker ended
	StuckTools         int            // tool executions left processing or started
	Restarts           int            // database server restarts
	// RestartLanded counts, over the restarts, the stage each worker
	// in flight had announced last ("no request in flight" when none).
	RestartLanded map[string]int
	// RestartTimes are the instants the restarts began.
	RestartTimes []time.Time
	// AnswerTimes are the instants answers arrived, in order.
	AnswerTimes []time.Time
	// DBDuplicates and ExtDuplicates split Duplicates: calls whose row
	// committed more than once, calls performed under more than one
	// effect key.
	DBDuplicates, ExtDuplicates int
	// Stale counts effect rows whose tool execution is not recorded as
	// a success: a fenced write that committed without its execution.
	Stale int
	// LostPosts counts post calls a worker saw commit (it printed the
	// effect's id) whose row is not in the database at the end.
	LostPosts int
	// Reruns counts requests answered that ran again on the
	// verification resend (their stored reply was lost); Verified those
	// answered with their stored reply.
	Reruns, Verified int
	// Refusals counts the errors workers answered instead of a reply, by
	// class (busy, inflight, takenover, unknown-outcome, agent-failed,
	// other): each is resent.
	Refusals map[string]int
	// Losses are the requests workers answered with a lost lease
	// (class takenover), with the worker's node and lifetime.
	Losses []Loss
	// Others counts the "other", "takenover" and "agent-failed" errors
	// by their class and first words, for the log.
	Others map[string]int
	// Statuses counts the errors of Refusals by class and the HTTP status
	// httpapi.StatusCode gives them ("other 503").
	Statuses map[string]int
	// Grants are the session and request grants the workers' agents ran
	// under, and Intents the effect keys their external tool acted under
	// (each announced in a committed intent first), in the order seen: a
	// failover test looks for them on the promoted server.
	Grants  []Grant
	Intents []Intent
	Errors  []string
}

// Grant is a run's locks as its agent saw them.
type Grant struct {
	Request, Session, RequestID string // client request id, session key, request row id
	SessionGen, RequestGen      int64
}

// Intent is an external effect about to be performed under Key, its
// intent committed, for client request Request.
type Intent struct{ Request, Key string }

// record adds what a worker's line reports of grants and intents.
func (r *CrashReport) record(f []string) {
	switch {
	case len(f) == 6 && f[0] == "grant":
		sg, err1 := strconv.ParseInt(f[4], 10, 64)
		rg, err2 := strconv.ParseInt(f[5], 10, 64)
		if err1 == nil && err2 == nil {
			r.Grants = append(r.Grants, Grant{Request: f[1], Session: f[2], RequestID: f[3], SessionGen: sg, RequestGen: rg})
		}
	case len(f) == 3 && f[0] == "intent":
		r.Intents = append(r.Intents, Intent{Request: f[1], Key: f[2]})
	case len(f) == 4 && f[0] == "status":
		r.Statuses[f[2]+" "+f[3]]++
	}
}

// Loss is a request a worker answered with a lost lease.
type Loss struct {
	Node       int // the worker's index in Env.WorkerDSNs, or -1
	Start, End time.Time
	// Gone: a renewal or a fenced write found the token gone (rather
	// than the trust deadline passing with no renewal).
	Gone bool
	Msg  string
}

// TotalKills is the number of processes killed.
func (r CrashReport) TotalKills() int {
	n := 0
	for _, v := range r.Kills {
		n += v
	}
	return n
}

// stages a self-kill can be planned at; "random" is a kill by the parent
// at a random instant.
var killStages = []string{StageAgent, StageToolTx, StageToolDone, StageActed, StageAgentDone, StageHandled, "random", "random"}

type proc struct {
	cmd     *exec.Cmd
	jobs    []string
	lines   []string
	answers []time.Time // when each "answer" line arrived
	node    int         // index in Env.WorkerDSNs, or -1
	start   time.Time
	done    chan struct{}
	mu      sync.Mutex
}

func (p *proc) last(prefix string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(p.lines[i], prefix) {
			return p.lines[i]
		}
	}
	return ""
}

func (p *proc) snapshot() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// startWorker runs the test binary again as a worker with jobs and plans.
func startWorker(e *Env, recv *Receiver, ttl time.Duration, jobs []string, kill, pause plan, dwell ...time.Duration) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	dsn, node := e.DirectDSN, -1
	if len(e.WorkerDSNs) > 0 {
		node = int(e.nextWorker.Add(1)-1) % len(e.WorkerDSNs)
		dsn = e.WorkerDSNs[node]
	}
	cmd.Env = append(os.Environ(), WorkerEnv+"=1", envDriver+"="+e.Direct.DriverName(), envDSN+"="+dsn,
		envRecv+"="+recv.URL(), envJobs+"="+strings.Join(jobs, ","), envKill+"="+kill.String(),
		envPause+"="+pause.String(), envTTL+"="+strconv.Itoa(int(ttl.Milliseconds())))
	if e.MultiPrimary {
		cmd.Env = append(cmd.Env, envMulti+"=1")
	}
	if len(dwell) > 0 && dwell[0] > 0 {
		cmd.Env = append(cmd.Env, envDwell+"="+strconv.Itoa(int(dwell[0].Milliseconds())))
	}
	cmd.Stderr = os.Stderr
	// Each worker in its own process group: when a worker exits, the
	// kernel sends SIGCONT to every stopped member of an orphaned process
	// group, which would continue a paused worker too early.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, jobs: jobs, done: make(chan struct{}), node: node, start: time.Now()}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			if strings.HasPrefix(sc.Text(), "answer ") {
				p.answers = append(p.answers, time.Now())
			}
			p.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	return p, nil
}

// waitLine waits until p prints a line starting with prefix, or exits.
func (p *proc) waitLine(ctx context.Context, prefix string) bool {
	for {
		if p.last(prefix) != "" {
			return true
		}
		select {
		case <-p.done:
			return p.last(prefix) != ""
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// RunCrash runs the crash matrix: worker processes run requests through
// the whole flow, some killed with SIGKILL at a random point; requests
// not answered are sent again by other workers; at the end the
// invariants are checked on the database and the receiver.
func RunCrash(ctx context.Context, cfg CrashConfig) (CrashReport, error) {
	if cfg.MaxRounds == 0 {
		cfg.MaxRounds = 200
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	e := cfg.Env
	recv := NewReceiver()
	defer recv.Close()
	rep := CrashReport{Kills: map[string]int{}, Refusals: map[string]int{}, Others: map[string]int{}, RestartLanded: map[string]int{},
		Statuses: map[string]int{}}
	var pending []string
	next := 0
	addRequests := func(n int) {
		for range n {
			s := next % cfg.Sessions
			pending = append(pending, fmt.Sprintf("s%d/m%d", s, next))
			next++
		}
		rep.Requests += n
	}
	addRequests(cfg.Sessions * cfg.PerSession)
	answered := map[string]string{}
	posted := map[string]bool{}    // effect ids workers saw committed
	lastErr := map[string]string{} // the last error each request was answered with
	// The workers in flight, for where a restart lands.
	var liveMu sync.Mutex
	var live []*proc
	var restartErr error // a restart that failed ends the run
	restart := cfg.Restart
	if restart != nil {
		restart = func() error {
			if cfg.InFlow {
				inFlow(ctx, &liveMu, &live, cfg.Dwell, max(5*time.Second, 6*cfg.TTL))
			}
			liveMu.Lock()
			if cfg.Restarts > 0 && len(rep.RestartTimes) >= cfg.Restarts {
				liveMu.Unlock()
				return nil
			}
			inFlight := 0
			for _, p := range live {
				select {
				case <-p.done:
					continue
				default:
				}
				inFlight++
				where := "before any stage"
				if l := p.last("stage "); l != "" {
					where = "after " + strings.Fields(l)[1]
				}
				rep.RestartLanded[where]++
			}
			if inFlight == 0 {
				rep.RestartLanded["no request in flight"]++
			}
			rep.RestartTimes = append(rep.RestartTimes, time.Now())
			liveMu.Unlock()
			err := cfg.Restart()
			if err != nil {
				liveMu.Lock()
				restartErr = err
				liveMu.Unlock()
			}
			return err
		}
	}
	stopRestarts := restarts(ctx, restart, cfg.RestartEvery, cfg.RestartDelay)
	others := 0
	for round := 0; ctx.Err() == nil; round++ {
		if len(pending) == 0 {
			liveMu.Lock()
			restarted, failed := len(rep.RestartTimes), restartErr != nil
			liveMu.Unlock()
			if rep.TotalKills() >= cfg.Kills && restarted >= cfg.Restarts || failed || round >= cfg.MaxRounds {
				break
			}
			addRequests(cfg.Sessions * cfg.PerSession)
		}
		if round >= cfg.MaxRounds+50 {
			break
		}
		killing := cfg.KillOneIn > 0 && round < cfg.MaxRounds
		var procs []*proc
		var killers sync.WaitGroup
		for range cfg.Procs {
			jobs := pick(pending, 1+rand.IntN(3))
			var kill plan
			if killing && rand.IntN(cfg.KillOneIn) == 0 {
				st := killStages[rand.IntN(len(killStages))]
				if st != "random" {
					kill = plan{stage: st, job: rand.IntN(len(jobs))}
					if st == StageAgentDone {
						kill.delay = time.Duration(1+rand.IntN(3000)) * time.Microsecond
					}
				}
				p, err := startWorker(e, recv, cfg.TTL, jobs, kill, plan{}, cfg.Dwell)
				if err != nil {
					return rep, err
				}
				rep.Processes++
				procs = append(procs, p)
				if st == "random" {
					d := 50*time.Millisecond + rand.N(cfg.TTL)
					killers.Go(func() {
						select {
						case <-p.done:
						case <-time.After(d):
							_ = p.cmd.Process.Signal(syscall.SIGKILL)
						}
					})
				}
				continue
			}
			p, err := startWorker(e, recv, cfg.TTL, jobs, plan{}, plan{}, cfg.Dwell)
			if err != nil {
				return rep, err
			}
			rep.Processes++
			procs = append(procs, p)
		}
		liveMu.Lock()
		live = procs
		liveMu.Unlock()
		killers.Wait()
		for _, p := range procs {
			<-p.done
			p.mu.Lock()
			liveMu.Lock()
			rep.AnswerTimes = append(rep.AnswerTimes, p.answers...)
			liveMu.Unlock()
			p.mu.Unlock()
			ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
			lines := p.snapshot()
			if ws.Signaled() && ws.Signal() == syscall.SIGKILL {
				where := "before any stage"
				if k := p.last("kill "); k != "" {
					where = strings.Fields(k)[1]
					if where == StageAgentDone {
						where = "success mark / release"
					}
				} else if s := p.last("stage "); s != "" {
					where = "random, after " + strings.Fields(s)[1]
				}
				rep.Kills[where]++
			} else if !p.cmd.ProcessState.Success() {
				rep.Errors = append(rep.Errors, fmt.Sprintf("worker exited with %v: %q", p.cmd.ProcessState, lines))
			}
			for _, l := range lines {
				f := strings.Fields(l)
				rep.record(f)
				if len(f) >= 3 && f[0] == "error" {
					lastErr[f[1]] = strings.Join(f[2:], " ")
					rep.Refusals[f[2]]++
					if f[2] == "takenover" {
						msg := strings.Join(f[3:], " ")
						rep.Losses = append(rep.Losses, Loss{Node: p.node, Start: p.start, End: time.Now(),
							Gone: !strings.Contains(msg, "deadline"), Msg: msg})
					}
					if f[2] == "other" || f[2] == "takenover" || f[2] == "agent-failed" {
						msg := strings.Join(f[3:], " ")
						if len(msg) > 110 {
							msg = msg[:110]
						}
						rep.Others[f[2]+": "+msg]++
					}
				}
				if len(f) == 3 && f[0] == "posted" {
					posted[f[2]] = true
				}
				if len(f) >= 4 && f[0] == "answer" {
					reply := strings.Join(f[3:], " ")
					if want := "ok " + f[1]; reply != want {
						rep.Errors = append(rep.Errors, fmt.Sprintf("request %s answered %q, want %q", f[1], reply, want))
					}
					answered[f[1]] = reply
				}
			}
		}
		if len(pending) > 0 && rep.Refusals["other"] > others {
			// Workers failed on the database (a server restarting): wait
			// for it, or rounds and kills are spent on nothing.
			waitUp(ctx, e.Direct)
		}
		others = rep.Refusals["other"]
		var still []string
		for _, j := range pending {
			_, crid, _ := strings.Cut(j, "/")
			if _, ok := answered[crid]; !ok {
				still = append(still, j)
			}
		}
		pending = still
		if round%20 == 0 {
			cfg.Log("crash %s round %d: %d processes, %d kills, %d/%d answered", e.Dialect, round, rep.Processes, rep.TotalKills(), len(answered), rep.Requests)
		}
	}
	n, rerr := stopRestarts()
	rep.Restarts = n
	if rerr != nil {
		rep.Errors = append(rep.Errors, rerr.Error())
	}
	if err := ctx.Err(); err != nil {
		// Say what the run was still waiting for: its requests, and its
		// restarts.
		return rep, fmt.Errorf("%w: %d of %d restarts made; %d requests unanswered%s",
			err, n, cfg.Restarts, len(pending), unanswered(pending, lastErr))
	}
	sort.Slice(rep.AnswerTimes, func(i, j int) bool { return rep.AnswerTimes[i].Before(rep.AnswerTimes[j]) })
	rep.Answered = len(answered)
	rep.Unanswered = rep.Requests - rep.Answered
	if cfg.Verify {
		if err := verify(ctx, e, recv, cfg, answered, &rep); err != nil {
			return rep, err
		}
	}
	if err := checkPosted(ctx, e, posted, &rep); err != nil {
		return rep, err
	}
	return rep, checkInvariants(ctx, e, recv, cfg.TTL, &rep)
}

// verify resends every answered request once, a few per worker, and
// counts those answered with their stored reply and those that ran again.
func verify(ctx context.Context, e *Env, recv *Receiver, cfg CrashConfig, answered map[string]string, rep *CrashReport) error {
	var jobs []string
	for crid := range answered {
		// Requests are "s<k>/m<n>" with k = n mod Sessions.
		var n int
		if _, err := fmt.Sscanf(crid, "m%d", &n); err != nil {
			return fmt.Errorf("chaos: request id %q", crid)
		}
		jobs = append(jobs, fmt.Sprintf("s%d/%s", n%cfg.Sessions, crid))
	}
	sort.Strings(jobs)
	for len(jobs) > 0 {
		var procs []*proc
		for range cfg.Procs {
			if len(jobs) == 0 {
				break
			}
			k := min(8, len(jobs))
			p, err := startWorker(e, recv, cfg.TTL, jobs[:k], plan{}, plan{})
			if err != nil {
				return err
			}
			jobs = jobs[k:]
			procs = append(procs, p)
		}
		for _, p := range procs {
			<-p.done
			for _, l := range p.snapshot() {
				f := strings.Fields(l)
				rep.record(f)
				switch {
				case len(f) >= 4 && f[0] == "answer":
					reply := strings.Join(f[3:], " ")
					if reply != "ok "+f[1] {
						rep.Errors = append(rep.Errors, fmt.Sprintf("request %s answered %q on the verification resend", f[1], reply))
					}
					if f[2] == "true" {
						rep.Verified++
					} else {
						rep.Reruns++
					}
				case len(f) >= 3 && f[0] == "error":
					rep.Errors = append(rep.Errors, fmt.Sprintf("verification resend: %s", l))
				}
			}
		}
	}
	return nil
}

// checkPosted counts the effect rows workers saw committed that are gone,
// and the effect rows whose tool execution is not a recorded success.
func checkPosted(ctx context.Context, e *Env, posted map[string]bool, rep *CrashReport) error {
	rows, err := e.Direct.QueryContext(ctx, "SELECT f.id, COALESCE(x.status, '') FROM "+EffectsTable+" f LEFT JOIN "+
		schema.ToolExecutionTable+" x ON x.id = f.exec_id")
	if err != nil {
		return err
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			return err
		}
		have[id] = true
		if status != schema.StoredSucceeded {
			rep.Stale++
			rep.Errors = append(rep.Errors, fmt.Sprintf("effect %s committed; its tool execution is %q", id, status))
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for id := range posted {
		if !have[id] {
			rep.LostPosts++
		}
	}
	return nil
}

// inFlow waits until a live worker's last line is a stage of the flow
// (not "handled"), at most limit, then up to dwell more.
func inFlow(ctx context.Context, mu *sync.Mutex, live *[]*proc, dwell, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		mu.Lock()
		found := false
		for _, p := range *live {
			select {
			case <-p.done:
				continue
			default:
			}
			if l := p.last("stage "); l != "" && !strings.HasPrefix(l, "stage "+StageHandled) {
				found = true
			}
		}
		mu.Unlock()
		if found {
			break
		}
		if !sleepCtx(ctx, 5*time.Millisecond) {
			return
		}
	}
	if dwell > 0 {
		sleepCtx(ctx, rand.N(dwell))
	}
}

// restarts restarts the server every every until the returned stop is
// called; stop returns how many restarts were made, and the first error.
func restarts(ctx context.Context, restart func() error, every time.Duration, delay func() time.Duration) (stop func() (int, error)) {
	if restart == nil || (every <= 0 && delay == nil) {
		return func() (int, error) { return 0, nil }
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var n int
	var err error
	wg.Go(func() {
		wait := func() time.Duration {
			if delay != nil {
				return delay()
			}
			return every
		}
		for sleepCtx(rctx, wait()) {
			if err = restart(); err != nil {
				return
			}
			n++
		}
	})
	return func() (int, error) {
		cancel()
		wg.Wait()
		return n, err
	}
}

// pick returns up to n distinct elements of s, at random.
func pick(s []string, n int) []string {
	idx := rand.Perm(len(s))
	out := make([]string, 0, n)
	for _, i := range idx[:min(n, len(s))] {
		out = append(out, s[i])
	}
	return out
}

// checkInvariants checks, after the last worker ended: no call's effect
// committed or performed twice; no lease row still held one TTL later; no
// tool execution left processing or started.
func checkInvariants(ctx context.Context, e *Env, recv *Receiver, ttl time.Duration, rep *CrashReport) error {
	db := e.Direct
	end := time.Now()
	rows, err := db.QueryContext(ctx, "SELECT crid, n, COUNT(*) FROM "+EffectsTable+" GROUP BY crid, n HAVING COUNT(*) > 1")
	if err != nil {
		return err
	}
	for rows.Next() {
		var crid string
		var n, c int
		if err := rows.Scan(&crid, &n, &c); err != nil {
			rows.Close()
			return err
		}
		rep.Duplicates++
		rep.DBDuplicates++
		rep.Errors = append(rep.Errors, fmt.Sprintf("post %s:%d committed %d times", crid, n, c))
	}
	rows.Close()
	var calls []string
	for call, n := range recv.Performed() {
		if n > 1 {
			calls = append(calls, call)
			rep.Duplicates++
			rep.ExtDuplicates++
			rep.Errors = append(rep.Errors, fmt.Sprintf("notify %s performed under %d keys", call, n))
		}
	}
	sort.Strings(calls)
	var stuck int
	q := "SELECT COUNT(*) FROM " + schema.ToolExecutionTable + " WHERE status IN ('processing', 'started')"
	if err := db.QueryRowContext(ctx, q).Scan(&stuck); err != nil {
		return err
	}
	rep.StuckTools = stuck
	// No one is alive to renew: every lease must have expired one TTL
	// (plus scheduling slack) after the last worker ended.
	held := func() (int, error) {
		total := 0
		for _, t := range []string{schema.SessionTable, schema.RequestTable, schema.ToolExecutionTable} {
			var n int
			q := "SELECT COUNT(*) FROM " + t + " WHERE token IS NOT NULL AND expires_at > " + engine.Now(e.Dialect)
			if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
				return 0, err
			}
			total += n
		}
		return total, nil
	}
	for {
		n, err := held()
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if time.Since(end) > ttl+time.Second {
			rep.StillHeld = n
			rep.Errors = append(rep.Errors, fmt.Sprintf("%d leases still held %s after the last worker ended (TTL %s)", n, time.Since(end).Round(time.Millisecond), ttl))
			break
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

// unanswered lists up to 5 of the pending jobs with the last error each
// was answered with ("never tried" when a worker never reached it).
func unanswered(pending []string, lastErr map[string]string) string {
	var b strings.Builder
	for i, j := range pending {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(pending)-5)
			break
		}
		_, crid, _ := strings.Cut(j, "/")
		last, ok := lastErr[crid]
		if !ok {
			last = "never answered"
		}
		if len(last) > 160 {
			last = last[:160]
		}
		fmt.Fprintf(&b, "; %s: %s", j, last)
	}
	return b.String()
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// TestKill9Wait kills worker processes with SIGKILL while their runs wait
// for a person (request.Await) and while the person's answers are applied.
//
// The workers are this test binary started again (waitWorkerEnv): each
// runs a Started request.Runner with the agent of this file and takes
// messages and answers over HTTP. The agent asks a model that words
// every answer otherwise and picks its amounts at random (a step), books
// a deposit (a tool call: a row of waitLedgerTable in its transaction),
// asks for approval (request.Await), and, approved, books the approved
// amount (a second tool call); then it asks the model to word the reply
// (a second step). Denied, it books nothing more.
//
// The test sends messages, a few at once, each through a worker picked at
// random; waits until each waits; answers it, approve or deny by turn,
// and one message in three twice at once through two workers. Meanwhile
// it kills workers at random instants aimed at each phase — while a run
// before the wait is under way, while an answer is being applied, after
// the approved booking committed and before the reply, or anywhere — and
// starts a new one in the place of each. A client whose worker died sends
// its message or answer again through another one, or, half the time when
// the request was accepted (or its answer recorded), leaves it to the
// service: a Started Runner resumes it.
//
// At the end every message finished; every one has exactly one deposit,
// every approved one exactly one approved booking of the amount it asked
// about, every denied one none; the answers sent twice got the same reply;
// and the model was asked at most once per recorded step plus once per
// kill of a process that had a run of the message under way.
//
// Sized by waitKills: 8 kills per dialect in go test (3 with -short), and
// ROWLEASE_CHAOS_STEP_KILLS per dialect in the long run (make chaos).
func TestKill9Wait(t *testing.T) {
	kills, long := waitKills(t)
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			if long {
				t.Parallel()
			}
			runWaitKills(t, d, kills, max(kills+kills/2, 6))
		})
	}
}

// waitKills is how many workers TestKill9Wait kills per dialect: 8 in go
// test (two aimed at each phase and two anywhere), 3 with -short, and
// stepKills' number (ROWLEASE_CHAOS_STEP_KILLS) in the long run.
func waitKills(t *testing.T) (int, bool) {
	n, long := stepKills(t)
	switch {
	case long:
		return n, true
	case testing.Short():
		return 3, false
	}
	return 8, false
}

// ---- the worker process ----------------------------------------------

const (
	// waitWorkerEnv set to 1 makes the test binary a worker of
	// TestKill9Wait (see init): it never reaches the tests.
	waitWorkerEnv = "BOOKKEEPER_TEST_WAIT_WORKER"
	// waitDBEnv is the worker's database, a -db value, and waitTTLEnv
	// its leases' TTL.
	waitDBEnv  = "BOOKKEEPER_TEST_WAIT_DB"
	waitTTLEnv = "BOOKKEEPER_TEST_WAIT_TTL"
	// waitLedgerTable is the ledger the agent books in: no unique key on
	// a message and kind, so a second booking would show as a second row.
	waitLedgerTable = "wait_ledger"
	waitTool        = "book"
	waitName        = "approve"
)

// The worker is started from init rather than TestMain (main_test.go),
// which belongs to the bookkeeper's own child processes: this file keeps
// to itself.
func init() {
	if os.Getenv(waitWorkerEnv) == "1" {
		os.Exit(waitWorkerMain())
	}
}

// waitEvent is what a worker reports on its stdout, one line each ("ev
// KIND CLIENT_REQUEST_ID [DETAIL]"): a write to a pipe that returned is
// read by the test even when the process is killed right after it.
const (
	evMessage = "message" // the HTTP handler got the message, before Handle
	evAnswer  = "answer"  // the HTTP handler got the answer, before Answer
	evAgent   = "agent"   // the agent starts
	evDone    = "done"    // the agent returns (DETAIL: replied, waiting or failed)
	evModel   = "model"   // the model is asked (inside a step, before it is recorded)
	evBooked  = "booked"  // a booking committed (DETAIL: deposit or approved)
)

type waitWorker struct {
	mu sync.Mutex // one line per write
}

func (w *waitWorker) emit(kind, id string, detail ...string) {
	line := strings.Join(append([]string{"ev", kind, id}, detail...), " ") + "\n"
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = os.Stdout.WriteString(line)
}

// waitPlan is the model's decision before the wait: all of it random.
type waitPlan struct {
	Deposit int    `json:"deposit"`
	Amount  int    `json:"amount"`
	Note    string `json:"note"`
}

// waitQuestion is what the agent asks the person.
type waitQuestion struct {
	Amount int    `json:"amount"`
	Note   string `json:"note"`
}

type waitApproval struct {
	Approved bool `json:"approved"`
}

type waitBooking struct {
	ClientRequestID string `json:"client_request_id"`
	Kind            string `json:"kind"`
	Amount          int    `json:"amount"`
	Note            string `json:"note"`
}

var waitWords = []string{"rent", "lunch", "taxi", "coffee", "books", "fuel", "rice", "tea", "gift", "fees", "repairs", "tickets"}

// wording is a different text every time.
func wording() string {
	return fmt.Sprintf("%s and %s, take %d", waitWords[rand.IntN(len(waitWords))], waitWords[rand.IntN(len(waitWords))], rand.IntN(1_000_000))
}

// nap sleeps a random time in [lo, hi).
func nap(lo, hi time.Duration) { time.Sleep(lo + rand.N(hi-lo)) }

func (w *waitWorker) agent(ctx context.Context, run *request.Run) (_ request.Answer, err error) {
	id := run.ClientRequestID()
	w.emit(evAgent, id)
	defer func() {
		switch {
		case err == nil:
			w.emit(evDone, id, "replied")
		case errors.Is(err, request.ErrWaiting):
			w.emit(evDone, id, "waiting")
		default:
			w.emit(evDone, id, "failed") // its lease lost, most likely: a step may have gone unrecorded
		}
	}()
	p, err := request.Step(ctx, run, "model", func(ctx context.Context) (waitPlan, error) {
		w.emit(evModel, id)
		nap(5*time.Millisecond, 30*time.Millisecond)
		return waitPlan{Deposit: 1 + rand.IntN(999), Amount: 100 + rand.IntN(9900), Note: wording()}, nil
	})
	if err != nil {
		return request.Answer{}, err
	}
	if err := w.book(ctx, run, "deposit", p.Deposit, p.Note); err != nil {
		return request.Answer{}, err
	}
	a, err := request.Await[waitApproval](ctx, run, waitName, waitQuestion{Amount: p.Amount, Note: p.Note}, request.Within(time.Hour))
	if err != nil {
		return request.Answer{}, err // request.ErrWaiting among others
	}
	verb := "denied"
	if a.Approved {
		verb = "booked"
		nap(0, 20*time.Millisecond)
		if err := w.book(ctx, run, "approved", p.Amount, p.Note); err != nil {
			return request.Answer{}, err
		}
		nap(10*time.Millisecond, 40*time.Millisecond)
	}
	words, err := request.Step(ctx, run, "words", func(ctx context.Context) (string, error) {
		w.emit(evModel, id)
		nap(5*time.Millisecond, 30*time.Millisecond)
		return wording(), nil
	})
	if err != nil {
		return request.Answer{}, err
	}
	return request.Answer{Reply: fmt.Sprintf("%s %d: %s", verb, p.Amount, words)}, nil
}

func (w *waitWorker) book(ctx context.Context, run *request.Run, kind string, amount int, note string) error {
	args, _ := json.Marshal(waitBooking{ClientRequestID: run.ClientRequestID(), Kind: kind, Amount: amount, Note: note})
	if _, err := run.CallTool(ctx, waitTool, args); err != nil {
		return err
	}
	w.emit(evBooked, run.ClientRequestID(), kind)
	return nil
}

// bookTool writes the booking's ledger row in the tool's transaction.
func bookTool(d lease.Dialect) toolexec.SideEffect {
	insert := d.Rebind("INSERT INTO " + waitLedgerTable + " (id, crid, kind, amount, note, exec_id) VALUES (?, ?, ?, ?, ?, ?)")
	return func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		var b waitBooking
		if err := json.Unmarshal(x.Canonical, &b); err != nil {
			return nil, err
		}
		id := uuid.NewString()
		if _, err := x.Tx.ExecContext(ctx, insert, id, b.ClientRequestID, b.Kind, b.Amount, b.Note, x.ExecutionID); err != nil {
			return nil, err
		}
		return json.Marshal(map[string]string{"entry": id})
	}
}

// waitCall is a request to a worker: a message, or an answer to it.
type waitCall struct {
	Session  string `json:"session"`
	ID       string `json:"id"`
	Content  string `json:"content"`
	Approved bool   `json:"approved"`
}

// waitResult is a worker's response.
type waitResult struct {
	Reply    string            `json:"reply"`
	Waiting  *request.Question `json:"waiting"`
	Attempt  int64             `json:"attempt"`
	Replayed bool              `json:"replayed"`
	Kind     string            `json:"kind"` // of the error
	Error    string            `json:"error"`
	code     int
}

func writeWaitResult(w http.ResponseWriter, out request.Outcome, err error) {
	res := waitResult{Reply: out.Reply, Waiting: out.Waiting, Attempt: out.Attempt, Replayed: out.Replayed}
	code := http.StatusOK
	if err != nil {
		res.Error = err.Error()
		var busy *session.BusyError
		var answered *request.AnsweredError
		var notWaiting *request.NotWaitingError
		switch {
		case errors.Is(err, request.ErrInFlight):
			code, res.Kind = http.StatusConflict, "in flight"
		case errors.Is(err, request.ErrTakenOver):
			code, res.Kind = http.StatusConflict, "taken over"
		case errors.As(err, &busy):
			code, res.Kind = http.StatusConflict, "session busy"
		case errors.As(err, &answered):
			code, res.Kind = http.StatusUnprocessableEntity, "answered otherwise"
		case errors.As(err, &notWaiting):
			code, res.Kind = http.StatusUnprocessableEntity, "not waiting"
		default:
			code, res.Kind = http.StatusInternalServerError, "error"
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(res)
}

func waitWorkerMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "wait worker:", err)
		return 1
	}
	st, err := store.Open(ctx, os.Getenv(waitDBEnv))
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	w := &waitWorker{}
	tools := toolexec.NewRegistry()
	if err := tools.Register(waitTool, bookTool(st.Dialect)); err != nil {
		return fail(err)
	}
	ttl, err := time.ParseDuration(os.Getenv(waitTTLEnv))
	if err != nil {
		return fail(err)
	}
	r, err := request.New(request.Config{DB: st.DB, Dialect: st.Dialect, TTL: ttl, Tools: tools, Agent: w.agent,
		Queue:  request.QueueConfig{DispatchInterval: 50 * time.Millisecond},
		Resume: request.ResumeConfig{Grace: 100 * time.Millisecond, Backoff: 200 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return fail(err)
	}
	defer r.Close(context.Background())
	if err := r.Start(ctx); err != nil {
		return fail(err)
	}
	read := func(rw http.ResponseWriter, req *http.Request) (waitCall, bool) {
		var c waitCall
		if err := json.NewDecoder(req.Body).Decode(&c); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return c, false
		}
		return c, true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /message", func(rw http.ResponseWriter, req *http.Request) {
		if c, ok := read(rw, req); ok {
			w.emit(evMessage, c.ID)
			out, err := r.Handle(req.Context(), request.Message{SessionKey: c.Session, ClientRequestID: c.ID, Content: c.Content}, nil)
			writeWaitResult(rw, out, err)
		}
	})
	mux.HandleFunc("POST /answer", func(rw http.ResponseWriter, req *http.Request) {
		if c, ok := read(rw, req); ok {
			w.emit(evAnswer, c.ID)
			out, err := r.Answer(req.Context(), c.Session, c.ID, waitName, waitApproval{Approved: c.Approved})
			writeWaitResult(rw, out, err)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(os.Stdout, "listening on http://%s\n", ln.Addr())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return 0
}

// ---- the test process ------------------------------------------------

// waitProc is a worker process.
type waitProc struct {
	cmd    *exec.Cmd
	url    string
	stderr *syncBuffer
	eof    chan struct{} // its stdout was read to the end
	done   chan struct{} // it exited (after eof)
	// Guarded by waitKillTest.mu:
	dying bool
	calls map[string]int  // client request id → calls of the test under way in it
	open  map[string]int  // client request id → agent runs under way in it
	ran   map[string]bool // client request id → its agent ran in it
}

// waitMsg is one message of the test.
type waitMsg struct {
	i           int
	id, session string
	approve     bool // the person's answer
	twice       bool // sent twice at once, through two workers
	// Set by the message's driver:
	question waitQuestion
	replies  []string // every reply the answers got
	// Guarded by waitKillTest.mu:
	waitGen    int64 // the request's generation when it waited
	answering  bool  // an answer was sent
	leftAlone  int   // times its client left it to the service after a kill
	byService  bool  // its answer was finished by the service after a kill, not by a resend
	modelCalls int
	touched    bool // a killed process had run its agent, or had a call of its client under way
	kills      int  // kills of a process in which its agent was running
	failedRuns int  // runs whose agent returned an error (other than request.ErrWaiting)
}

// waitAim is where a kill is aimed.
type waitAim int

const (
	aimBeforeWait  waitAim = iota // a random instant of a run before its wait
	aimApplying                   // a random instant after a worker got an answer
	aimAfterBooked                // right after the approved booking committed, before the reply
	aimAnywhere                   // a random instant, in a random worker
	numWaitAims
)

func (a waitAim) String() string {
	return [...]string{"before the wait", "while the answer is applied", "after the approved booking, before the reply", "anywhere"}[a]
}

// evWatch is the killer's wish for an event.
type evWatch struct {
	match func(p *waitProc, kind string, m *waitMsg, detail string) bool
	ch    chan evHit
}

// evHit is the event the killer waited for: in worker p, about message m.
type evHit struct {
	p *waitProc
	m *waitMsg
}

type waitKillTest struct {
	t      *testing.T
	d      lease.Dialect
	dbURL  string
	st     *store.Store
	runner *request.Runner // for Status only: no agent, not started
	ttl    time.Duration   // the workers' leases'
	client *http.Client

	mu       sync.Mutex
	rng      *rand.Rand
	procs    []*waitProc // live
	msgs     []*waitMsg
	byID     map[string]*waitMsg
	watch    *evWatch
	landings map[string]int // where the kills landed, per message they hit
	aimed    map[waitAim]int
	phases   map[waitAim]map[string]int // kills per aim, per phase they landed in
	answers  map[string]int             // what the clients got
	kills    int
}

func runWaitKills(t *testing.T, d lease.Dialect, kills, minMsgs int) {
	start := time.Now()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	k := &waitKillTest{t: t, d: d, rng: rand.New(rand.NewPCG(seed, 0x77616974)), byID: map[string]*waitMsg{},
		landings: map[string]int{}, aimed: map[waitAim]int{}, phases: map[waitAim]map[string]int{}, answers: map[string]int{},
		client: &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{}}, ttl: time.Second}
	if d == lease.SQLite {
		// Three processes take turns at SQLite's one write lock: with
		// the -race build on a small machine, a heartbeat may wait for
		// it longer than a 1s lease allows, and runs would lose their
		// leases for no kill (they are counted, see check).
		k.ttl = 3 * time.Second
	}
	t.Cleanup(k.client.CloseIdleConnections)
	k.dbURL, k.st = killDB(t, d)
	ctx := context.Background()
	require.NoError(t, schema.Apply(ctx, k.st.DB, k.st.Dialect))
	_, err := k.st.DB.ExecContext(ctx, "CREATE TABLE "+waitLedgerTable+
		" (id VARCHAR(36) NOT NULL PRIMARY KEY, crid VARCHAR(64) NOT NULL, kind VARCHAR(16) NOT NULL,"+
		" amount INTEGER NOT NULL, note VARCHAR(255) NOT NULL, exec_id VARCHAR(64) NOT NULL)")
	require.NoError(t, err)
	k.runner, err = request.New(request.Config{DB: k.st.DB, Dialect: k.st.Dialect, TTL: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = k.runner.Close(context.Background()) })

	const workers, inFlight = 3, 3
	for range workers {
		k.startProc()
	}
	// The clients: inFlight messages at once, new ones until the kills
	// are made and minMsgs were sent.
	stopFeeding := make(chan struct{})
	var drivers sync.WaitGroup
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		slots := make(chan struct{}, inFlight)
		for i := 1; ; i++ {
			select {
			case <-stopFeeding:
				if i > minMsgs {
					return
				}
			default:
			}
			slots <- struct{}{}
			m := k.newMsg(i)
			drivers.Go(func() {
				defer func() { <-slots }()
				k.drive(m)
			})
		}
	}()

	for i := range kills {
		aim := waitAim(i % int(numWaitAims))
		if kills < int(numWaitAims) {
			aim = waitAim(i % int(aimAnywhere))
		}
		k.killAimed(aim)
		if (i+1)%20 == 0 {
			t.Logf("chaos progress wait %s: %d/%d kills, %d messages", d, i+1, kills, len(k.messages()))
		}
		if t.Failed() {
			break
		}
	}
	close(stopFeeding)
	<-fed
	finished := make(chan struct{})
	go func() { drivers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(3 * time.Minute):
		t.Fatalf("messages not finished 3 minutes after the last kill")
	}
	k.check(time.Since(start))
}

func (k *waitKillTest) newMsg(i int) *waitMsg {
	m := &waitMsg{i: i, id: fmt.Sprintf("wait-%03d", i), session: fmt.Sprintf("wait-session-%03d", i),
		approve: i%2 == 1, twice: i%3 == 0}
	k.mu.Lock()
	k.msgs = append(k.msgs, m)
	k.byID[m.id] = m
	k.mu.Unlock()
	return m
}

func (k *waitKillTest) messages() []*waitMsg {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*waitMsg(nil), k.msgs...)
}

func (k *waitKillTest) rand(n int) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rng.IntN(n)
}

func (k *waitKillTest) count(s string) {
	k.mu.Lock()
	k.answers[s]++
	k.mu.Unlock()
}

// startProc starts a worker and waits until it listens.
func (k *waitKillTest) startProc() *waitProc {
	t := k.t
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), waitWorkerEnv+"=1", waitDBEnv+"="+k.dbURL, waitTTLEnv+"="+k.ttl.String())
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &waitProc{cmd: cmd, stderr: &syncBuffer{}, eof: make(chan struct{}), done: make(chan struct{}),
		calls: map[string]int{}, open: map[string]int{}, ran: map[string]bool{}}
	cmd.Stderr = p.stderr
	require.NoError(t, cmd.Start())
	listening := make(chan string, 1)
	go func() {
		defer close(p.eof)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if url, ok := strings.CutPrefix(line, "listening on "); ok {
				listening <- url
				continue
			}
			if f := strings.Fields(line); len(f) >= 3 && f[0] == "ev" {
				k.event(p, f[1], f[2], strings.Join(f[3:], " "))
			}
		}
	}()
	go func() {
		<-p.eof
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() || os.Getenv("WAIT_DEBUG") != "" {
			t.Logf("worker %d stderr:\n%s", cmd.Process.Pid, p.stderr)
		}
	})
	select {
	case p.url = <-listening:
	case <-p.done:
		t.Fatalf("a worker exited before listening: %s", p.stderr)
	case <-time.After(time.Minute):
		t.Fatal("a worker did not start listening")
	}
	k.mu.Lock()
	k.procs = append(k.procs, p)
	k.mu.Unlock()
	return p
}

// event counts what a worker reported, and hands it to the killer when
// it is the one it waits for.
func (k *waitKillTest) event(p *waitProc, kind, id, detail string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := k.byID[id]
	if m == nil {
		return
	}
	switch kind {
	case evAgent:
		p.open[id]++
		p.ran[id] = true
	case evDone:
		p.open[id]--
		if detail == "failed" {
			m.failedRuns++
		}
	case evModel:
		m.modelCalls++
	}
	if w := k.watch; w != nil && !p.dying && w.match(p, kind, m, detail) {
		k.watch = nil
		w.ch <- evHit{p, m}
	}
}

// killAimed waits until the aim comes about in a worker, kills it at a
// random instant after, looks where the kill landed, and starts another.
func (k *waitKillTest) killAimed(aim waitAim) {
	t := k.t
	var match func(p *waitProc, kind string, m *waitMsg, detail string) bool
	var delay time.Duration
	switch aim {
	case aimBeforeWait:
		// The agent's first runs take 10ms and more to the wait.
		match = func(_ *waitProc, kind string, m *waitMsg, _ string) bool { return kind == evAgent && !m.answering }
		delay = time.Duration(k.rand(40)) * time.Millisecond
	case aimApplying:
		match = func(_ *waitProc, kind string, _ *waitMsg, _ string) bool { return kind == evAnswer }
		delay = time.Duration(k.rand(25)) * time.Millisecond
	case aimAfterBooked:
		// The agent naps 10–40ms after the booking, then asks the model.
		match = func(_ *waitProc, kind string, _ *waitMsg, detail string) bool {
			return kind == evBooked && detail == "approved"
		}
		delay = time.Duration(k.rand(10)) * time.Millisecond
	case aimAnywhere:
		match = func(*waitProc, string, *waitMsg, string) bool { return false }
		delay = time.Duration(k.rand(400)) * time.Millisecond
	}
	var hit evHit
	if aim == aimAnywhere {
		time.Sleep(delay)
		k.mu.Lock()
		hit.p = k.procs[k.rng.IntN(len(k.procs))] // live ones only: the killer restarts each it kills
		k.mu.Unlock()
	} else {
		w := &evWatch{match: match, ch: make(chan evHit, 1)}
		k.mu.Lock()
		k.watch = w
		k.mu.Unlock()
		select {
		case hit = <-w.ch:
		case <-time.After(time.Minute):
			t.Errorf("no worker came to %q within a minute", aim)
			k.mu.Lock()
			k.watch = nil
			k.mu.Unlock()
			return
		}
		time.Sleep(delay)
	}
	k.kill(hit.p, aim, hit.m)
	k.startProc()
}

// kill kills p, and says where the kill landed: in aimed, the message
// whose event it was aimed at (nil for a kill aimed anywhere: then a
// message with a run in p, or one with a call of its client in p), and in
// each other message it cut a run or a call of.
func (k *waitKillTest) kill(p *waitProc, aim waitAim, aimed *waitMsg) {
	k.mu.Lock()
	p.dying = true
	for i, q := range k.procs {
		if q == p {
			k.procs = append(k.procs[:i], k.procs[i+1:]...)
			break
		}
	}
	calls := map[string]bool{}
	for id, n := range p.calls {
		if n > 0 {
			calls[id] = true
			k.byID[id].touched = true
		}
	}
	for id := range p.ran {
		k.byID[id].touched = true
	}
	k.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.done // its stdout read to the end: every event it reported is counted
	k.mu.Lock()
	for id := range p.ran {
		k.byID[id].touched = true
	}
	k.kills++
	k.aimed[aim]++
	runs := map[*waitMsg]bool{}
	for id, n := range p.open {
		if n > 0 {
			k.byID[id].kills++
			runs[k.byID[id]] = true
		}
	}
	var hit []*waitMsg // aimed first, then the runs, then the calls
	if aimed != nil {
		hit = append(hit, aimed)
	}
	for _, m := range k.msgs {
		if m != aimed && runs[m] {
			hit = append(hit, m)
		}
	}
	for _, m := range k.msgs {
		if m != aimed && !runs[m] && calls[m.id] {
			hit = append(hit, m)
		}
	}
	k.mu.Unlock()
	if len(hit) == 0 {
		k.land(aim, true, "idle", "no run and no call of a message in the process")
	}
	for i, m := range hit {
		phase, label := k.observe(m, calls[m.id])
		how := "its run killed"
		if !runs[m] {
			how = "its client's call cut"
		}
		k.land(aim, i == 0, phase, label+" ("+how+")")
	}
}

// land counts where a kill aimed at aim landed in a message: its phase
// once per kill (first: the message the kill is counted for), the point
// within it for every message it hit.
func (k *waitKillTest) land(aim waitAim, first bool, phase, label string) {
	k.mu.Lock()
	if first {
		if k.phases[aim] == nil {
			k.phases[aim] = map[string]int{}
		}
		k.phases[aim][phase]++
	}
	k.landings[phase+": "+label]++
	k.mu.Unlock()
}

// observe says where a kill landed in m, from the database (the dead
// process writes no more): the phase and the point within it. called:
// a client's call of m was under way in the process.
func (k *waitKillTest) observe(m *waitMsg, called bool) (phase, label string) {
	const (
		before  = "before the wait"
		waiting = "waiting"
		apply   = "while the answer is applied"
		booked  = "after the approved booking, before the reply"
		after   = "after the reply"
	)
	k.mu.Lock()
	answering, waitGen := m.answering, m.waitGen
	k.mu.Unlock()
	r := &dbReader{st: k.st}
	status := r.status(m.session, m.id)
	gen := r.num("SELECT r."+schema.ColGeneration+" FROM "+schema.RequestTable+" r"+byMessage, m.session, m.id)
	answered := k.stepsNamed(m, "await:"+waitName) > 0
	switch {
	case status == "":
		return before, "message not yet accepted"
	case status == schema.StoredSucceeded:
		return after, "request finished"
	case status == schema.StoredWaiting && answering && called:
		return apply, "answer sent, not yet recorded (still waiting)"
	case status == schema.StoredWaiting:
		return waiting, "the run had parked: waiting"
	case !answered:
		switch {
		case k.stepsNamed(m, "model") == 0:
			return before, "model asked, its step not recorded"
		case k.ledger(m, "deposit") == 0:
			return before, "model step recorded, deposit not booked"
		}
		return before, "deposit booked, not yet waiting"
	case int64(gen) == waitGen && called:
		return apply, "answer recorded, no run has taken the request over yet"
	case !m.approve:
		return apply, "answer (denied) recorded, run on, reply not stored"
	case k.ledger(m, "approved") == 0:
		return apply, "answer recorded, run on, approved booking not committed"
	}
	return booked, "approved booking committed, reply not stored"
}

func (k *waitKillTest) stepsNamed(m *waitMsg, name string) int {
	r := &dbReader{st: k.st}
	return r.num("SELECT COUNT(*) FROM "+schema.StepTable+" s JOIN "+schema.RequestTable+" r ON r.id = s."+schema.ColRequestID+
		byMessage+" AND s."+schema.ColName+" = ?", m.session, m.id, name)
}

func (k *waitKillTest) ledger(m *waitMsg, kind string) int {
	r := &dbReader{st: k.st}
	return r.num("SELECT COUNT(*) FROM "+waitLedgerTable+" WHERE crid = ? AND kind = ?", m.id, kind)
}

// call sends m's message (answer false) or its answer to prefer, if it is
// alive, or else to a live worker picked at random. It returns the
// worker's result, or an error when the worker died.
func (k *waitKillTest) call(m *waitMsg, answer bool, prefer *waitProc) (waitResult, *waitProc, error) {
	var p *waitProc
	for {
		k.mu.Lock()
		if prefer != nil && !prefer.dying {
			p = prefer
		} else if len(k.procs) > 0 {
			p = k.procs[k.rng.IntN(len(k.procs))]
		}
		if p != nil {
			p.calls[m.id]++
			if answer {
				m.answering = true
			}
		}
		k.mu.Unlock()
		if p != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer func() {
		k.mu.Lock()
		p.calls[m.id]--
		k.mu.Unlock()
	}()
	path := "/message"
	if answer {
		path = "/answer"
	}
	body, _ := json.Marshal(waitCall{Session: m.session, ID: m.id, Content: fmt.Sprintf("book the rent of flat %d", m.i), Approved: m.approve})
	resp, err := k.client.Post(p.url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return waitResult{}, p, err
	}
	defer resp.Body.Close()
	var res waitResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return waitResult{}, p, err
	}
	res.code = resp.StatusCode
	return res, p, nil
}

func (k *waitKillTest) status(m *waitMsg) request.Status {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := k.runner.Status(ctx, m.session, m.id)
	if err != nil {
		return request.Status{Error: err.Error()}
	}
	return st
}

// drive is m's client: it sends the message until its run waits, then
// the answer (twice at once, for some) until answered.
func (k *waitKillTest) drive(m *waitMsg) {
	t := k.t
	deadline := time.Now().Add(3 * time.Minute)
	if !k.ask(m, deadline) {
		return
	}
	if !m.twice {
		if r, ok := k.answer(m, deadline, nil); ok {
			m.replies = append(m.replies, r)
		}
		return
	}
	// The same answer twice at once, through two workers.
	var wg sync.WaitGroup
	replies := make([]string, 2)
	oks := make([]bool, 2)
	p1, p2 := k.pickTwo()
	wg.Go(func() { replies[0], oks[0] = k.answer(m, deadline, p1) })
	wg.Go(func() { replies[1], oks[1] = k.answer(m, deadline, p2) })
	wg.Wait()
	if oks[0] && oks[1] {
		m.replies = replies
		assert.Equal(t, replies[0], replies[1], "%s: the two answers sent at once got the same reply", m.id)
	}
}

// pickTwo picks two live workers, apart when there are two.
func (k *waitKillTest) pickTwo() (*waitProc, *waitProc) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.procs) < 2 {
		return nil, nil
	}
	i := k.rng.IntN(len(k.procs))
	j := (i + 1 + k.rng.IntN(len(k.procs)-1)) % len(k.procs)
	return k.procs[i], k.procs[j]
}

// ask sends m until its run waits for the answer: through a worker, again
// after a worker died, or, when the message was accepted, half the time
// left to the service, which resumes the dead run.
func (k *waitKillTest) ask(m *waitMsg, deadline time.Time) bool {
	t := k.t
	alone := false
	for {
		if time.Now().After(deadline) {
			t.Errorf("%s never waited: %+v", m.id, k.status(m))
			return false
		}
		if alone {
			st := k.status(m)
			switch st.State {
			case request.StateWaiting:
				k.count("message: left to the service, which ran it to its wait")
				return k.waiting(m, st.Waiting, st.Attempt)
			case request.StateFailed:
				k.count("message: given up by the service after its attempts, then sent again")
				alone = false
			default:
				time.Sleep(20 * time.Millisecond)
				continue
			}
		}
		res, _, err := k.call(m, false, nil)
		if err != nil {
			k.count("message: transport error (the process died)")
			if k.status(m).State == request.StateProcessing && k.rand(2) == 0 {
				alone = true
				k.leftAlone(m, false)
			}
			continue
		}
		switch {
		case res.code == http.StatusOK && res.Waiting != nil:
			k.count("message: 200 waiting")
			return k.waiting(m, res.Waiting, res.Attempt)
		case res.code == http.StatusOK:
			t.Errorf("%s answered without waiting: %+v", m.id, res)
			return false
		case res.code == http.StatusConflict || res.code == http.StatusInternalServerError:
			k.count(fmt.Sprintf("message: %d %s", res.code, res.Kind))
			time.Sleep(30 * time.Millisecond)
		default:
			t.Errorf("%s: %d %s: %s", m.id, res.code, res.Kind, res.Error)
			return false
		}
	}
}

// waiting reads the question m's run asks.
func (k *waitKillTest) waiting(m *waitMsg, q *request.Question, attempt int64) bool {
	t := k.t
	if !assert.NotNil(t, q, m.id) || !assert.Equal(t, waitName, q.Name, m.id) {
		return false
	}
	if !assert.NoError(t, json.Unmarshal(q.Question, &m.question), m.id) || !assert.Positive(t, m.question.Amount, m.id) {
		return false
	}
	k.mu.Lock()
	m.waitGen = attempt
	k.mu.Unlock()
	return true
}

// answer sends m's answer until it gets the reply: first through prefer
// (when not nil), again through another worker after one died, or, when
// the answer was recorded, half the time left to the service until the
// request finished (then sent again, to get the reply).
func (k *waitKillTest) answer(m *waitMsg, deadline time.Time, prefer *waitProc) (string, bool) {
	t := k.t
	for {
		if time.Now().After(deadline) {
			t.Errorf("%s's answer never got a reply: %+v", m.id, k.status(m))
			return "", false
		}
		res, _, err := k.call(m, true, prefer)
		prefer = nil
		if err != nil {
			k.count("answer: transport error (the process died)")
			if k.status(m).State == request.StateProcessing && k.rand(2) == 0 {
				k.leftAlone(m, false)
				if k.awaitService(m, deadline) {
					k.leftAlone(m, true)
				}
			}
			continue
		}
		switch {
		case res.code == http.StatusOK:
			k.count(fmt.Sprintf("answer: 200 replayed=%v", res.Replayed))
			want := fmt.Sprintf("denied %d: ", m.question.Amount)
			if m.approve {
				want = fmt.Sprintf("booked %d: ", m.question.Amount)
			}
			assert.True(t, strings.HasPrefix(res.Reply, want), "%s: reply %q to %q", m.id, res.Reply, want)
			return res.Reply, true
		case res.code == http.StatusConflict || res.code == http.StatusInternalServerError:
			how := ""
			if m.twice {
				how = " (one of two sent at once)"
			}
			k.count(fmt.Sprintf("answer: %d %s%s", res.code, res.Kind, how))
			k.mu.Lock()
			touched := m.touched
			k.mu.Unlock()
			// An answer waits for the run that its answer, or the same
			// answer sent at once, started: it is told to try again only
			// when a run of the message died (its session lease not yet
			// expired: the run may have died after it stopped to wait,
			// before it gave the session back).
			assert.True(t, touched || res.code != http.StatusConflict, "%s's answer, with no kill in a run of it: %d %s: %s",
				m.id, res.code, res.Kind, res.Error)
			time.Sleep(30 * time.Millisecond)
		default:
			t.Errorf("%s's answer: %d %s: %s", m.id, res.code, res.Kind, res.Error)
			return "", false
		}
	}
}

// leftAlone counts that m's client left it to the service after a kill
// (finished false), or that the service finished it after its answer's
// worker died (finished true).
func (k *waitKillTest) leftAlone(m *waitMsg, finished bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if finished {
		m.byService = true
	} else {
		m.leftAlone++
	}
}

// awaitService waits until the service finished m by itself (true), or
// gave up on it (false).
func (k *waitKillTest) awaitService(m *waitMsg, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		switch k.status(m).State {
		case request.StateSucceeded:
			k.count("answer: left to the service, which finished it")
			return true
		case request.StateFailed:
			k.count("answer: given up by the service after its attempts, then sent again")
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// check compares every message's outcome, ledger rows, steps and model
// calls, and logs the figures.
func (k *waitKillTest) check(took time.Duration) {
	t := k.t
	msgs := k.messages()
	known := map[string]bool{}
	var approved, denied, twice, byService, leftAlone, unfinished, dupDeposits, dupApproved, deniedBooked, wrongAmount int
	var calls, steps, killsIn, failedRuns, beyond int
	for _, m := range msgs {
		known[m.id] = true
		if m.approve {
			approved++
		} else {
			denied++
		}
		if m.twice {
			twice++
		}
		if m.byService {
			byService++
		}
		leftAlone += m.leftAlone
		st := k.status(m)
		if !assert.Equal(t, request.StateSucceeded, st.State, "%s finished: %+v", m.id, st) {
			unfinished++
		} else if assert.NotEmpty(t, m.replies, m.id) {
			for _, r := range m.replies {
				assert.Equal(t, st.Reply, r, "%s: every answer got the stored reply", m.id)
			}
		}
		deposits := k.ledger(m, "deposit")
		dupDeposits += max(deposits-1, 0)
		assert.Equal(t, 1, deposits, "%s: one deposit booked before the wait", m.id)
		assert.Equal(t, 1, k.stepsNamed(m, "await:"+waitName), "%s: one answer recorded", m.id)
		rows := k.ledger(m, "approved")
		if m.approve {
			dupApproved += max(rows-1, 0)
			if assert.Equal(t, 1, rows, "%s: one approved booking", m.id) {
				amount := (&dbReader{st: k.st}).num("SELECT amount FROM "+waitLedgerTable+" WHERE crid = ? AND kind = 'approved'", m.id)
				if !assert.Equal(t, m.question.Amount, amount, "%s: the amount booked is the one approved", m.id) {
					wrongAmount++
				}
			}
		} else {
			deniedBooked += rows
			assert.Zero(t, rows, "%s: denied, nothing booked after the wait", m.id)
		}
		k.mu.Lock()
		asked, kills, failed := m.modelCalls, m.kills, m.failedRuns
		k.mu.Unlock()
		recorded := k.stepsNamed(m, "model") + k.stepsNamed(m, "words")
		assert.LessOrEqual(t, asked, recorded+kills+failed, "%s: model asked %d times, %d model steps recorded, %d kills in its runs, %d runs failed",
			m.id, asked, recorded, kills, failed)
		calls, steps, killsIn, failedRuns = calls+asked, steps+recorded, killsIn+kills, failedRuns+failed
		beyond += max(asked-recorded, 0)
	}
	var strays int
	rows, err := k.st.DB.Query("SELECT crid FROM " + waitLedgerTable)
	require.NoError(t, err)
	var ledgerRows int
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ledgerRows++
		if !known[id] {
			strays++
		}
	}
	require.NoError(t, rows.Err())
	rows.Close()
	assert.Zero(t, strays, "ledger rows of no message")
	assert.Equal(t, len(msgs)+approved, ledgerRows, "a deposit per message, an approved booking per approved one")

	k.mu.Lock()
	defer k.mu.Unlock()
	var landings, answers, aimed, phases []string
	for l, n := range k.landings {
		landings = append(landings, fmt.Sprintf("    %3d  %s", n, l))
	}
	sort.Slice(landings, func(i, j int) bool { return landings[i][8:] < landings[j][8:] })
	for s, n := range k.answers {
		answers = append(answers, fmt.Sprintf("%s: %d", s, n))
	}
	sort.Strings(answers)
	landed := map[string]int{}
	for a := range numWaitAims {
		var in []string
		for p, n := range k.phases[a] {
			in = append(in, fmt.Sprintf("%s %d", p, n))
			landed[p] += n
		}
		sort.Strings(in)
		aimed = append(aimed, fmt.Sprintf("%s %d (%s)", a, k.aimed[a], strings.Join(in, ", ")))
	}
	for p, n := range landed {
		phases = append(phases, fmt.Sprintf("%s %d", p, n))
	}
	sort.Strings(phases)
	t.Logf("where the kills landed, in each message they hit:\n%s", strings.Join(landings, "\n"))
	t.Logf("answers the clients got: %s", strings.Join(answers, ", "))
	t.Logf("chaos summary wait %s: %d kills (SIGKILL) in %s, aimed (and landed): %s; landed: %s; "+
		"%d messages (%d approved, %d denied, %d answered twice at once), %d times a client left its message to the service after a kill, %d answered messages finished by the service after their answer's worker died; unfinished %d; "+
		"duplicates: %d deposits, %d approved bookings; %d bookings after a denial, %d approved bookings of another amount; "+
		"model calls %d for %d recorded model steps, %d beyond them for the %d kills that landed in a run of their message and %d runs that failed",
		k.d, k.kills, took.Round(100*time.Millisecond), strings.Join(aimed, ", "), strings.Join(phases, ", "),
		len(msgs), approved, denied, twice, leftAlone, byService, unfinished, dupDeposits, dupApproved, deniedBooked, wrongAmount,
		calls, steps, beyond, killsIn, failedRuns)
}

// Package demo plays many devices against the bookkeeper over HTTP and
// checks, against the database, that every message ran once.
//
// It starts the service in-process on a real listener (127.0.0.1:0) and a
// fresh SQLite file in a temporary directory (or the -db given), creates
// one session per simulated user and, for all users at once, plays a
// script of phases; within a phase the user's three devices (phone, laptop,
// tablet) send at the same moment:
//
//  1. phone and laptop send the same message with the same client request
//     id (a double submit from two devices); the tablet sends another one;
//  2. three different messages, one per device, into the one session;
//  3. the tablet re-sends phase 1's message (a replay), while the phone
//     asks a question and the laptop records one more item;
//  4. all three devices send one message with one client request id;
//  5. (first user only) the laptop reuses phase 1's id for other content:
//     422.
//
// Then one scene plays, each in a session of its own, what a client can
// ask for when the session is busy ("on_busy": queue, interrupt, reject)
// and a duplicate that waits for the answer ("Prefer: wait"), and checks
// their outcomes (see playPolicies).
//
// A 409 is retried after its Retry-After (plus jitter) up to MaxAttempts
// times, so nearly every message is answered in the end. Every booked
// transaction is posted to a webhook receiver running in the demo
// (package webhook), which must have performed exactly one effect per
// ledger row. Run prints a progress bar to stderr while it plays (plain
// ASCII; carriage returns only on a terminal), then a table and the
// checks.
//
// Then a scene with a slow tool (skipped when Config.SlowTool is
// negative): a second service on the same database, with a lease TTL of
// 1s, notifies a receiver that takes SlowTool (3s) to answer. The phone
// sends a message; while its run waits on the receiver, the laptop sends
// the same message with the same client request id and gets 409
// request-in-flight, again after each Retry-After, until the phone's run
// is done and it gets the stored reply. Meanwhile the demo reads the tool
// execution's and the request's leases every 50ms: the tool's lease is
// renewed past its TTL and no generation changes (no takeover). Its
// checks are printed too.
//
// Last, a scene with an approval (approvalScene; skipped when the service
// Config's ApproveAbove is negative): an expense above the threshold
// waits for a person, one device approves it, another sends the same
// answer and then a denial, and a second expense is denied. The phases
// and scenes before it run with approvals off: their messages (rent of
// 3,500) are above the default threshold, and they are about the locks.
// The verdict (PASS or FAIL) covers every check.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/webhook"
)

// Defaults of Config.
const (
	// DefaultLatency is the demo's rule-model latency per round.
	DefaultLatency = 500 * time.Millisecond
	// DefaultSessions is how many users play at once.
	DefaultSessions = 12
	// DefaultMaxAttempts bounds the sends of one message.
	DefaultMaxAttempts = 8
)

// Config configures a demo run.
type Config struct {
	// Service configures the service; an empty DB means a fresh SQLite file
	// in a temporary directory, removed afterwards.
	Service service.Config
	// Sessions is the number of users (sessions) played in parallel.
	Sessions int
	// MaxAttempts bounds the sends of one message (the first included).
	MaxAttempts int
	// Progress forces the progress bar's terminal mode (carriage returns)
	// on or off; nil means detect whether stderr is a terminal.
	Progress *bool
	// SlowTool is how long the slow-tool scene's webhook receiver works
	// before answering; 0 means DefaultSlowTool, negative skips the scene.
	SlowTool time.Duration
}

// kind says what a message should do.
type kind int

const (
	create kind = iota // records one transaction
	query              // only reads
)

type message struct {
	kind    kind
	content string
}

var creates = []string{
	"中午吃粉花了 35", "taxi 18 yesterday", "got paid 2000 salary", "买咖啡 28", "地铁 4 元", "lunch 42.5",
	"电影票 80", "groceries 156.3", "房租 3500", "bonus 500", "打车 23.5", "dinner with friends 120",
	"买了一件衣服 199", "parking 15", "奖金到账 3000", "coffee 4.5", "看病挂号 50", "book 39.9",
}

var queries = []string{"how much did I spend today", "今天花了多少", "show categories", "有哪些分类", "list my income"}

// send is one message sent by one device.
type send struct {
	device string
	id     string // client request id
	msg    message
	// expect422: the id was used before with other content.
	expect422 bool
}

// script returns the phases of user u (session s).
func script(u int, sessionID string) [][]send {
	c := func(k int) message { return message{create, creates[(u*5+k)%len(creates)]} }
	q := func(k int) message { return message{query, queries[(u+k)%len(queries)]} }
	id := func(n int) string { return fmt.Sprintf("u%02d-m%d", u, n) }
	phases := [][]send{
		{{device: "phone", id: id(1), msg: c(0)}, {device: "laptop", id: id(1), msg: c(0)}, {device: "tablet", id: id(2), msg: c(1)}},
		{{device: "phone", id: id(3), msg: c(2)}, {device: "laptop", id: id(4), msg: c(3)}, {device: "tablet", id: id(5), msg: q(0)}},
		{{device: "tablet", id: id(1), msg: c(0)}, {device: "phone", id: id(6), msg: q(1)}, {device: "laptop", id: id(7), msg: c(4)}},
		{{device: "phone", id: id(8), msg: c(5)}, {device: "laptop", id: id(8), msg: c(5)}, {device: "tablet", id: id(8), msg: c(5)}},
	}
	if u == 0 {
		phases = append(phases, []send{{device: "laptop", id: id(1), msg: message{query, "on second thought: " + queries[0]}, expect422: true}})
	}
	return phases
}

// result is what one send ended with.
type result struct {
	send
	session   string
	status    int // last HTTP status (0: transport error)
	attempts  int
	txID      *string
	replayed  bool
	transport error
}

// stats counts every HTTP response.
type stats struct {
	mu        sync.Mutex
	requests  int
	answered  int
	replayed  int
	conflicts map[string]int // 409s by problem type
	status    map[int]int    // other statuses
	transport int
	badRetry  int // 409 without Retry-After >= 1 or without problem+json
	results   []result
}

func (s *stats) add(f func(s *stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// Run runs the demo. ok is false when a check failed; err reports a
// failure to run at all.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (ok bool, err error) {
	if cfg.Sessions <= 0 {
		cfg.Sessions = DefaultSessions
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	sc := cfg.Service
	where := store.Redact(sc.DB)
	if sc.DB == "" {
		dir, err := os.MkdirTemp("", "bookkeeper-demo-")
		if err != nil {
			return false, err
		}
		defer os.RemoveAll(dir)
		where = filepath.Join(dir, "bookkeeper.db")
		sc.DB = "sqlite:" + where
	}
	if cfg.SlowTool == 0 {
		cfg.SlowTool = DefaultSlowTool
	}
	// The webhook every booked transaction is posted to: a receiver in
	// this process that performs each Idempotency-Key once.
	rcv, err := startReceiver(webhook.ReceiverConfig{Logger: sc.Logger})
	if err != nil {
		return false, err
	}
	defer rcv.stop()
	sc.WebhookURL = rcv.url
	// The devices' phase and the scenes about the locks book what they
	// are told without asking anyone (their rent is above the threshold):
	// the approvals have a scene of their own, with the threshold given.
	approvals := sc
	sc.ApproveAbove = -1
	svc, err := service.Open(ctx, sc)
	if err != nil {
		return false, err
	}
	defer svc.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return false, err
	}
	serveCtx, stopServe := context.WithCancel(ctx)
	serveErr := make(chan error, 1)
	go func() { serveErr <- svc.Serve(serveCtx, ln) }()
	defer func() {
		stopServe()
		if serr := <-serveErr; serr != nil && err == nil {
			err = serr
		}
	}()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 2 * time.Minute}
	defer client.CloseIdleConnections()

	latency := sc.LLMLatency
	if latency == 0 {
		latency = service.DefaultLLMLatency
	}
	ttl := sc.LeaseTTL
	if ttl == 0 {
		ttl = service.DefaultLeaseTTL
	}
	fmt.Fprintf(stdout, "bookkeeper demo: %d sessions x 3 devices, rule model latency %s per round, lease TTL %s\n",
		cfg.Sessions, max(latency, 0), ttl)
	fmt.Fprintf(stdout, "database: %s %s; server: %s; webhook: %s\n\n", svc.Store.Dialect, where, base, rcv.url)

	sessions := make([]string, cfg.Sessions)
	total := 0
	for u := range sessions {
		id, err := createSession(ctx, client, base)
		if err != nil {
			return false, err
		}
		sessions[u] = id
		for _, ph := range script(u, id) {
			total += len(ph)
		}
	}

	st := &stats{conflicts: map[string]int{}, status: map[int]int{}}
	prog := newProgress(stderr, total, cfg.Progress)
	start := time.Now()
	prog.start()
	var users sync.WaitGroup
	for u, sid := range sessions {
		users.Go(func() {
			for _, phase := range script(u, sid) {
				var devices sync.WaitGroup
				for _, s := range phase {
					devices.Go(func() {
						r := sendWithRetry(ctx, client, base, sid, s, cfg.MaxAttempts, st, prog)
						st.add(func(st *stats) { st.results = append(st.results, r) })
						prog.done.Add(1)
					})
				}
				devices.Wait()
			}
		})
	}
	users.Wait()
	took := time.Since(start)
	prog.stop()
	if err := ctx.Err(); err != nil {
		return false, err
	}
	effects := rcv.Effects() // the devices' phase; the scenes below add their own
	scene, err := playPolicies(ctx, client, svc.Store, sc)
	if err != nil {
		return false, err
	}
	ok, err = report(ctx, stdout, svc.Store, st, sessions, took, cfg.MaxAttempts, effects, scene)
	if err != nil {
		return false, err
	}
	if cfg.SlowTool > 0 {
		checks, err := slowScene(ctx, stdout, svc.Store, sc, cfg.SlowTool)
		if err != nil {
			return false, err
		}
		ok = printChecks(stdout, checks) && ok
	}
	checks, err := approvalScene(ctx, stdout, svc.Store, approvals)
	if err != nil {
		return false, err
	}
	if checks != nil {
		ok = printChecks(stdout, checks) && ok
	}
	if ok {
		fmt.Fprintln(stdout, "\nPASS")
	} else {
		fmt.Fprintln(stdout, "\nFAIL")
	}
	return ok, nil
}

func createSession(ctx context.Context, c *http.Client, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/sessions", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		ID string `json:"id"`
	}
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("create session: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	return out.ID, nil
}

// sendWithRetry sends one message, retrying a 409 (or 503) after its
// Retry-After plus up to 300ms of jitter, at most maxAttempts times.
func sendWithRetry(ctx context.Context, c *http.Client, base, session string, s send, maxAttempts int, st *stats, prog *progress) result {
	r := result{send: s, session: session}
	body, _ := json.Marshal(api.MessageRequest{Content: s.msg.content, ClientRequestID: s.id})
	for r.attempts < maxAttempts {
		r.attempts++
		status, retryAfter, ptype, out, err := post(ctx, c, base+"/api/sessions/"+session+"/messages", body)
		r.status, r.transport = status, err
		st.add(func(st *stats) {
			st.requests++
			switch {
			case err != nil:
				st.transport++
			case status == http.StatusOK && out.Replayed:
				st.replayed++
			case status == http.StatusOK:
				st.answered++
			case status == http.StatusConflict:
				prog.conflicts.Add(1)
				st.conflicts[ptype]++
				if retryAfter < 1 {
					st.badRetry++
				}
			default:
				st.status[status]++
			}
		})
		switch {
		case err != nil:
			return r
		case status == http.StatusOK:
			r.txID, r.replayed = out.TransactionID, out.Replayed
			return r
		case status == http.StatusConflict || status == http.StatusServiceUnavailable:
			if r.attempts == maxAttempts {
				return r
			}
			wait := time.Duration(max(retryAfter, 1))*time.Second + time.Duration(rand.IntN(300))*time.Millisecond
			select {
			case <-ctx.Done():
				return r
			case <-time.After(wait):
			}
		default:
			return r
		}
	}
	return r
}

// post sends a message; for a problem it returns its type (last segment)
// and Retry-After (0 when absent or when the body is not problem+json).
func post(ctx context.Context, c *http.Client, url string, body []byte) (status, retryAfter int, ptype string, out api.MessageResponse, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return 0, 0, "", out, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, "", out, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, 0, "", out, err
	}
	if resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(data, &out)
		return resp.StatusCode, 0, "", out, err
	}
	var p api.Problem
	if resp.Header.Get("Content-Type") != api.ProblemContentType || json.Unmarshal(data, &p) != nil {
		return resp.StatusCode, 0, "not-a-problem", out, nil
	}
	retryAfter, _ = strconv.Atoi(resp.Header.Get("Retry-After"))
	return resp.StatusCode, retryAfter, strings.TrimPrefix(p.Type, api.ProblemBase), out, nil
}

// check is one line of the verdict.
type check struct {
	ok   bool
	text string
}

// report prints the table and the checks of the devices' phase and of the
// busy-session policies' scene (not the verdict) and returns whether the
// checks passed.
func report(ctx context.Context, w io.Writer, st *store.Store, s *stats, sessions []string, took time.Duration, maxAttempts int, effects []webhook.Effect, scene *policyScene) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	db := st.DB

	// Outcomes per message (session, client request id).
	type key struct{ session, id string }
	type msgOutcome struct {
		kind     kind
		answered bool
		txIDs    map[string]bool
		nullTx   bool
	}
	msgs := map[key]*msgOutcome{}
	var gaveUp, got422, want422 int
	var wrongStatus []string
	for _, r := range s.results {
		if r.expect422 {
			want422++
			if r.status == http.StatusUnprocessableEntity {
				got422++
			} else {
				wrongStatus = append(wrongStatus, fmt.Sprintf("%s: reused id got %d, want 422", r.id, r.status))
			}
			continue
		}
		k := key{r.session, r.id}
		m := msgs[k]
		if m == nil {
			m = &msgOutcome{kind: r.msg.kind, txIDs: map[string]bool{}}
			msgs[k] = m
		}
		switch {
		case r.status == http.StatusOK:
			m.answered = true
			if r.txID != nil {
				m.txIDs[*r.txID] = true
			} else {
				m.nullTx = true
			}
		case r.status == http.StatusConflict && r.attempts >= maxAttempts:
			gaveUp++
		default:
			wrongStatus = append(wrongStatus, fmt.Sprintf("%s: status %d after %d attempts (%v)", r.id, r.status, r.attempts, r.transport))
		}
	}
	answered, createsAnswered := 0, 0
	for _, m := range msgs {
		if m.answered {
			answered++
			if m.kind == create {
				createsAnswered++
			}
		}
	}

	written, err := st.CountTransactions(ctx, db)
	if err != nil {
		return false, err
	}
	written -= scene.transactions // the policies scene's sessions are checked apart
	perID, err := st.TransactionsPerClientRequest(ctx, db)
	if err != nil {
		return false, err
	}
	inDB := map[key]int{}
	maxPer := 0
	for _, c := range perID {
		inDB[key{c.SessionKey, c.ClientRequestID}] = c.Transactions
		maxPer = max(maxPer, c.Transactions)
	}
	txByID := map[string]key{}
	for _, sid := range sessions {
		ts, err := st.Transactions(ctx, db, store.TransactionFilter{LedgerID: mustLedger(ctx, st, sid), Limit: 1000})
		if err != nil {
			return false, err
		}
		for _, t := range ts {
			txByID[t.ID] = key{t.SessionKey, t.ClientRequestID}
		}
	}
	var mismatches []string
	for k, m := range msgs {
		if !m.answered {
			continue
		}
		switch m.kind {
		case create:
			if len(m.txIDs) != 1 || m.nullTx || inDB[k] != 1 {
				mismatches = append(mismatches, fmt.Sprintf("%s: %d ids in replies, null=%v, %d in the ledger", k.id, len(m.txIDs), m.nullTx, inDB[k]))
				continue
			}
			for id := range m.txIDs {
				if txByID[id] != k {
					mismatches = append(mismatches, fmt.Sprintf("%s: reply names transaction %s, which the ledger does not tie to it", k.id, id))
				}
			}
		case query:
			if len(m.txIDs) != 0 || inDB[k] != 0 {
				mismatches = append(mismatches, fmt.Sprintf("%s: a question wrote a transaction", k.id))
			}
		}
	}
	var msgProblems []string
	for _, sid := range sessions {
		ms, err := st.Messages(ctx, db, sid, 0)
		if err != nil {
			return false, err
		}
		seen := map[string]int{}
		for _, m := range ms {
			seen[m.ClientRequestID+"/"+m.Role]++
		}
		for k, m := range msgs {
			if k.session != sid || !m.answered {
				continue
			}
			if seen[k.id+"/user"] != 1 || seen[k.id+"/assistant"] != 1 {
				msgProblems = append(msgProblems, fmt.Sprintf("%s: %d user and %d assistant messages", k.id, seen[k.id+"/user"], seen[k.id+"/assistant"]))
			}
		}
	}

	// The webhook: one effect per transaction of these sessions.
	perTx := map[string]int{}
	for _, e := range effects {
		perTx[e.Notification.TransactionID]++
	}
	notifiedOnce := 0
	for id := range txByID {
		if perTx[id] == 1 {
			notifiedOnce++
		}
	}

	conflicts := 0
	for _, n := range s.conflicts {
		conflicts += n
	}
	row := func(label string, v any) { fmt.Fprintf(w, "  %-50s %6v\n", label, v) }
	fmt.Fprintf(w, "results (%s)\n", took.Round(10*time.Millisecond))
	row("device sends (one message from one device)", len(s.results))
	row("HTTP requests (POST .../messages, retries included)", s.requests)
	row("  200 answered (the agent ran)", s.answered)
	row("  200 replayed (the stored reply; no lock taken)", s.replayed)
	for _, t := range []string{api.ProblemSessionBusy, api.ProblemRequestInFlight, api.ProblemTakenOver, api.ProblemToolInFlight} {
		row("  409 "+t, s.conflicts[t])
	}
	for t, n := range s.conflicts {
		if t != api.ProblemSessionBusy && t != api.ProblemRequestInFlight && t != api.ProblemTakenOver && t != api.ProblemToolInFlight {
			row("  409 "+t, n)
		}
	}
	row("  422 client-request-id-reused", s.status[http.StatusUnprocessableEntity])
	var others []int
	for code := range s.status {
		if code != http.StatusUnprocessableEntity {
			others = append(others, code)
		}
	}
	sort.Ints(others)
	for _, code := range others {
		row(fmt.Sprintf("  %d %s", code, http.StatusText(code)), s.status[code])
	}
	row("  transport errors", s.transport)
	row("distinct messages (session, client_request_id)", len(msgs))
	row("  answered in the end", answered)
	row(fmt.Sprintf("  still busy after %d attempts (client gave up)", maxAttempts), gaveUp)
	row("  answered, and meant to record a transaction", createsAnswered)
	row("transactions written (ledger rows)", written)
	row("most transactions for one client request id", maxPer)
	row("webhook effects (the receiver, one per key)", len(effects))
	fmt.Fprintln(w, "when the session is busy (on_busy), and a waiting duplicate (Prefer: wait)")
	for _, r := range scene.rows {
		row("  "+r.label, r.n)
	}
	fmt.Fprintln(w)

	checks := []check{
		{maxPer <= 1, fmt.Sprintf("every client request id produced at most one transaction (database: max %d)", maxPer)},
		{len(mismatches) == 0, fmt.Sprintf("every answered message: one ledger row, the same transaction_id on every device (%d answered)", answered)},
		{written == createsAnswered, fmt.Sprintf("ledger rows = answered messages that record one (%d = %d)", written, createsAnswered)},
		{len(msgProblems) == 0, "every answered message stored once: one user and one assistant message"},
		{got422 == want422 && want422 > 0, fmt.Sprintf("the reused client request id with other content got 422 (%d of %d)", got422, want422)},
		{s.badRetry == 0, fmt.Sprintf("every 409 was problem+json with Retry-After >= 1 (%d of %d)", conflicts-s.badRetry, conflicts)},
		{len(wrongStatus) == 0 && s.transport == 0, "no unexpected status and no transport error"},
		{notifiedOnce == len(txByID) && len(effects) == len(txByID),
			fmt.Sprintf("every transaction posted to the webhook once (%d effects, %d ledger rows, %d notified once)", len(effects), len(txByID), notifiedOnce)},
	}
	checks = append(checks, scene.checks...)
	ok := printChecks(w, checks)
	for _, list := range [][]string{mismatches, msgProblems, wrongStatus} {
		for i, l := range list {
			if i == 10 {
				fmt.Fprintf(w, "         … and %d more\n", len(list)-10)
				break
			}
			fmt.Fprintf(w, "         %s\n", l)
		}
	}
	if gaveUp > 0 {
		fmt.Fprintf(w, "  note: %d message(s) were still busy after %d attempts (not an error: the client gave up)\n", gaveUp, maxAttempts)
	}
	for _, n := range scene.notes {
		fmt.Fprintf(w, "  note: %s (not an error: timing)\n", n)
	}
	return ok, nil
}

// printChecks prints checks under "checks" and returns whether all passed.
func printChecks(w io.Writer, checks []check) bool {
	ok := true
	fmt.Fprintln(w, "checks")
	for _, c := range checks {
		mark := "ok  "
		if !c.ok {
			mark, ok = "FAIL", false
		}
		fmt.Fprintf(w, "  [%s] %s\n", mark, c.text)
	}
	return ok
}

func mustLedger(ctx context.Context, st *store.Store, session string) string {
	s, err := st.GetSession(ctx, st.DB, session)
	if err != nil {
		return ""
	}
	return s.LedgerID
}

// progress draws a progress bar on w: redrawn in place with carriage
// returns on a terminal, one line per 10% otherwise.
type progress struct {
	w         io.Writer
	total     int
	tty       bool
	done      atomic.Int64 // sends finished
	conflicts atomic.Int64 // 409 responses so far
	began     time.Time
	quit      chan struct{}
	wg        sync.WaitGroup
}

func newProgress(w io.Writer, total int, force *bool) *progress {
	tty := false
	if force != nil {
		tty = *force
	} else if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, total: total, tty: tty, quit: make(chan struct{})}
}

func (p *progress) line() string {
	const width = 30
	done := int(p.done.Load())
	filled := 0
	if p.total > 0 {
		filled = done * width / p.total
	}
	return fmt.Sprintf("[%s%s] %3d/%d sends  %3d x 409  %5.1fs", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		done, p.total, p.conflicts.Load(), time.Since(p.began).Seconds())
}

// start starts the drawing goroutine; stop stops and joins it.
func (p *progress) start() {
	p.began = time.Now()
	p.wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		lastDecile := -1
		for {
			select {
			case <-p.quit:
				if p.tty {
					fmt.Fprintf(p.w, "\r%s\n", p.line())
				} else {
					fmt.Fprintln(p.w, p.line())
				}
				return
			case <-tick.C:
				if p.tty {
					fmt.Fprintf(p.w, "\r%s", p.line())
					continue
				}
				if d := int(p.done.Load()) * 10 / max(p.total, 1); d > lastDecile && d < 10 {
					lastDecile = d
					fmt.Fprintln(p.w, p.line())
				}
			}
		}
	})
}

func (p *progress) stop() {
	close(p.quit)
	p.wg.Wait()
}

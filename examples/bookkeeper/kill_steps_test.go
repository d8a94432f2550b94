package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/agent"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/webhook"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// The long run (make chaos) sets ROWLEASE_CHAOS_LONG, and sizes this test
// with ROWLEASE_CHAOS_STEP_KILLS: kills per dialect.
const (
	chaosLongEnv      = "ROWLEASE_CHAOS_LONG"
	chaosStepKillsEnv = "ROWLEASE_CHAOS_STEP_KILLS"
	// defaultLongStepKills: 3 × 100 ≥ 300 kills in make chaos.
	defaultLongStepKills = 100
)

// stepKills is how many processes TestKill9NondeterministicModel kills
// per dialect: a handful in go test (2 with -short), ROWLEASE_CHAOS_STEP_KILLS
// (100 by default) in the long run.
func stepKills(t *testing.T) (int, bool) {
	if os.Getenv(chaosLongEnv) == "" {
		if testing.Short() {
			return 2, false
		}
		return 5, false
	}
	n := defaultLongStepKills
	if s := os.Getenv(chaosStepKillsEnv); s != "" {
		v, err := strconv.Atoi(s)
		require.NoError(t, err, chaosStepKillsEnv)
		n = v
	}
	return n, true
}

// TestKill9NondeterministicModel kills the service with SIGKILL at random
// instants of a message's whole flow — while the model is asked, just
// after a round was recorded as a step, just after create_transaction
// committed, while the webhook is being notified (before the reply), or
// after a random delay — with a model that words every answer otherwise
// each time it is asked (-llm-vary: a random note, the category named
// otherwise; it also disregards results it did not ask for). After each
// kill the message is either sent again with its client request id, or
// not: then the next process, a started Runner that nobody sends it to,
// must resume it by itself. At the end every accepted message finished,
// each with one ledger row, one create_transaction call (a second call
// with other arguments would be a second write) and one webhook effect,
// and the model was asked at most once per recorded step plus once per
// kill that landed in its message.
//
// The processes run with -intx-beside-step and -tool-fail-every: while
// each model round is asked and recorded as a step, a transaction of the
// run journals the round beside it and rolls back every other time; and
// for one message in toolFailEvery the create_transaction call that round
// 1 decided fails as a tool, each time it is made, and the model books
// in round 2 instead. The checks are the same: the failed call is not a
// second call (it wrote nothing), the rolled-back transactions take no
// step with them.
//
// Then, at one fixed point (create_transaction committed, the webhook
// being notified, the reply not stored) the same model with the steps
// turned off (-steps=false) is asked again by the resend and books the
// message a second time under a new key, which is what the steps prevent:
// the test can fail.
func TestKill9NondeterministicModel(t *testing.T) {
	kills, long := stepKills(t)
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			if long {
				t.Parallel()
			}
			t.Run("steps", func(t *testing.T) { runStepKills(t, d, kills) })
			t.Run("without-steps", func(t *testing.T) { runWithoutSteps(t, d) })
		})
	}
}

// stepMsg is one message of the test.
type stepMsg struct {
	id, content string
	finished    bool // its request succeeded (answered, or resumed by the service)
	sends       int  // lives in which the client sent it
	resumes     int  // lives in which nobody sent it and the service had to resume it
	kills       int  // kills that landed while it was running
	leftAlone   bool // after the last kill it was not sent again
	byService   bool // it finished without a client's resend after its last kill
}

// stepPlan is where a life's kill is aimed.
type stepPlan int

const (
	aimRound  stepPlan = iota // as soon as the model is asked
	aimStep                   // as soon as a round is recorded
	aimTool                   // as soon as create_transaction committed
	aimNotify                 // the receiver holds the webhook post: before the reply
	aimDelay                  // a random delay after the run started
	numStepPlans
)

type stepKillTest struct {
	t       *testing.T
	d       lease.Dialect
	dbURL   string
	db      *dbReader
	rcv     *webhook.Receiver
	hookURL string
	sid     string
	host    string
	rng     *rand.Rand
	noSteps bool
	flaky   bool // -intx-beside-step and -tool-fail-every

	cur  atomic.Pointer[killChild]
	plan atomic.Pointer[armed]

	msgs     []*stepMsg
	asks     map[string]int // model rounds asked, per client request id, from every process's log
	besides  besideTally    // transactions beside a step, from every process's log
	landings map[string]int
	statuses map[string]int
	mu       sync.Mutex // guards statuses
}

func newStepKillTest(t *testing.T, d lease.Dialect, noSteps bool) *stepKillTest {
	k := &stepKillTest{t: t, d: d, noSteps: noSteps, asks: map[string]int{}, landings: map[string]int{}, statuses: map[string]int{}}
	seed := uint64(time.Now().UnixNano())
	k.rng = rand.New(rand.NewPCG(seed, 0x73746570))
	t.Logf("seed %d", seed)
	k.host, _ = os.Hostname()
	dbURL, st := killDB(t, d)
	k.dbURL, k.db = dbURL, &dbReader{st: st}
	k.rcv = webhook.NewReceiver(webhook.ReceiverConfig{Hook: k.hook, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(k.rcv)
	t.Cleanup(srv.Close)
	k.hookURL = srv.URL + "/hooks/booked"
	return k
}

// start starts a service process on the test's database: the varying
// model, short leases, resuming orphaned runs 100ms after their lease
// expired, debug logs (every model round is logged, and counted).
func (k *stepKillTest) start() *killChild {
	args := []string{"-db", k.dbURL, "-lease-ttl", "1s", "-llm-latency", "40ms", "-llm-vary", "-v",
		"-webhook", k.hookURL, "-webhook-timeout", "5s", "-shutdown-grace", "1s", "-resume-grace", "100ms"}
	if k.noSteps {
		args = append(args, "-steps=false")
	}
	if k.flaky {
		args = append(args, "-intx-beside-step", "-tool-fail-every", strconv.Itoa(toolFailEvery))
	}
	c := &killChild{child: startChild(k.t, args...)}
	k.cur.Store(c)
	return c
}

// askedRE matches the agent's log line of one model round.
var askedRE = regexp.MustCompile(`msg="agent: model asked" .*client_request_id=(\S+)`)

// asksIn counts the model rounds a process logged, per client request id.
func asksIn(c *killChild) map[string]int {
	out := map[string]int{}
	for _, m := range askedRE.FindAllStringSubmatch(c.stderr.String(), -1) {
		out[m[1]]++
	}
	return out
}

// toolFailEvery is the steps subtest's -tool-fail-every: the messages
// step-002, step-004, step-006, step-008, step-011… have their tool fail.
const toolFailEvery = 2

// besideTally counts the agent's log lines of the transactions run
// beside a step (-intx-beside-step), by how they ended.
type besideTally struct{ committed, rolledBack, failed int }

var besideRE = regexp.MustCompile(`msg="agent: transaction beside the step (committed|rolled back|failed)"`)

func besidesIn(c *killChild) besideTally {
	var b besideTally
	for _, m := range besideRE.FindAllStringSubmatch(c.stderr.String(), -1) {
		switch m[1] {
		case "committed":
			b.committed++
		case "rolled back":
			b.rolledBack++
		default:
			b.failed++
		}
	}
	return b
}

func (b besideTally) add(o besideTally) besideTally {
	return besideTally{b.committed + o.committed, b.rolledBack + o.rolledBack, b.failed + o.failed}
}

// finish ends a life: the process is dead (killed, or stopped at the
// end); its model rounds and transactions beside steps are added up.
func (k *stepKillTest) finish(c *killChild) {
	c.kill()
	for id, n := range asksIn(c) {
		k.asks[id] += n
	}
	k.besides = k.besides.add(besidesIn(c))
}

func (k *stepKillTest) hook(stage webhook.Stage, key string) error {
	p := k.plan.Load()
	if p == nil || p.stage != stage || !k.plan.CompareAndSwap(p, nil) {
		return nil
	}
	if p.kill {
		k.cur.Load().kill()
	}
	close(p.fired)
	return nil
}

// next is the message of this life: the first one not finished, or a new one.
func (k *stepKillTest) next() *stepMsg {
	for _, m := range k.msgs {
		if !m.finished {
			return m
		}
	}
	i := len(k.msgs) + 1
	m := &stepMsg{id: fmt.Sprintf("step-%03d", i), content: fmt.Sprintf("lunch %d", 10+i)}
	k.msgs = append(k.msgs, m)
	return m
}

// drive makes m finish in c: it sends it until answered, or, when it was
// left alone after a kill, waits until the service has resumed it by
// itself. It closes done when m finished; it returns when m finished or
// c died.
func (k *stepKillTest) drive(c *killChild, m *stepMsg, done chan struct{}) {
	if m.leftAlone {
		m.resumes++
		for {
			switch k.db.status(k.sid, m.id) {
			case schema.StoredSucceeded:
				m.finished, m.byService = true, true
				close(done)
				return
			case schema.StoredFailed:
				// Its runs died ResumeConfig.MaxAttempts times: the
				// service gave up on it and marked it failed. Its client
				// may still resend it.
				k.count("given up by the service after its attempts, then resent")
				m.leftAlone = false
				k.drive(c, m, done)
				return
			}
			select {
			case <-c.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	m.sends++
	for {
		a, err := post(c.url, k.sid, m.content, m.id)
		if err != nil {
			k.count("transport error (the process died)")
			return
		}
		if a.status == http.StatusOK {
			k.count("200")
			m.finished, m.byService = true, false
			close(done)
			return
		}
		k.count(fmt.Sprintf("%d %s", a.status, strings.TrimPrefix(a.problem.Type, api.ProblemBase)))
		select {
		case <-c.done:
			return
		case <-time.After(30 * time.Millisecond):
		}
	}
}

func (k *stepKillTest) count(s string) {
	k.mu.Lock()
	k.statuses[s]++
	k.mu.Unlock()
}

// live runs messages in c until the point p aims at comes about in one;
// there it kills c. It returns where the kill landed and its message.
func (k *stepKillTest) live(c *killChild, p stepPlan) (string, *stepMsg) {
	t := k.t
	deadline := time.After(2 * time.Minute)
	for {
		m := k.next()
		baseSteps, baseTx := k.db.steps(k.sid, m.id), k.db.txOf(k.sid, m.id)
		done := make(chan struct{})
		driven := make(chan struct{})
		go func() {
			defer close(driven)
			k.drive(c, m, done)
		}()
		a := &armed{stage: webhook.Arrived, kill: true, fired: make(chan struct{})}
		if p == aimNotify {
			k.plan.Store(a)
		}
		var reached bool
		switch p {
		case aimRound:
			reached = k.waitUntil(done, deadline, func() bool { return asksIn(c)[m.id] > 0 })
		case aimStep:
			reached = k.waitUntil(done, deadline, func() bool { return k.db.steps(k.sid, m.id) > baseSteps })
		case aimTool:
			reached = k.waitUntil(done, deadline, func() bool { return baseTx == "" && k.db.txOf(k.sid, m.id) != "" })
		case aimNotify:
			select {
			case <-a.fired:
				reached = true
			case <-done:
			case <-deadline:
			}
		case aimDelay:
			if k.waitUntil(done, deadline, func() bool { return k.runningHere(c, m) }) {
				select {
				case <-time.After(time.Duration(k.rng.IntN(300)) * time.Millisecond):
					reached = true
				case <-done:
				}
			}
		}
		k.plan.Store(nil)
		if !reached {
			select {
			case <-done:
				<-driven
				continue // finished before the point came about: the next message
			default:
				t.Fatalf("plan %d for %s never came about", p, m.id)
			}
		}
		c.kill()
		<-driven
		k.waitUntil(nil, time.After(10*time.Second), func() bool { return k.rcv.Busy() == 0 })
		m.kills++
		label := k.observe(c, m, baseSteps)
		// Sent again, or left for the service to resume — if it was
		// accepted at all (a message killed before its request row was
		// written is not the service's to finish: its client sends it
		// again).
		m.leftAlone = k.db.status(k.sid, m.id) == schema.StoredProcessing && k.rng.IntN(2) == 0
		if m.leftAlone {
			label += ", then left alone (resumed by the service)"
		} else if !m.finished {
			label += ", then sent again"
		}
		return label, m
	}
}

// observe says where the kill landed, from the database (the dead process
// writes no more) and the process's log.
func (k *stepKillTest) observe(c *killChild, m *stepMsg, baseSteps int) string {
	status := k.db.status(k.sid, m.id)
	steps := k.db.steps(k.sid, m.id)
	asked := asksIn(c)[m.id]
	switch {
	case status == "":
		return "before the message was accepted"
	case status == schema.StoredSucceeded:
		m.finished = true
		return "after the request finished"
	case k.db.replyStored(k.sid, m.id):
		return "reply stored, request not yet marked done"
	case asked > steps-baseSteps:
		return fmt.Sprintf("during model round %d (asked, not recorded)", steps+1)
	case steps == 0:
		return "accepted, before the first model round"
	case k.db.txOf(k.sid, m.id) == "":
		return fmt.Sprintf("after round %d was recorded, before the tool committed", steps)
	case steps == 1:
		return "after the tool committed, before round 2"
	}
	return fmt.Sprintf("after round %d was recorded and the tool committed, before the reply", steps)
}

func (k *stepKillTest) waitUntil(stop <-chan struct{}, deadline <-chan time.Time, cond func() bool) bool {
	for !cond() {
		select {
		case <-stop:
			return false
		case <-deadline:
			return false
		case <-time.After(2 * time.Millisecond):
		}
	}
	return true
}

func (k *stepKillTest) runningHere(c *killChild, m *stepMsg) bool {
	return strings.HasPrefix(k.db.holder(k.sid, m.id), k.host+":"+strconv.Itoa(c.cmd.Process.Pid)+"/")
}

func runStepKills(t *testing.T, d lease.Dialect, kills int) {
	start := time.Now()
	k := newStepKillTest(t, d, false)
	k.flaky = true
	for life := 1; life <= kills; life++ {
		c := k.start()
		if k.sid == "" {
			k.sid = newSession(t, c.url)
		}
		label, _ := k.live(c, stepPlan(k.rng.IntN(int(numStepPlans))))
		k.finish(c)
		k.landings[label]++
		if life%20 == 0 {
			t.Logf("chaos progress steps %s: %d/%d kills, %d messages", d, life, kills, len(k.msgs))
		}
	}
	// A last life without kills: every message left alone is resumed by
	// the service, every other one sent until answered.
	c := k.start()
	for _, m := range k.msgs {
		if m.finished {
			continue
		}
		done := make(chan struct{})
		finished := make(chan struct{})
		go func() { defer close(finished); k.drive(c, m, done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("message %s (left alone: %v) did not finish", m.id, m.leftAlone)
		}
		<-finished
	}
	k.check(c, kills, time.Since(start))
	k.finish(c)
}

// check compares every message's ledger rows, tool calls, webhook effects
// and model rounds; c is a live process, to read the statuses through the
// API.
func (k *stepKillTest) check(c *killChild, kills int, took time.Duration) {
	t := k.t
	for id, n := range asksIn(c) {
		k.asks[id] += n
	}
	defer func() { // finish adds c's asks again
		for id, n := range asksIn(c) {
			k.asks[id] -= n
		}
	}()
	effects := k.rcv.Effects()
	perTx := map[string]int{}
	for _, e := range effects {
		perTx[e.Notification.TransactionID]++
	}
	var duplicates, ledgerDup, effectDup, resumedAlone, unfinished, toolFailed int
	var totalAsks, totalSteps, extraAsks, killsIn int
	asksHist := map[int]int{}
	for _, m := range k.msgs {
		st := getStatus(t, c.url, k.sid, m.id)
		if !assert.Equal(t, "succeeded", st.Status, "%s finished", m.id) {
			unfinished++
			continue
		}
		rows := k.db.ledgerRows(k.sid, m.id)
		calls, failed := k.db.createCalls(k.sid, m.id), k.db.failedCreateCalls(k.sid, m.id)
		ledgerDup += max(rows-1, 0)
		duplicates += max(calls-1, 0)
		if assert.Equal(t, 1, rows, "%s: one ledger row", m.id) && assert.NotNil(t, st.TransactionID) {
			assert.Equal(t, 1, perTx[*st.TransactionID], "%s: one webhook effect for its transaction", m.id)
			effectDup += max(perTx[*st.TransactionID]-1, 0)
		}
		assert.Equal(t, 1, calls, "%s: one create_transaction call that did not fail (a second would be the model's second decision, under another key)", m.id)
		if k.flaky && agent.ToolFailurePicked(m.id, toolFailEvery) {
			assert.Equal(t, 1, failed, "%s: its round-1 call failed as a tool (however often it was made), and the model made another", m.id)
		} else {
			assert.Zero(t, failed, "%s: no create_transaction call failed", m.id)
		}
		toolFailed += failed
		steps := k.db.steps(k.sid, m.id)
		asked := k.asks[m.id]
		assert.LessOrEqual(t, asked, steps+m.kills, "%s: model asked %d times, %d steps recorded, %d kills", m.id, asked, steps, m.kills)
		asksHist[asked]++
		totalAsks, totalSteps, killsIn = totalAsks+asked, totalSteps+steps, killsIn+m.kills
		extraAsks += max(asked-steps, 0)
		if m.byService {
			resumedAlone++
		}
	}
	var landings, statuses []string
	for l, n := range k.landings {
		landings = append(landings, fmt.Sprintf("    %3d  %s", n, l))
	}
	sort.Slice(landings, func(i, j int) bool { return landings[i][8:] < landings[j][8:] })
	for s, n := range k.statuses {
		statuses = append(statuses, fmt.Sprintf("%s: %d", s, n))
	}
	sort.Strings(statuses)
	var asks []int
	for a := range asksHist {
		asks = append(asks, a)
	}
	sort.Ints(asks)
	hist := make([]string, 0, len(asks))
	for _, a := range asks {
		hist = append(hist, fmt.Sprintf("%d asked %d×", asksHist[a], a))
	}
	besides := k.besides.add(besidesIn(c))
	if k.flaky {
		assert.Positive(t, besides.rolledBack, "transactions beside a step rolled back")
	}
	t.Logf("where the kills landed:\n%s", strings.Join(landings, "\n"))
	t.Logf("answers the clients got: %s", strings.Join(statuses, ", "))
	t.Logf("chaos summary steps %s: %d kills (SIGKILL) in %s; %d messages, %d of them finished by the service without a resend after their last kill; "+
		"duplicates: %d create_transaction calls, %d ledger rows, %d webhook effects; unfinished %d; "+
		"model calls per message (messages: times asked): %s; %d calls for %d recorded steps, %d beyond them for the %d kills that landed in a message; "+
		"%d messages whose create_transaction failed as a tool and was made again; transactions beside a step: %d committed, %d rolled back, %d failed otherwise",
		k.d, kills, took.Round(100*time.Millisecond), len(k.msgs), resumedAlone, duplicates, ledgerDup, effectDup, unfinished,
		strings.Join(hist, ", "), totalAsks, totalSteps, extraAsks, killsIn, toolFailed, besides.committed, besides.rolledBack, besides.failed)
}

// runWithoutSteps kills at one fixed point — create_transaction
// committed, the webhook being notified, the reply not stored — and
// resends, with the steps on and then off. With them the resend replays
// the model's decision: one call. Without them it asks the varying model
// again, which books the message again under another key.
func runWithoutSteps(t *testing.T, d lease.Dialect) {
	calls := map[bool][]int{}
	for _, noSteps := range []bool{false, true} {
		k := newStepKillTest(t, d, noSteps)
		for i := 0; i < 2; i++ {
			c := k.start()
			if k.sid == "" {
				k.sid = newSession(t, c.url)
			}
			m := k.next()
			a := &armed{stage: webhook.Arrived, kill: true, fired: make(chan struct{})}
			k.plan.Store(a)
			done := make(chan struct{})
			driven := make(chan struct{})
			go func() { defer close(driven); k.drive(c, m, done) }()
			select {
			case <-a.fired:
			case <-done:
				t.Fatalf("%s was answered before its notification", m.id)
			case <-time.After(time.Minute):
				t.Fatalf("%s never reached the webhook", m.id)
			}
			<-driven
			k.finish(c)
			require.NotEmpty(t, k.db.txOf(k.sid, m.id), "the kill landed after the tool committed")
			require.False(t, k.db.replyStored(k.sid, m.id), "and before the reply")
			m.kills++
			c = k.start()
			done = make(chan struct{})
			k.drive(c, m, done)
			require.True(t, m.finished, "%s answered on resend", m.id)
			k.finish(c)
			calls[noSteps] = append(calls[noSteps], k.db.createCalls(k.sid, m.id))
			assert.Equal(t, 1, k.db.ledgerRows(k.sid, m.id), "%s: the ledger's one row per message", m.id)
		}
		hist := map[string]int{}
		for _, m := range k.msgs {
			hist[fmt.Sprintf("%d asks / %d steps", k.asks[m.id], k.db.steps(k.sid, m.id))]++
		}
		t.Logf("chaos summary fixed-point %s steps=%v: create_transaction calls per message %v (kill after the tool committed, before the reply; resent); model calls per message %v",
			d, !noSteps, calls[noSteps], hist)
	}
	for _, n := range calls[false] {
		assert.Equal(t, 1, n, "with steps the resend replays the model's decision: the same call")
	}
	for _, n := range calls[true] {
		assert.Equal(t, 2, n, "without steps the varying model is asked again and books the message again under another key")
	}
}

// msgStatus reads GET …/messages/{id}.
func getStatus(t *testing.T, url, sid, id string) api.MessageStatus {
	t.Helper()
	resp, err := http.Get(url + "/api/sessions/" + sid + "/messages/" + id)
	require.NoError(t, err)
	defer resp.Body.Close()
	var st api.MessageStatus
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	} else {
		st.Status = strconv.Itoa(resp.StatusCode)
	}
	return st
}

// dbReader reads what the test checks, straight from the database.
type dbReader struct{ st *store.Store }

func (r *dbReader) one(query string, args ...any) string {
	var s string
	_ = r.st.DB.QueryRowContext(context.Background(), r.st.Dialect.Rebind(query), args...).Scan(&s)
	return s
}

func (r *dbReader) num(query string, args ...any) int {
	var n int
	_ = r.st.DB.QueryRowContext(context.Background(), r.st.Dialect.Rebind(query), args...).Scan(&n)
	return n
}

const byMessage = " WHERE r.session_key = ? AND r.client_request_id = ?"

func (r *dbReader) status(sid, id string) string {
	return r.one("SELECT r.status FROM "+schema.RequestTable+" r"+byMessage, sid, id)
}

func (r *dbReader) holder(sid, id string) string {
	return r.one("SELECT COALESCE(r."+schema.ColHolder+", '') FROM "+schema.RequestTable+" r"+byMessage, sid, id)
}

// steps is how many steps the message's request recorded: its rows in
// the step table.
func (r *dbReader) steps(sid, id string) int {
	return r.num("SELECT COUNT(*) FROM "+schema.StepTable+" s JOIN "+schema.RequestTable+
		" r ON r.id = s."+schema.ColRequestID+byMessage, sid, id)
}

func (r *dbReader) txOf(sid, id string) string {
	return r.one("SELECT t.id FROM ledger_transaction t JOIN "+schema.RequestTable+" r ON r.id = t.request_id"+byMessage, sid, id)
}

func (r *dbReader) ledgerRows(sid, id string) int {
	return r.num("SELECT COUNT(*) FROM ledger_transaction t JOIN "+schema.RequestTable+" r ON r.id = t.request_id"+byMessage, sid, id)
}

// createCalls is how many create_transaction calls (distinct idempotency
// keys) the message's runs made, but for those that failed as the tool
// fails on purpose with -tool-fail-every (they committed nothing): a
// second call the tool refused as the message's second transaction
// counts.
func (r *dbReader) createCalls(sid, id string) int {
	return r.num("SELECT COUNT(*) FROM "+schema.ToolExecutionTable+" e JOIN "+schema.RequestTable+
		" r ON r.id = e.request_id"+byMessage+" AND e.tool_name = 'create_transaction' AND NOT "+injectedFailure, sid, id, toolFailureText)
}

// failedCreateCalls is how many create_transaction calls of the message
// failed as the tool fails on purpose with -tool-fail-every.
func (r *dbReader) failedCreateCalls(sid, id string) int {
	return r.num("SELECT COUNT(*) FROM "+schema.ToolExecutionTable+" e JOIN "+schema.RequestTable+
		" r ON r.id = e.request_id"+byMessage+" AND e.tool_name = 'create_transaction' AND "+injectedFailure, sid, id, toolFailureText)
}

// injectedFailure is true of a tool execution marked failed with the
// error of -tool-fail-every.
var (
	injectedFailure = "(e." + schema.ColStatus + " = '" + schema.StoredFailed + "' AND COALESCE(e." + schema.ColError + ", '') LIKE ?)"
	toolFailureText = "%" + agent.ErrToolFailure.Error() + "%"
)

func (r *dbReader) replyStored(sid, id string) bool {
	return r.num("SELECT COUNT(*) FROM chat_message m WHERE m.session_key = ? AND m.client_request_id = ? AND m.role = 'assistant'", sid, id) > 0
}

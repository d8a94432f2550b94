package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/agent"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/webhook"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// Kills per dialect: at least 50 on SQLite and 10 on each server (fewer
// with -short).
var killCounts = map[lease.Dialect][2]int{ // full, -short
	lease.SQLite:   {50, 6},
	lease.MySQL:    {12, 2},
	lease.Postgres: {12, 2},
}

// The service is killed with SIGKILL, again and again, at random points
// around its external call (the webhook), and restarted on the same
// database; every unanswered message is sent again with its client request
// id until answered. The receiver runs in the test process, which is not
// killed, and counts the effects it performed. At the end every message
// is answered, and the receiver performed exactly one effect per message:
// one per booked transaction, none twice.
func TestKill9AroundTheWebhook(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			n := killCounts[d][0]
			if testing.Short() {
				n = killCounts[d][1]
			}
			runKillTest(t, d, n)
		})
	}
}

// killDB makes a fresh database of dialect d and returns its -db value
// and a store on it for the test's own reads.
func killDB(t *testing.T, d lease.Dialect) (string, *store.Store) {
	t.Helper()
	var dbURL string
	switch d {
	case lease.SQLite:
		dbURL = "sqlite:" + filepath.Join(t.TempDir(), "bookkeeper.db")
	case lease.MySQL:
		db := testdb.Open(t, d) // a fresh database, dropped at cleanup
		var name string
		require.NoError(t, db.Get(&name, "SELECT DATABASE()"))
		cfg, err := mysql.ParseDSN(os.Getenv(testdb.MySQLEnv))
		require.NoError(t, err)
		u := url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + name}
		dbURL = u.String()
	case lease.Postgres:
		db := testdb.Open(t, d) // a fresh schema, dropped at cleanup
		var name string
		require.NoError(t, db.Get(&name, "SELECT current_schema()"))
		u, err := url.Parse(os.Getenv(testdb.PostgresEnv))
		require.NoError(t, err)
		q := u.Query()
		q.Set("search_path", name)
		u.RawQuery = q.Encode()
		dbURL = u.String()
	}
	st, err := store.Open(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return dbURL, st
}

// killMsg is one message of the kill test.
type killMsg struct {
	id, content string
	answered    bool
	txID        string
	reply       string
	sends       int // lives in which it was sent
}

// plan is where a life's kill is aimed.
type plan int

const (
	planDelay     plan = iota // a random delay after the run started
	planLedger                // as soon as the ledger row is committed
	planArrived               // the receiver holds the post, before the effect
	planPerformed             // the receiver performed the effect, before answering
	planAnswered              // a random moment after the receiver answered
	numPlans
)

// armed is a plan for the receiver's hook: at stage, kill the child (or,
// for Answered, tell the test).
type armed struct {
	stage webhook.Stage
	kill  bool
	fired chan struct{}
}

type killTest struct {
	t       *testing.T
	d       lease.Dialect
	dbURL   string
	st      *store.Store
	rcv     *webhook.Receiver
	hookURL string
	sid     string
	host    string
	rng     *rand.Rand

	cur  atomic.Pointer[killChild]
	plan atomic.Pointer[armed]

	msgs     []*killMsg
	landings map[string]int
	statuses map[string]int // answers the clients got, by status (and problem type)
	mu       sync.Mutex     // guards statuses
}

// killChild is a child process that is killed once.
type killChild struct {
	*child
	once sync.Once
	at   time.Time
}

func (c *killChild) kill() {
	c.once.Do(func() {
		c.at = time.Now()
		_ = c.cmd.Process.Kill()
	})
	<-c.done
}

func runKillTest(t *testing.T, d lease.Dialect, kills int) {
	start := time.Now()
	k := &killTest{t: t, d: d, landings: map[string]int{}, statuses: map[string]int{}}
	seed := uint64(time.Now().UnixNano())
	k.rng = rand.New(rand.NewPCG(seed, 0x6b696c6c))
	t.Logf("seed %d", seed)
	k.host, _ = os.Hostname()
	k.dbURL, k.st = killDB(t, d)
	k.rcv = webhook.NewReceiver(webhook.ReceiverConfig{Hook: k.hook, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(k.rcv)
	t.Cleanup(srv.Close)
	k.hookURL = srv.URL + "/hooks/booked"

	resent := 0
	for life := 1; life <= kills; life++ {
		c := k.start()
		if k.sid == "" {
			k.sid = newSession(t, c.url)
		}
		label, m := k.live(c, plan(k.rng.IntN(int(numPlans))))
		if m.sends > 1 {
			resent++
			label += " (resent)"
		}
		k.landings[label]++
	}
	// A last life without kills: every message not yet answered is sent
	// until it is.
	c := k.start()
	for _, m := range k.msgs {
		if !m.answered {
			m.sends++
			k.sendUntilAnswered(c, m, nil)
			require.True(t, m.answered, "message %s was never answered", m.id)
		}
	}
	k.check(kills, resent, time.Since(start))
}

// start starts a child on the test's database, notifying the receiver.
func (k *killTest) start() *killChild {
	c := &killChild{child: startChild(k.t, "-db", k.dbURL, "-lease-ttl", "1s", "-llm-latency", "20ms",
		"-webhook", k.hookURL, "-webhook-timeout", "5s", "-shutdown-grace", "1s")}
	k.cur.Store(c)
	return c
}

// next returns the message to send in this life: the first one not yet
// answered, or a new one.
func (k *killTest) next() *killMsg {
	for _, m := range k.msgs {
		if !m.answered {
			return m
		}
	}
	i := len(k.msgs) + 1
	m := &killMsg{id: fmt.Sprintf("kill-%03d", i), content: fmt.Sprintf("lunch %d", 10+i)}
	k.msgs = append(k.msgs, m)
	return m
}

// hook is the receiver's: it carries out an armed plan.
func (k *killTest) hook(stage webhook.Stage, key string) error {
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

// live sends messages to c, one after the other, until the point p aims
// at comes about in one of them; there it kills c, and returns where the
// kill landed and the message it landed in.
func (k *killTest) live(c *killChild, p plan) (string, *killMsg) {
	t := k.t
	deadline := time.After(2 * time.Minute)
	for {
		m := k.next()
		m.sends++
		answered := make(chan struct{})
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			k.sendUntilAnswered(c, m, answered)
		}()
		a := &armed{fired: make(chan struct{})}
		switch p {
		case planArrived:
			a.stage, a.kill = webhook.Arrived, true
		case planPerformed:
			a.stage, a.kill = webhook.Performed, true
		case planAnswered:
			a.stage = webhook.Answered
		}
		if a.stage != 0 {
			k.plan.Store(a)
		}
		reached, hookLabel := false, ""
		switch p {
		case planDelay:
			if k.waitUntil(answered, deadline, func() bool { return k.runningHere(c, m) }) {
				select {
				case <-time.After(time.Duration(k.rng.IntN(250)) * time.Millisecond):
					reached = true
				case <-answered:
				}
			}
		case planLedger:
			reached = k.waitUntil(answered, deadline, func() bool { return k.runningHere(c, m) && k.txOf(m) != "" })
		default:
			select {
			case <-a.fired:
				reached = true
				switch p {
				case planArrived:
					hookLabel = "receiver holding the post, effect not performed"
				case planPerformed:
					hookLabel = "receiver performed, answer not yet sent"
				case planAnswered:
					time.Sleep(time.Duration(k.rng.IntN(15)) * time.Millisecond)
				}
			case <-answered:
			case <-deadline:
			}
		}
		k.plan.Store(nil)
		if !reached {
			select {
			case <-answered:
				// Answered before the point came about: the next message.
				<-sent
				continue
			default:
				t.Fatalf("plan %d for %s never came about", p, m.id)
			}
		}
		c.kill()
		<-sent
		// Let the receiver finish with posts of the dead process (it
		// abandons or answers them) before looking.
		k.waitUntil(nil, time.After(10*time.Second), func() bool { return k.rcv.Busy() == 0 })
		if hookLabel == "" {
			hookLabel = k.observe(m)
		}
		return hookLabel, m
	}
}

// waitUntil polls cond until it holds (true), or stop is closed or
// deadline passes (false).
func (k *killTest) waitUntil(stop <-chan struct{}, deadline <-chan time.Time, cond func() bool) bool {
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

// runningHere reports whether m's request is held by a run of c.
func (k *killTest) runningHere(c *killChild, m *killMsg) bool {
	var holder string
	err := k.st.DB.QueryRow(k.st.Dialect.Rebind("SELECT COALESCE("+schema.ColHolder+", '') FROM "+schema.RequestTable+
		" WHERE session_key = ? AND client_request_id = ?"), k.sid, m.id).Scan(&holder)
	return err == nil && strings.HasPrefix(holder, k.host+":"+strconv.Itoa(c.cmd.Process.Pid)+"/")
}

// txOf is the id of the transaction m booked, or "".
func (k *killTest) txOf(m *killMsg) string {
	var id string
	_ = k.st.DB.QueryRow(k.st.Dialect.Rebind("SELECT t.id FROM ledger_transaction t JOIN "+schema.RequestTable+
		" r ON r.id = t.request_id WHERE r.session_key = ? AND r.client_request_id = ?"), k.sid, m.id).Scan(&id)
	return id
}

// observe says where the kill landed, from the database (the dead process
// writes no more) and the receiver.
func (k *killTest) observe(m *killMsg) string {
	var reqStatus, toolID, toolStatus string
	_ = k.st.DB.QueryRow(k.st.Dialect.Rebind("SELECT r.status, COALESCE(e.id, ''), COALESCE(e.status, '') FROM "+schema.RequestTable+
		" r LEFT JOIN "+schema.ToolExecutionTable+" e ON e.request_id = r.id AND e.tool_name = ?"+
		" WHERE r.session_key = ? AND r.client_request_id = ?"), agent.ToolNotify, k.sid, m.id).Scan(&reqStatus, &toolID, &toolStatus)
	_, performed, answered := k.rcv.Seen(toolID)
	switch {
	case reqStatus == schema.StoredSucceeded:
		return "request finished (reply stored)"
	case k.txOf(m) == "":
		return "before the ledger row"
	case toolStatus == "" || toolStatus == schema.StoredProcessing:
		return "ledger row committed, notification not yet announced"
	case toolStatus == schema.StoredStarted && !performed:
		return "notification announced, not performed by the receiver"
	case toolStatus == schema.StoredStarted && !answered:
		return "receiver performed, answer not yet sent"
	case toolStatus == schema.StoredStarted:
		return "receiver answered, result not yet recorded"
	case toolStatus == schema.StoredSucceeded:
		return "result recorded, reply not yet stored"
	}
	return "notification " + toolStatus
}

// sendUntilAnswered sends m to c until it is answered (200) or c is gone;
// a 409, 500 or 503 is sent again at once (the test does not wait for
// Retry-After: it wants the new life to start running soon). It closes
// answered, if not nil, on a 200.
func (k *killTest) sendUntilAnswered(c *killChild, m *killMsg, answered chan struct{}) {
	for {
		a, err := post(c.url, k.sid, m.content, m.id)
		if err != nil {
			k.count("transport error (the process died)")
			return
		}
		if a.status == http.StatusOK {
			k.count("200")
			m.answered, m.reply = true, a.msg.Reply
			if a.msg.TransactionID != nil {
				m.txID = *a.msg.TransactionID
			}
			if answered != nil {
				close(answered)
			}
			return
		}
		k.count(fmt.Sprintf("%d %s", a.status, strings.TrimPrefix(a.problem.Type, "https://rowlease.dev/problems/")))
		select {
		case <-c.done:
			return
		case <-time.After(30 * time.Millisecond):
		}
	}
}

func (k *killTest) count(s string) {
	k.mu.Lock()
	k.statuses[s]++
	k.mu.Unlock()
}

// check compares the ledger, the tool executions and the receiver.
func (k *killTest) check(kills, resent int, took time.Duration) {
	t := k.t
	ctx := context.Background()
	ts, err := k.st.Transactions(ctx, k.st.DB, store.TransactionFilter{Limit: 10000})
	require.NoError(t, err)
	txByClient := map[string][]string{}
	for _, tx := range ts {
		txByClient[tx.ClientRequestID] = append(txByClient[tx.ClientRequestID], tx.ID)
	}
	ledgerDup := 0
	for _, ids := range txByClient {
		ledgerDup += len(ids) - 1
	}
	effects := k.rcv.Effects()
	perTx := map[string][]webhook.Effect{}
	for _, e := range effects {
		perTx[e.Notification.TransactionID] = append(perTx[e.Notification.TransactionID], e)
	}
	effectDup := len(effects) - len(perTx)
	answered := 0
	for _, m := range k.msgs {
		if !m.answered {
			continue
		}
		answered++
		ids := txByClient[m.id]
		if assert.Len(t, ids, 1, m.id) {
			assert.Equal(t, ids[0], m.txID, "%s: the reply names its ledger row", m.id)
			if es := perTx[ids[0]]; assert.Len(t, es, 1, "%s: one effect for its transaction", m.id) {
				assert.Contains(t, m.reply, es[0].Receipt, "%s: the reply names the receipt", m.id)
			}
		}
	}
	// One notification per request, succeeded, keyed by its effect key.
	rows, err := k.st.DB.Query(k.st.Dialect.Rebind("SELECT id, status FROM "+schema.ToolExecutionTable+" WHERE tool_name = ?"), agent.ToolNotify)
	require.NoError(t, err)
	execs := map[string]string{}
	for rows.Next() {
		var id, status string
		require.NoError(t, rows.Scan(&id, &status))
		execs[id] = status
	}
	require.NoError(t, rows.Err())
	rows.Close()
	for _, e := range effects {
		assert.Equal(t, schema.StoredSucceeded, execs[e.Key], "the effect's key is a notify_webhook execution that succeeded")
	}
	st := k.rcv.Stats()

	var landings []string
	for l, n := range k.landings {
		landings = append(landings, fmt.Sprintf("    %3d  %s", n, l))
	}
	sort.Slice(landings, func(i, j int) bool { return landings[i][8:] < landings[j][8:] })
	var statuses []string
	for s, n := range k.statuses {
		statuses = append(statuses, fmt.Sprintf("%s: %d", s, n))
	}
	sort.Strings(statuses)
	t.Logf("%s: %d kills (SIGKILL) in %s; %d messages, %d of the kills on a resent message", k.d, kills, took.Round(100*time.Millisecond), len(k.msgs), resent)
	t.Logf("where the kills landed:\n%s", strings.Join(landings, "\n"))
	t.Logf("answers the clients got: %s", strings.Join(statuses, ", "))
	t.Logf("messages answered %d/%d; ledger rows %d, duplicates %d; receiver: %d posts, %d effects, %d transactions notified, %d duplicate effects, %d answered again from its memory (same key), %d abandoned (sender died first), %d 409 (key in progress)",
		answered, len(k.msgs), len(ts), ledgerDup, st.Requests, st.Effects, len(perTx), effectDup, st.Replays, st.Abandoned, st.Conflicts)

	assert.Equal(t, len(k.msgs), answered, "every message answered")
	assert.Len(t, ts, len(k.msgs), "one ledger row per message")
	assert.Zero(t, ledgerDup, "no ledger duplicates")
	assert.Len(t, effects, len(k.msgs), "one effect per message")
	assert.Len(t, perTx, len(ts), "every transaction notified")
	assert.Zero(t, effectDup, "no transaction notified twice")
	assert.Len(t, execs, len(k.msgs), "one notify_webhook execution per message")
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/schema"
)

// childEnv switches the test binary into the bookkeeper command, so the
// restart tests run the real program in a real child process.
const childEnv = "BOOKKEEPER_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	testdb.Main(m)
}

// syncBuffer is a goroutine-safe buffer that also reports the address the
// server prints when it listens.
type syncBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	addr  chan string
	found bool
}

var listeningRE = regexp.MustCompile(`listening on (http://\S+)`)

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if b.addr != nil && !b.found {
		if m := listeningRE.FindSubmatch(b.buf.Bytes()); m != nil {
			b.found = true
			b.addr <- string(m[1])
		}
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// child is the bookkeeper running as a separate process.
type child struct {
	cmd    *exec.Cmd
	url    string
	stderr *syncBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // its exit error, once done is closed
}

func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve", "-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out := &syncBuffer{addr: make(chan string, 1)}
	c := &child{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = out, c.stderr
	require.NoError(t, cmd.Start())
	go func() { c.err = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("child %v stderr:\n%s", args, c.stderr)
		}
	})
	select {
	case c.url = <-out.addr:
	case <-c.done:
		t.Fatalf("the child exited before listening: %v\nstdout: %s\nstderr: %s", c.err, out, c.stderr)
	case <-time.After(60 * time.Second):
		t.Fatal("the child did not start listening")
	}
	return c
}

// waitExit waits for the child to exit on its own.
func (c *child) waitExit(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(within):
		t.Fatalf("the child did not exit within %s", within)
		return nil
	}
}

type answer struct {
	status     int
	retryAfter int
	msg        api.MessageResponse
	problem    api.Problem
}

func post(url, session, content, id string) (answer, error) {
	body, _ := json.Marshal(api.MessageRequest{Content: content, ClientRequestID: id})
	resp, err := http.Post(url+"/api/sessions/"+session+"/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	a.retryAfter, _ = strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode == http.StatusOK {
		err = json.NewDecoder(resp.Body).Decode(&a.msg)
	} else {
		err = json.NewDecoder(resp.Body).Decode(&a.problem)
	}
	return a, err
}

func newSession(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Post(url+"/api/sessions", "application/json", nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	var s struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	return s.ID
}

// waitFor polls cond every 10ms, for up to within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func openDB(t *testing.T, path string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+path)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func count(t *testing.T, st *store.Store, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, st.DB.QueryRow(st.Dialect.Rebind(query), args...).Scan(&n))
	return n
}

// The process dies (SIGKILL) holding its leases, after create_transaction
// committed and while the second model round runs. A new process on the
// same database takes the request over once the leases expire, reuses the
// committed tool call, and answers: one transaction in the ledger.
func TestRestartInTheMiddleOfARequest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	path := filepath.Join(t.TempDir(), "bookkeeper.db")
	first := startChild(t, "-db", "sqlite:"+path, "-lease-ttl", "2s", "-llm-latency", "1500ms")
	st := openDB(t, path)
	sid := newSession(t, first.url)

	type result struct {
		a   answer
		err error
	}
	sent := make(chan result, 1)
	go func() {
		a, err := post(first.url, sid, "中午吃粉花了 35", "lunch-1")
		sent <- result{a, err}
	}()
	// Round 1 (1.5s) asks for create_transaction, which commits; round 2
	// (another 1.5s) is running when the row appears.
	waitFor(t, 20*time.Second, "create_transaction to commit", func() bool {
		n, err := st.CountTransactions(context.Background(), st.DB)
		return err == nil && n == 1
	})
	require.NoError(t, first.cmd.Process.Kill())
	first.waitExit(t, 10*time.Second)
	r := <-sent
	require.Error(t, r.err, "the client lost its connection: %+v", r.a)
	assert.Equal(t, 1, count(t, st, "SELECT COUNT(*) FROM "+schema.RequestTable+" WHERE status = ?", schema.StoredProcessing),
		"the request was still running when the process died")

	second := startChild(t, "-db", "sqlite:"+path, "-lease-ttl", "2s", "-llm-latency", "50ms")
	var a answer
	conflicts := 0
	for attempt := 1; ; attempt++ {
		var err error
		a, err = post(second.url, sid, "中午吃粉花了 35", "lunch-1")
		require.NoError(t, err)
		if a.status != http.StatusConflict {
			break
		}
		conflicts++
		require.Equal(t, api.ProblemBase+api.ProblemRequestInFlight, a.problem.Type)
		require.GreaterOrEqual(t, a.retryAfter, 1)
		require.Less(t, attempt, 30, "the dead process's leases never expired")
		time.Sleep(time.Duration(a.retryAfter) * time.Second)
	}
	t.Logf("409 request-in-flight %d time(s) before the dead process's lease expired", conflicts)
	require.Equal(t, http.StatusOK, a.status, "%+v", a.problem)
	assert.False(t, a.msg.Replayed)
	assert.True(t, a.msg.Resumed)
	assert.Contains(t, a.msg.Reply, "35.00")

	ts, err := st.Transactions(context.Background(), st.DB, store.TransactionFilter{})
	require.NoError(t, err)
	require.Len(t, ts, 1, "exactly one transaction in the ledger")
	require.NotNil(t, a.msg.TransactionID)
	assert.Equal(t, ts[0].ID, *a.msg.TransactionID)
	assert.Equal(t, "lunch-1", ts[0].ClientRequestID)
	assert.Equal(t, 1, count(t, st, "SELECT COUNT(*) FROM "+schema.ToolExecutionTable+" WHERE tool_name = ?", "create_transaction"),
		"the committed tool call was reused, not run again")
	ms, err := st.Messages(context.Background(), st.DB, sid, 0)
	require.NoError(t, err)
	require.Len(t, ms, 2, "the user message once, the reply once")

	again, err := post(second.url, sid, "中午吃粉花了 35", "lunch-1")
	require.NoError(t, err)
	assert.True(t, again.msg.Replayed)
	assert.Equal(t, *a.msg.TransactionID, *again.msg.TransactionID)

	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	assert.NoError(t, second.waitExit(t, 15*time.Second), "a clean exit on SIGTERM")
}

// SIGTERM with a request running longer than the grace period: the run is
// abandoned (503), its leases are released before the process exits, and a
// new process answers the retry at once although the TTL is 30s.
func TestSIGTERMReleasesLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	path := filepath.Join(t.TempDir(), "bookkeeper.db")
	first := startChild(t, "-db", "sqlite:"+path, "-lease-ttl", "30s", "-llm-latency", "1h", "-shutdown-grace", "300ms")
	st := openDB(t, path)
	sid := newSession(t, first.url)
	sent := make(chan answer, 1)
	go func() {
		a, err := post(first.url, sid, "taxi 18 yesterday", "taxi-1")
		if err != nil {
			a.status = -1
		}
		sent <- a
	}()
	waitFor(t, 20*time.Second, "the run to start", func() bool {
		return count(t, st, "SELECT COUNT(*) FROM chat_message WHERE session_key = ?", sid) == 1
	})
	start := time.Now()
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGTERM))
	a := <-sent
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	assert.Equal(t, api.ProblemBase+api.ProblemShuttingDown, a.problem.Type)
	require.NoError(t, first.waitExit(t, 15*time.Second))
	t.Logf("exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	assert.Zero(t, count(t, st, "SELECT COUNT(*) FROM "+schema.RequestTable+" WHERE token IS NOT NULL"), "request lease released")
	assert.Zero(t, count(t, st, "SELECT COUNT(*) FROM "+schema.SessionTable+" WHERE token IS NOT NULL"), "session lease released")

	second := startChild(t, "-db", "sqlite:"+path, "-lease-ttl", "30s", "-llm-latency", "20ms")
	b, err := post(second.url, sid, "taxi 18 yesterday", "taxi-1")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, b.status, "no 409: the leases were released, %+v", b.problem)
	assert.True(t, b.msg.Resumed)
	n, err := st.CountTransactions(context.Background(), st.DB)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

// SIGTERM with a request that finishes within the grace period: it is
// answered, then the process exits cleanly.
func TestSIGTERMDrains(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	path := filepath.Join(t.TempDir(), "bookkeeper.db")
	c := startChild(t, "-db", "sqlite:"+path, "-llm-latency", "400ms", "-shutdown-grace", "20s")
	st := openDB(t, path)
	sid := newSession(t, c.url)
	sent := make(chan answer, 1)
	go func() {
		a, _ := post(c.url, sid, "coffee 4.5", "coffee-1")
		sent <- a
	}()
	waitFor(t, 20*time.Second, "the run to start", func() bool {
		return count(t, st, "SELECT COUNT(*) FROM chat_message WHERE session_key = ?", sid) == 1
	})
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	a := <-sent
	require.Equal(t, http.StatusOK, a.status, "%+v", a.problem)
	require.NotNil(t, a.msg.TransactionID)
	require.NoError(t, c.waitExit(t, 15*time.Second))
	_, err := http.Get(c.url + "/healthz")
	require.Error(t, err, "no longer listening")
}

func TestCommandLine(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"help"}, 0, "usage"},
		{[]string{"launch"}, 2, `unknown command "launch"`},
		{[]string{"serve", "-no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"serve", "extra"}, 2, "unexpected arguments"},
		{[]string{"serve", "-db", "oracle://x", "-addr", "127.0.0.1:0"}, 1, "unknown scheme"},
		{[]string{"serve", "-db", "sqlite:" + filepath.Join(t.TempDir(), "x.db"), "-llm", "gpt", "-addr", "127.0.0.1:0"}, 1, `-llm "gpt"`},
		{[]string{"serve", "-db", "sqlite:" + filepath.Join(t.TempDir(), "x.db"), "-lease-ttl", "3s", "-heartbeat", "2s", "-addr", "127.0.0.1:0"}, 1, "interval"},
		{[]string{"demo", "-sessions", "x"}, 2, "invalid value"},
		{[]string{"serve", "-approve-above", "lots"}, 2, `invalid value "lots" for flag -approve-above`},
		{[]string{"serve", "-approve-above", "12.345"}, 2, "more than two decimal places"},
		{[]string{"serve", "-db", "sqlite:" + filepath.Join(t.TempDir(), "x.db"), "-webhook", "ftp://hooks", "-addr", "127.0.0.1:0"}, 1, "-webhook"},
		{[]string{"receiver", "-no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"receiver", "-delay", "-1s"}, 2, "negative -delay"},
		{[]string{"receiver", "extra"}, 2, "unexpected arguments"},
		{[]string{"receiver", "-addr", "256.0.0.1:1"}, 1, "receiver"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(ctx, tc.args, &stdout, &stderr)
		assert.Equal(t, tc.code, code, "%v: %s%s", tc.args, stdout.String(), stderr.String())
		assert.Contains(t, stdout.String()+stderr.String(), tc.out, "%v", tc.args)
	}
}

// bookkeeper -h (and --help, help) shows both commands and the flags of
// each, on stdout; serve -h and demo -h show their own.
func TestHelp(t *testing.T) {
	serveFlags := []string{"-addr", "-db", "-llm", "-llm-base-url", "-llm-model", "-llm-latency", "-llm-vary", "-lease-ttl", "-heartbeat", "-shutdown-grace", "-retention", "-steps", "-resume-grace", "-approve-above", "-approval-within", "-v"}
	demoFlags := []string{"-sessions", "-max-attempts"}
	// Both take the threshold of approval; its default reads as an amount.
	for _, args := range [][]string{{"serve", "-h"}, {"demo", "-h"}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, run(context.Background(), args, &stdout, &stderr))
		assert.Contains(t, stdout.String(), "(default 1000.00)", "%v", args)
	}
	for _, tc := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"-h"}, append(append([]string{"bookkeeper [serve]", "bookkeeper demo"}, serveFlags...), demoFlags...), nil},
		{[]string{"--help"}, append([]string{"bookkeeper [serve]", "bookkeeper demo"}, demoFlags...), nil},
		{[]string{"help"}, append(append([]string{"bookkeeper [serve]", "bookkeeper demo"}, serveFlags...), demoFlags...), nil},
		{[]string{"serve", "-h"}, append([]string{"bookkeeper [serve]"}, serveFlags...), demoFlags},
		{[]string{"demo", "-h"}, append([]string{"bookkeeper demo", "-db", "-lease-ttl"}, demoFlags...), []string{"-addr", "-shutdown-grace", "-retention"}},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		assert.Equal(t, 0, code, "%v", tc.args)
		out := stdout.String()
		assert.Empty(t, stderr.String(), "%v: help asked for goes to stdout", tc.args)
		assert.NotContains(t, out, "Usage of", "%v", tc.args)
		for _, w := range tc.want {
			assert.Contains(t, out, w, "%v", tc.args)
		}
		for _, w := range tc.not {
			assert.NotContains(t, out, w, "%v", tc.args)
		}
	}
	// A bad flag: the error and the command's usage, on stderr.
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"-no-such-flag"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "flag provided but not defined: -no-such-flag")
	assert.Contains(t, stderr.String(), "-addr")
}

func TestDemoCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"demo", "-sessions", "3", "-llm-latency", "20ms", "-slow-tool", "1500ms"}, &stdout, &stderr)
	require.Equal(t, 0, code, "%s\n%s", stdout.String(), stderr.String())
	out := stdout.String()
	assert.Contains(t, out, "[ok  ] every client request id produced at most one transaction")
	assert.Contains(t, out, "scene: a slow tool — the webhook receiver takes 1.5s to answer")
	assert.Contains(t, out, "PASS")
	assert.NotContains(t, out, "FAIL")
	assert.Contains(t, stderr.String(), "sends", "the progress bar")
	assert.NotContains(t, stderr.String(), "\r", "no carriage returns when stderr is not a terminal")
}

// serveUntil runs the server command in-process until ctx is done.
func TestServeInProcess(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{addr: make(chan string, 1)}
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-db", "sqlite:" + filepath.Join(t.TempDir(), "b.db"), "-llm-latency", "0"}, out, &stderr)
	}()
	var url string
	select {
	case url = <-out.addr:
	case code := <-done:
		t.Fatalf("exited %d: %s", code, stderr.String())
	}
	sid := newSession(t, url)
	a, err := post(url, sid, "got paid 2000 salary", "pay-1")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, a.status)
	assert.Contains(t, a.msg.Reply, "2000.00")
	cancel()
	require.Equal(t, 0, <-done, stderr.String())
	assert.Contains(t, stderr.String(), "stopped")
	http.DefaultClient.CloseIdleConnections()
}

// -approve-above reads an amount in cents; 0 or a negative amount turns
// the approvals off (-1: the zero value is the default).
func TestApproveAboveFlag(t *testing.T) {
	for in, want := range map[string]int64{"1000.00": 100_000, "2,500": 250_000, "0.5": 50, "0": -1, "-3": -1, "0.00": -1} {
		var f thresholdFlag
		require.NoError(t, f.Set(in), in)
		assert.Equal(t, want, int64(f), in)
	}
	fs, o := serveFlags()
	require.NoError(t, fs.Parse([]string{"-approve-above", "0"}))
	assert.Equal(t, int64(-1), o.cfg.ApproveAbove)
	fs, o = serveFlags()
	require.NoError(t, fs.Parse(nil))
	assert.Equal(t, int64(100_000), o.cfg.ApproveAbove, "the default")
}

package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/lease"
)

// testLatency is the rule model's latency per round in these tests.
const testLatency = 30 * time.Millisecond

type env struct {
	t   *testing.T
	url string
	svc *service.Service
	st  *store.Store
	hc  *http.Client
}

type option func(*service.Config)

func withLatency(d time.Duration) option { return func(c *service.Config) { c.LLMLatency = d } }
func withModel(m llm.Model) option       { return func(c *service.Config) { c.Model = m } }
func withTTL(d time.Duration) option     { return func(c *service.Config) { c.LeaseTTL = d } }

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newEnv serves the bookkeeper on db with httptest.
func newEnv(t *testing.T, db *sqlx.DB, opts ...option) *env {
	t.Helper()
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	st := store.New(db.DB, d)
	cfg := service.Config{LLMLatency: testLatency, LeaseTTL: 10 * time.Second, Logger: quietLogger()}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := service.New(context.Background(), st, cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(svc.API)
	t.Cleanup(func() {
		svc.API.Close()
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Runner.Close(ctx) // the queued messages it runs
	})
	return &env{t: t, url: ts.URL, svc: svc, st: st, hc: &http.Client{Timeout: time.Minute}}
}

// reply is a decoded response: a MessageResponse or a Problem.
type reply struct {
	status     int
	ctype      string
	retryAfter string
	msg        api.MessageResponse
	problem    api.Problem
	raw        []byte
}

func (e *env) do(method, path string, body []byte) reply {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	require.NoError(e.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.hc.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	r := reply{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), retryAfter: resp.Header.Get("Retry-After"), raw: raw}
	if resp.StatusCode == http.StatusOK && method == http.MethodPost {
		require.NoError(e.t, json.Unmarshal(raw, &r.msg), string(raw))
	} else if resp.StatusCode >= 400 {
		require.Equal(e.t, api.ProblemContentType, r.ctype, "every error is problem+json: %s", raw)
		require.NoError(e.t, json.Unmarshal(raw, &r.problem), string(raw))
		require.Equal(e.t, resp.StatusCode, r.problem.Status)
		require.NotEmpty(e.t, r.problem.Title)
	}
	return r
}

func (e *env) newSession() string {
	e.t.Helper()
	r := e.do(http.MethodPost, "/api/sessions", nil)
	require.Equal(e.t, http.StatusCreated, r.status, string(r.raw))
	var s struct {
		ID string `json:"id"`
	}
	require.NoError(e.t, json.Unmarshal(r.raw, &s))
	return s.ID
}

func msgBody(content, id string) []byte {
	b, _ := json.Marshal(api.MessageRequest{Content: content, ClientRequestID: id})
	return b
}

func (e *env) send(session, content, id string) reply {
	e.t.Helper()
	return e.do(http.MethodPost, "/api/sessions/"+session+"/messages", msgBody(content, id))
}

// sendUntilDone retries a 409 after Retry-After (shortened: tests are
// fast) until the message is answered.
func (e *env) sendUntilDone(session, content, id string) reply {
	e.t.Helper()
	for range 200 {
		r := e.send(session, content, id)
		if r.status != http.StatusConflict {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("%s still 409 after 200 tries", id)
	return reply{}
}

func (e *env) ledgerCount() int {
	e.t.Helper()
	n, err := e.st.CountTransactions(context.Background(), e.st.DB)
	require.NoError(e.t, err)
	return n
}

func (e *env) messages(session string) []store.Message {
	e.t.Helper()
	ms, err := e.st.Messages(context.Background(), e.st.DB, session, 0)
	require.NoError(e.t, err)
	return ms
}

func retryAfterOK(t *testing.T, r reply) {
	t.Helper()
	n, err := strconv.Atoi(r.retryAfter)
	require.NoError(t, err, "409 needs Retry-After: %q", r.retryAfter)
	require.GreaterOrEqual(t, n, 1)
}

// waitFor polls cond every 10ms for up to 20s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

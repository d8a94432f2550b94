package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// gate is an agent whose messages with content "block" run until they
// are released (or their context ends); the others answer at once.
type gate struct {
	started  chan string // a blocking message started: its client request id
	released chan struct{}
}

func newGate() *gate {
	return &gate{started: make(chan string, 16), released: make(chan struct{})}
}

func (g *gate) release() { close(g.released) }

func (g *gate) agent(ctx context.Context, run *request.Run) (request.Answer, error) {
	if run.Content() == "block" {
		g.started <- run.ClientRequestID()
		select {
		case <-g.released:
		case <-ctx.Done():
			return request.Answer{}, context.Cause(ctx)
		}
	}
	return request.Answer{Reply: "re: " + run.Content(), Result: json.RawMessage(`{"n":1}`)}, nil
}

const testBase = "https://example.test/problems/"

// handlerEnv serves the two handlers at /s/{session}/messages[/{id}] over
// a Runner on db, with the defaults of package httpapi and a problem base
// of the service's own.
type handlerEnv struct {
	url    string
	runner *request.Runner
	gate   *gate
}

func newHandlerEnv(t *testing.T, db *sqlx.DB, queueMax int) *handlerEnv {
	t.Helper()
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	require.NoError(t, schema.Apply(context.Background(), db, d))
	g := newGate()
	r, err := request.New(request.Config{DB: db, Dialect: d, TTL: 20 * time.Second, HeartbeatInterval: 500 * time.Millisecond, ReleaseTimeout: 5 * time.Second,
		Agent: g.agent, Session: session.Config{AutoCreate: true},
		Queue: request.QueueConfig{Max: queueMax, PollMin: 5 * time.Millisecond, PollMax: 50 * time.Millisecond}})
	require.NoError(t, err)
	problems := httpapi.Problems{Base: testBase, MaxRetryAfter: 3 * time.Second}
	mh, err := httpapi.MessageHandler(httpapi.MessageConfig{
		Runner:   r,
		Message:  httpapi.JSONMessage("session", 0),
		Location: func(m request.Message) string { return "/s/" + m.SessionKey + "/messages/" + m.ClientRequestID },
		MaxWait:  30 * time.Second,
		Problems: problems,
	})
	require.NoError(t, err)
	sh, err := httpapi.StatusHandler(httpapi.StatusConfig{Runner: r, Keys: httpapi.PathKeys("session", "id"),
		MaxWait: 30 * time.Second, Problems: problems})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /s/{session}/messages", mh)
	mux.Handle("GET /s/{session}/messages/{id}", sh)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, r.Close(ctx))
	})
	return &handlerEnv{url: srv.URL, runner: r, gate: g}
}

type resp struct {
	code   int
	header http.Header
	body   map[string]any
	raw    string
}

func (e *handlerEnv) do(t *testing.T, method, path, body string, header ...string) resp {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	out := resp{code: res.StatusCode, header: res.Header, raw: string(raw)}
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &out.body), "%s", raw)
	}
	return out
}

func (e *handlerEnv) post(t *testing.T, sess, id, content string, extra ...string) resp {
	t.Helper()
	body, err := json.Marshal(map[string]string{"client_request_id": id, "content": content})
	require.NoError(t, err)
	if len(extra) > 0 && extra[0] != "" { // on_busy
		body, err = json.Marshal(map[string]string{"client_request_id": id, "content": content, "on_busy": extra[0]})
		require.NoError(t, err)
	}
	var header []string
	if len(extra) > 1 {
		header = extra[1:]
	}
	return e.do(t, http.MethodPost, "/s/"+sess+"/messages", string(body), header...)
}

// postAsync posts a message that blocks, and returns once its run started.
func (e *handlerEnv) postAsync(t *testing.T, sess, id string) <-chan resp {
	t.Helper()
	done := make(chan resp, 1)
	go func() { done <- e.post(t, sess, id, "block") }()
	select {
	case got := <-e.gate.started:
		require.Equal(t, id, got)
	case r := <-done:
		t.Fatalf("the blocking message answered at once: %d %s", r.code, r.raw)
	case <-time.After(30 * time.Second):
		t.Fatal("the blocking message never started")
	}
	return done
}

func problemType(r resp) string { s, _ := r.body["type"].(string); return s }

// TestMessageAndStatusHandlers: the handlers of package httpapi answer a
// message (200, then its replay), a busy session (409 with Retry-After
// capped, under the service's problem base), a queued message (202 with
// Location and position, then its status with Prefer: wait), a message in
// flight waited for with Prefer: wait (200 replayed, Preference-Applied),
// an interrupted one (409 with interrupted_by and request_id), a full
// queue (429 with queue_max), bad input (400) and unknown ids (404) — on
// each database.
func TestMessageAndStatusHandlers(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newHandlerEnv(t, db, 1)

		// Answered, then replayed.
		r := e.post(t, "s1", "m1", "hello")
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "re: hello", r.body["reply"])
		assert.Equal(t, false, r.body["replayed"])
		assert.Equal(t, map[string]any{"n": float64(1)}, r.body["result"])
		assert.Equal(t, "application/json", r.header.Get("Content-Type"))
		r = e.post(t, "s1", "m1", "hello")
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, true, r.body["replayed"])

		// Its status.
		r = e.do(t, http.MethodGet, "/s/s1/messages/m1", "")
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "succeeded", r.body["state"])
		assert.Equal(t, "re: hello", r.body["reply"])
		assert.NotEmpty(t, r.body["request_id"])
		assert.Empty(t, r.header.Get("Preference-Applied"), "nothing to wait for")

		// Reused id with other content: 422 under the service's base,
		// with the request's id.
		r = e.post(t, "s1", "m1", "other")
		require.Equal(t, http.StatusUnprocessableEntity, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeClientRequestIDReused, problemType(r))
		assert.Equal(t, httpapi.ContentType, r.header.Get("Content-Type"))

		// A busy session: 409 session-busy, Retry-After capped at 3 s.
		first := e.postAsync(t, "s2", "a")
		r = e.post(t, "s2", "b", "hi")
		require.Equal(t, http.StatusConflict, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeSessionBusy, problemType(r))
		assert.Equal(t, "3", r.header.Get("Retry-After"))

		// Queued: 202, Location, position 0.
		r = e.post(t, "s2", "q", "later", "queue")
		require.Equal(t, http.StatusAccepted, r.code, r.raw)
		assert.Equal(t, "/s/s2/messages/q", r.header.Get("Location"))
		assert.JSONEq(t, `{"status":"queued","position":0}`, r.raw)
		r = e.do(t, http.MethodGet, "/s/s2/messages/q", "")
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "queued", r.body["state"])
		assert.Equal(t, float64(0), r.body["position"])

		// A full queue (Max 1): 429 with queue_max.
		r = e.post(t, "s2", "q2", "later", "queue")
		require.Equal(t, http.StatusTooManyRequests, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeQueueFull, problemType(r))
		assert.Equal(t, float64(1), r.body["queue_max"])

		// Prefer: wait while the first message runs: the resend of the
		// message in flight waits 1 s and is still in flight (409); the
		// queued one's status waits 1 s and is still queued.
		r = e.post(t, "s2", "a", "block", "", "Prefer", "wait=1")
		require.Equal(t, http.StatusConflict, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeRequestInFlight, problemType(r))
		assert.Equal(t, "wait=1", r.header.Get("Preference-Applied"))
		r = e.do(t, http.MethodGet, "/s/s2/messages/q", "", "Prefer", "wait=1")
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "queued", r.body["state"])
		assert.Equal(t, "wait=1", r.header.Get("Preference-Applied"))

		// Released: the first answers; the queued one runs after it, and
		// its resend with Prefer: wait answers its reply (waited for, or
		// replayed if it had finished already).
		e.gate.release()
		r = <-first
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, false, r.body["replayed"])
		r = e.post(t, "s2", "q", "later", "queue", "Prefer", "wait=20")
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, true, r.body["replayed"])
		assert.Equal(t, "re: later", r.body["reply"])
		r = e.do(t, http.MethodGet, "/s/s2/messages/q", "", "Prefer", "wait=20")
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "succeeded", r.body["state"])
		assert.Empty(t, r.header.Get("Preference-Applied"), "final: nothing to wait for")

		// Bad input and unknown ids.
		r = e.do(t, http.MethodPost, "/s/s3/messages", `{"content": 1}`)
		require.Equal(t, http.StatusBadRequest, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeInvalidRequest, problemType(r))
		r = e.do(t, http.MethodPost, "/s/s3/messages", `{"client_request_id":"x","content":"a","on_busy":"wait"}`)
		require.Equal(t, http.StatusBadRequest, r.code, r.raw)
		r = e.post(t, "s3", "", "no id")
		require.Equal(t, http.StatusBadRequest, r.code, r.raw)
		assert.Contains(t, r.body["detail"], "client request id")
		r = e.do(t, http.MethodGet, "/s/s3/messages/nope", "")
		require.Equal(t, http.StatusNotFound, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeNotFound, problemType(r))
	})
}

// TestMessageHandlerInterrupted: a message interrupted by a later one
// gets 409 interrupted with the extension members interrupted_by (the
// later message's client request id) and request_id; its status says
// interrupted.
func TestMessageHandlerInterrupted(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newHandlerEnv(t, db, 5)
		first := e.postAsync(t, "s", "a")
		r := e.post(t, "s", "b", "now", "interrupt")
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "re: now", r.body["reply"])
		r = <-first
		require.Equal(t, http.StatusConflict, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeInterrupted, problemType(r))
		assert.Equal(t, "b", r.body["interrupted_by"])
		st, err := e.runner.Status(context.Background(), "s", "a")
		require.NoError(t, err)
		assert.Equal(t, st.RequestID, r.body["request_id"])
		assert.Empty(t, r.header.Get("Retry-After"), "final: a retry answers the same")

		r = e.do(t, http.MethodGet, "/s/s/messages/a", "")
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "interrupted", r.body["state"])
		assert.Equal(t, "b", r.body["interrupted_by"])
	})
}

// TestHandlerConfigRequired: a handler without its Runner or its request
// reader is refused.
func TestHandlerConfigRequired(t *testing.T) {
	_, err := httpapi.MessageHandler(httpapi.MessageConfig{})
	assert.Error(t, err)
	_, err = httpapi.StatusHandler(httpapi.StatusConfig{})
	assert.Error(t, err)
}

// TestProblemExtensions: extension members follow the standard ones in
// key order, never replace them, and a problem without any encodes as
// before.
func TestProblemExtensions(t *testing.T) {
	p := httpapi.Problem{Type: "t", Title: "T", Status: 409, Detail: "d", Instance: "/x"}
	b, err := json.Marshal(p)
	require.NoError(t, err)
	assert.Equal(t, `{"type":"t","title":"T","status":409,"detail":"d","instance":"/x"}`, string(b))
	p.Extensions = map[string]any{"request_id": "r-1", "status": 200, "a": []int{1}}
	b, err = json.Marshal(p)
	require.NoError(t, err)
	assert.Equal(t, `{"type":"t","title":"T","status":409,"detail":"d","instance":"/x","a":[1],"request_id":"r-1"}`, string(b))

	rec := httptest.NewRecorder()
	httpapi.Write(rec, nil, p)
	assert.JSONEq(t, string(b), rec.Body.String())
}

// TestMessageMetadataOverHTTP: JSONMessage reads an optional "metadata"
// object and the status shows it; the same client request id with other
// metadata is 422, metadata that is not an object 400, and null none.
func TestMessageMetadataOverHTTP(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newHandlerEnv(t, db, 1)
		post := func(id, metadata string) resp {
			return e.do(t, http.MethodPost, "/s/m/messages",
				`{"client_request_id":"`+id+`","content":"hi","metadata":`+metadata+`}`)
		}
		r := post("c1", `{"user":"u-1","model":{"temperature":0.2}}`)
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "re: hi", r.body["reply"])
		st := e.do(t, http.MethodGet, "/s/m/messages/c1", "")
		require.Equal(t, http.StatusOK, st.code, st.raw)
		assert.Equal(t, map[string]any{"user": "u-1", "model": map[string]any{"temperature": 0.2}}, st.body["metadata"])

		r = post("c1", `{"model":{"temperature":0.2},"user":"u-1"}`)
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, true, r.body["replayed"], "the same object: a replay")
		r = post("c1", `{"user":"u-2"}`)
		assert.Equal(t, http.StatusUnprocessableEntity, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeClientRequestIDReused, problemType(r))
		r = post("c2", `["not", "an", "object"]`)
		assert.Equal(t, http.StatusBadRequest, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeInvalidRequest, problemType(r))

		r = post("c3", `null`)
		require.Equal(t, http.StatusOK, r.code, r.raw)
		st = e.do(t, http.MethodGet, "/s/m/messages/c3", "")
		require.Equal(t, http.StatusOK, st.code, st.raw)
		_, has := st.body["metadata"]
		assert.False(t, has, "no metadata: none shown")
	})
}

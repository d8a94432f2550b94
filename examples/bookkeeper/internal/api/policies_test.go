package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// gateModel is the rule model, except that a message whose content is
// held waits, at its first round, until it is released or its run is
// cancelled.
type gateModel struct {
	inner llm.Model
	mu    sync.Mutex
	gates map[string]*gate
}

type gate struct {
	entered, release chan struct{}
	once             sync.Once
}

func newGateModel() *gateModel {
	return &gateModel{inner: llm.NewRuleModel(llm.RuleOptions{}), gates: map[string]*gate{}}
}

// hold makes the message with this content wait; entered is closed when
// it does.
func (g *gateModel) hold(content string) (entered <-chan struct{}, release func()) {
	gt := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	g.mu.Lock()
	g.gates[content] = gt
	g.mu.Unlock()
	var once sync.Once
	return gt.entered, func() { once.Do(func() { close(gt.release) }) }
}

func (g *gateModel) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	var last string
	for _, m := range req.Messages {
		if m.Role == llm.RoleUser {
			last = m.Content
		}
	}
	g.mu.Lock()
	gt := g.gates[last]
	g.mu.Unlock()
	if gt != nil {
		gt.once.Do(func() { close(gt.entered) })
		select {
		case <-gt.release:
		case <-ctx.Done():
			return llm.Response{}, context.Cause(ctx)
		}
	}
	return g.inner.Complete(ctx, req)
}

// hreply is a response with its headers.
type hreply struct {
	status int
	header http.Header
	raw    []byte
}

func (r hreply) json(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.raw, v), string(r.raw))
}

func (r hreply) problem(t *testing.T) api.Problem {
	t.Helper()
	require.Equal(t, api.ProblemContentType, r.header.Get("Content-Type"), string(r.raw))
	var p api.Problem
	r.json(t, &p)
	require.Equal(t, r.status, p.Status)
	return p
}

// doH sends a request with extra headers.
func (e *env) doH(method, path string, body []byte, header ...string) hreply {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	require.NoError(e.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := e.hc.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return hreply{status: resp.StatusCode, header: resp.Header, raw: raw}
}

func policyBody(content, id, onBusy string) []byte {
	b, _ := json.Marshal(api.MessageRequest{Content: content, ClientRequestID: id, OnBusy: onBusy})
	return b
}

func (e *env) post(session, content, id, onBusy string, header ...string) hreply {
	e.t.Helper()
	return e.doH(http.MethodPost, "/api/sessions/"+session+"/messages", policyBody(content, id, onBusy), header...)
}

func (e *env) status(session, id string, header ...string) hreply {
	e.t.Helper()
	return e.doH(http.MethodGet, "/api/sessions/"+session+"/messages/"+url.PathEscape(id), nil, header...)
}

// statusBody is a GET …/messages/{id} body, with presence of each key.
type statusBody struct {
	ClientRequestID string  `json:"client_request_id"`
	Status          string  `json:"status"`
	Position        *int    `json:"position"`
	Reply           *string `json:"reply"`
	TransactionID   *string `json:"transaction_id"`
	keys            map[string]any
}

func readStatus(t *testing.T, r hreply) statusBody {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, string(r.raw))
	var b statusBody
	r.json(t, &b)
	r.json(t, &b.keys)
	return b
}

// on_busy "queue": 202 with the Location of the message and its position;
// the status endpoint shows it queued, then processing, then succeeded;
// "Prefer: wait" on a resend waits and answers the stored reply (or, still
// unfinished, 202 again), with Preference-Applied.
func TestOnBusyQueue(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		gm := newGateModel()
		e := newEnv(t, db, withModel(gm))
		sid := e.newSession()
		busy, releaseBusy := gm.hold("coffee 4.5")
		first := make(chan hreply, 1)
		go func() { first <- e.post(sid, "coffee 4.5", "m1", "") }()
		<-busy

		r := e.post(sid, "taxi 18 yesterday", "q1", "queue")
		require.Equal(t, http.StatusAccepted, r.status, string(r.raw))
		assert.Equal(t, "/api/sessions/"+sid+"/messages/q1", r.header.Get("Location"))
		assert.Equal(t, "application/json", r.header.Get("Content-Type"))
		assert.JSONEq(t, `{"status":"queued","position":0}`, string(r.raw))
		q2held, releaseQ2 := gm.hold("lunch 42.5")
		r = e.post(sid, "lunch 42.5", "q2", "queue")
		require.Equal(t, http.StatusAccepted, r.status, string(r.raw))
		assert.JSONEq(t, `{"status":"queued","position":1}`, string(r.raw))

		// The status of each.
		st := readStatus(t, e.status(sid, "q2"))
		assert.Equal(t, "q2", st.ClientRequestID)
		assert.Equal(t, "queued", st.Status)
		require.NotNil(t, st.Position)
		assert.Equal(t, 1, *st.Position)
		assert.Contains(t, st.keys, "reply")
		assert.Nil(t, st.Reply)
		assert.Contains(t, st.keys, "transaction_id")
		assert.Nil(t, st.TransactionID)
		st = readStatus(t, e.status(sid, "m1"))
		assert.Equal(t, "processing", st.Status)
		assert.NotContains(t, st.keys, "position", "position is for queued messages only")
		p := e.status(sid, "nope")
		require.Equal(t, http.StatusNotFound, p.status)
		assert.Equal(t, problemType(api.ProblemNotFound), p.problem(t).Type)

		// A resend of a queued message: 202 again, nothing new.
		r = e.post(sid, "taxi 18 yesterday", "q1", "queue")
		require.Equal(t, http.StatusAccepted, r.status)
		assert.JSONEq(t, `{"status":"queued","position":0}`, string(r.raw))
		// Prefer: wait on a message that stays queued meanwhile: 202 after
		// the wait, with Preference-Applied.
		r = e.post(sid, "taxi 18 yesterday", "q1", "", "Prefer", "wait=1")
		require.Equal(t, http.StatusAccepted, r.status, string(r.raw))
		assert.Equal(t, "wait=1", r.header.Get("Preference-Applied"))
		assert.Equal(t, "/api/sessions/"+sid+"/messages/q1", r.header.Get("Location"))
		// The same for GET.
		r = e.status(sid, "q1", "Prefer", "wait=1")
		assert.Equal(t, "queued", readStatus(t, r).Status)
		assert.Equal(t, "wait=1", r.header.Get("Preference-Applied"))

		// q2's resend waits for its reply (up to 30 s, capped at 60).
		waited := make(chan hreply, 1)
		go func() { waited <- e.post(sid, "lunch 42.5", "q2", "", "Prefer", "wait=30") }()
		releaseBusy()
		r = <-first
		require.Equal(t, http.StatusOK, r.status, string(r.raw))
		<-q2held
		assert.Equal(t, "processing", readStatus(t, e.status(sid, "q2")).Status)
		releaseQ2()
		r = <-waited
		require.Equal(t, http.StatusOK, r.status, string(r.raw))
		var out api.MessageResponse
		r.json(t, &out)
		assert.True(t, out.Replayed)
		require.NotNil(t, out.TransactionID)
		if pa := r.header.Get("Preference-Applied"); pa != "" {
			assert.Equal(t, "wait=30", pa)
		}
		st = readStatus(t, e.status(sid, "q2", "Prefer", "wait=5"))
		assert.Equal(t, "succeeded", st.Status)
		require.NotNil(t, st.Reply)
		assert.Equal(t, out.Reply, *st.Reply)
		require.NotNil(t, st.TransactionID)
		assert.Equal(t, *out.TransactionID, *st.TransactionID, "the same transaction_id")
		assert.Empty(t, r.header.Get("Retry-After"))

		st = readStatus(t, e.status(sid, "q1", "Prefer", "wait=30"))
		assert.Equal(t, "succeeded", st.Status)
		assert.Equal(t, 3, e.ledgerCount(), "m1, q1 and q2, once each")
	})
}

// on_busy "interrupt": the running message stops; the new one runs and
// gets the usual 200; the interrupted one's pending call, and every resend
// of its id, answer 409 interrupted; its status says so.
func TestOnBusyInterrupt(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		gm := newGateModel()
		e := newEnv(t, db, withModel(gm), withTTL(2*time.Second))
		sid := e.newSession()
		busy, release := gm.hold("coffee 4.5")
		defer release()
		first := make(chan hreply, 1)
		go func() { first <- e.post(sid, "coffee 4.5", "m1", "") }()
		<-busy

		r := e.post(sid, "taxi 18 yesterday", "i1", "interrupt")
		require.Equal(t, http.StatusOK, r.status, string(r.raw))
		var out api.MessageResponse
		r.json(t, &out)
		assert.False(t, out.Replayed)
		require.NotNil(t, out.TransactionID)

		for _, r := range []hreply{<-first, e.post(sid, "coffee 4.5", "m1", ""), e.post(sid, "coffee 4.5", "m1", "", "Prefer", "wait=5")} {
			require.Equal(t, http.StatusConflict, r.status, string(r.raw))
			assert.Equal(t, problemType(api.ProblemInterrupted), r.problem(t).Type)
			assert.Empty(t, r.header.Get("Retry-After"), "final: no Retry-After")
		}
		st := readStatus(t, e.status(sid, "m1"))
		assert.Equal(t, "interrupted", st.Status)
		assert.Nil(t, st.Reply)
		assert.Equal(t, 1, e.ledgerCount(), "only the interrupting message recorded one")
	})
}

// on_busy "reject" (and no on_busy): 409 session-busy, as before; a
// duplicate in flight with "Prefer: wait" that stays unfinished: 409
// request-in-flight after the wait, with Preference-Applied.
func TestOnBusyRejectAndWaitingDuplicate(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		gm := newGateModel()
		e := newEnv(t, db, withModel(gm))
		sid := e.newSession()
		busy, release := gm.hold("coffee 4.5")
		first := make(chan hreply, 1)
		go func() { first <- e.post(sid, "coffee 4.5", "m1", "") }()
		<-busy
		for _, onBusy := range []string{"", "reject"} {
			r := e.post(sid, "taxi 18 yesterday", "r-"+onBusy, onBusy)
			require.Equal(t, http.StatusConflict, r.status, string(r.raw))
			assert.Equal(t, problemType(api.ProblemSessionBusy), r.problem(t).Type)
			retryAfterOKH(t, r)
		}
		r := e.post(sid, "coffee 4.5", "m1", "", "Prefer", "wait=1")
		require.Equal(t, http.StatusConflict, r.status, string(r.raw))
		assert.Equal(t, problemType(api.ProblemRequestInFlight), r.problem(t).Type)
		assert.Equal(t, "wait=1", r.header.Get("Preference-Applied"))
		retryAfterOKH(t, r)
		// A preference the server does not honour is not echoed.
		r = e.post(sid, "coffee 4.5", "m1", "", "Prefer", "respond-async")
		require.Equal(t, http.StatusConflict, r.status)
		assert.Empty(t, r.header.Get("Preference-Applied"))

		waited := make(chan hreply, 1)
		go func() { waited <- e.post(sid, "coffee 4.5", "m1", "", "Prefer", "wait=120") }()
		release()
		r1 := <-first
		require.Equal(t, http.StatusOK, r1.status)
		r = <-waited
		require.Equal(t, http.StatusOK, r.status, string(r.raw))
		var a, b api.MessageResponse
		r1.json(t, &a)
		r.json(t, &b)
		assert.True(t, b.Replayed)
		assert.Equal(t, a.Reply, b.Reply)
		assert.Equal(t, *a.TransactionID, *b.TransactionID)
		if pa := r.header.Get("Preference-Applied"); pa != "" {
			assert.Equal(t, "wait=60", pa, "capped by MaxWait")
		}
	})
}

func retryAfterOKH(t *testing.T, r hreply) {
	t.Helper()
	retryAfterOK(t, reply{retryAfter: r.header.Get("Retry-After")})
}

// A full queue is 429 queue-full with Retry-After; nothing is stored.
func TestQueueFullIs429(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		gm := newGateModel()
		e := newEnv(t, db, withModel(gm), func(c *service.Config) { c.QueueMax = 1 })
		sid := e.newSession()
		busy, release := gm.hold("coffee 4.5")
		first := make(chan hreply, 1)
		go func() { first <- e.post(sid, "coffee 4.5", "m1", "") }()
		<-busy
		require.Equal(t, http.StatusAccepted, e.post(sid, "taxi 18 yesterday", "q1", "queue").status)
		r := e.post(sid, "lunch 42.5", "q2", "queue")
		require.Equal(t, http.StatusTooManyRequests, r.status, string(r.raw))
		assert.Equal(t, problemType(api.ProblemQueueFull), r.problem(t).Type)
		retryAfterOKH(t, r)
		require.Equal(t, http.StatusNotFound, e.status(sid, "q2").status, "nothing stored")
		release()
		require.Equal(t, http.StatusOK, (<-first).status)
		assert.Equal(t, "succeeded", readStatus(t, e.status(sid, "q1", "Prefer", "wait=30")).Status)
	})
}

// A resend of a message whose retention passed is 410 expired, and so are
// its status and a cancel; an unknown on_busy is 400.
func TestExpiredIs410AndBadOnBusyIs400(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		sid := e.newSession()
		r := e.post(sid, "coffee 4.5", "old", "")
		require.Equal(t, http.StatusOK, r.status, string(r.raw))
		n, err := e.svc.Runner.Sweep(context.Background(), 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		for _, r := range []hreply{e.post(sid, "coffee 4.5", "old", ""), e.status(sid, "old")} {
			require.Equal(t, http.StatusGone, r.status, string(r.raw))
			assert.Equal(t, problemType(api.ProblemExpired), r.problem(t).Type)
		}
		for _, body := range []string{
			`{"content":"coffee 4.5","client_request_id":"x","on_busy":"later"}`,
			`{"content":"coffee 4.5","client_request_id":"x","on_busy":"QUEUE"}`,
			`{"content":"coffee 4.5","client_request_id":"x","on_busy":1}`,
		} {
			r := e.doH(http.MethodPost, "/api/sessions/"+sid+"/messages", []byte(body))
			require.Equal(t, http.StatusBadRequest, r.status, body)
			assert.Equal(t, problemType(api.ProblemInvalidRequest), r.problem(t).Type)
		}
		// A cancel of it too: it is gone.
		r = e.doH(http.MethodDelete, "/api/sessions/"+sid+"/messages/old", nil)
		require.Equal(t, http.StatusGone, r.status, string(r.raw))
		assert.Equal(t, problemType(api.ProblemExpired), r.problem(t).Type)
		r = e.doH(http.MethodPut, "/api/sessions/"+sid+"/messages/old", nil)
		assert.Equal(t, http.StatusMethodNotAllowed, r.status)
		assert.Equal(t, "DELETE, GET, HEAD", r.header.Get("Allow"))
	})
}

// The status of a message whose model failed is "failed", and waiting
// for it returns at once.
func TestStatusOfAFailedMessage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, withModel(failingModel{}))
		sid := e.newSession()
		r := e.post(sid, "lunch 12", "m", "")
		require.Equal(t, http.StatusBadGateway, r.status, string(r.raw))
		st := readStatus(t, e.status(sid, "m", "Prefer", "wait=60"))
		assert.Equal(t, "failed", st.Status)
		assert.Nil(t, st.Reply)
		assert.Nil(t, st.TransactionID)
		assert.NotContains(t, st.keys, "position")
	})
}

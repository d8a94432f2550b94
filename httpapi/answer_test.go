package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// approval is the answer the approver agent waits for.
type approval struct {
	OK bool   `json:"ok"`
	By string `json:"by"`
}

// approver is an agent that asks a person to approve a payment before it
// pays (paid counts the payments: the side effect that must happen once).
// Content "block" runs until the gate is released instead; "twice" asks a
// second question after the approval; "soon" gives its approval a
// deadline of 300 ms.
type approver struct {
	gate *gate
	paid atomic.Int32
}

func (a *approver) agent(ctx context.Context, run *request.Run) (request.Answer, error) {
	if run.Content() == "block" {
		return a.gate.agent(ctx, run)
	}
	within := time.Hour
	if run.Content() == "soon" {
		within = 300 * time.Millisecond
	}
	ok, err := request.Await[approval](ctx, run, "approve", map[string]any{"amount": 35, "to": "taxi"}, request.Within(within))
	if err != nil {
		return request.Answer{}, err
	}
	if !ok.OK {
		return request.Answer{Reply: "not paid"}, nil
	}
	if run.Content() == "twice" {
		if _, err := request.Await[bool](ctx, run, "confirm", "really?"); err != nil {
			return request.Answer{}, err
		}
	}
	a.paid.Add(1)
	return request.Answer{Reply: "paid, approved by " + ok.By, Result: json.RawMessage(`{"amount":35}`)}, nil
}

// newAnswerEnv serves the message, status and answer handlers at
// /s/{session}/messages[/{id}[/answers/{name}]] over a Runner on db whose
// agent is an approver.
func newAnswerEnv(t *testing.T, db *sqlx.DB) (*handlerEnv, *approver) {
	t.Helper()
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	require.NoError(t, schema.Apply(context.Background(), db, d))
	a := &approver{gate: newGate()}
	r, err := request.New(request.Config{DB: db, Dialect: d, TTL: 20 * time.Second, HeartbeatInterval: 500 * time.Millisecond, ReleaseTimeout: 5 * time.Second,
		Agent: a.agent, Session: session.Config{AutoCreate: true},
		Queue: request.QueueConfig{PollMin: 5 * time.Millisecond, PollMax: 50 * time.Millisecond}})
	require.NoError(t, err)
	problems := httpapi.Problems{Base: testBase, MaxRetryAfter: 3 * time.Second}
	location := func(m request.Message) string { return "/s/" + m.SessionKey + "/messages/" + m.ClientRequestID }
	mh, err := httpapi.MessageHandler(httpapi.MessageConfig{Runner: r, Message: httpapi.JSONMessage("session", 0),
		Location: location, MaxWait: 30 * time.Second, Problems: problems})
	require.NoError(t, err)
	sh, err := httpapi.StatusHandler(httpapi.StatusConfig{Runner: r, Keys: httpapi.PathKeys("session", "id"),
		MaxWait: 30 * time.Second, Problems: problems})
	require.NoError(t, err)
	ah, err := httpapi.AnswerHandler(httpapi.AnswerConfig{Runner: r, Keys: httpapi.PathAnswerKeys("session", "id", "name"),
		Location: location, Problems: problems})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /s/{session}/messages", mh)
	mux.Handle("GET /s/{session}/messages/{id}", sh)
	mux.Handle("/s/{session}/messages/{id}/answers/{name}", ah) // every method: the handler refuses all but POST
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, r.Close(ctx))
	})
	return &handlerEnv{url: srv.URL, runner: r, gate: a.gate}, a
}

func (e *handlerEnv) answer(t *testing.T, sess, id, name, body string) resp {
	t.Helper()
	return e.do(t, http.MethodPost, "/s/"+sess+"/messages/"+id+"/answers/"+name, body)
}

// waitingOf checks that r is a 202 waiting for the approval (or the
// confirmation) of message id, and returns its waiting member.
func waitingOf(t *testing.T, r resp, sess, id string) map[string]any {
	t.Helper()
	require.Equal(t, http.StatusAccepted, r.code, r.raw)
	assert.Equal(t, "/s/"+sess+"/messages/"+id, r.header.Get("Location"))
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
	assert.Equal(t, "waiting", r.body["status"])
	q, ok := r.body["waiting"].(map[string]any)
	require.True(t, ok, "a waiting member: %s", r.raw)
	return q
}

// TestAnswerHandler: a message whose agent asks a person for an approval
// is a 202 with the question, its status shows it, and the answer sent to
// the AnswerHandler runs it on (200 with the reply); the same answer again
// gets the same outcome without paying twice, another answer is 409
// already-answered, an answer under another name 409 not-waiting, an
// unknown message 404, a body that is not JSON 400 with nothing recorded,
// a late answer 409 wait-expired, and an answer while the session
// answers another message 409 session-busy with Retry-After — on each
// database.
func TestAnswerHandler(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e, a := newAnswerEnv(t, db)

		// The message stops to wait: 202, Location, the question.
		before := time.Now()
		r := e.post(t, "s", "m-1", "pay the taxi")
		q := waitingOf(t, r, "s", "m-1")
		assert.Equal(t, "approve", q["name"])
		assert.Equal(t, map[string]any{"amount": float64(35), "to": "taxi"}, q["question"])
		deadline, err := time.Parse(time.RFC3339Nano, q["deadline"].(string))
		require.NoError(t, err, "%s", r.raw)
		assert.True(t, strings.HasSuffix(q["deadline"].(string), "Z"), "UTC: %s", q["deadline"])
		assert.WithinDuration(t, before.Add(time.Hour), deadline, time.Minute)
		assert.Zero(t, a.paid.Load())

		// A resend, even with Prefer: wait, answers the question at once.
		start := time.Now()
		r = e.post(t, "s", "m-1", "pay the taxi", "", "Prefer", "wait=20")
		q = waitingOf(t, r, "s", "m-1")
		assert.Equal(t, "approve", q["name"])
		assert.Less(t, time.Since(start), 10*time.Second, "a waiting message is not waited for")

		// Its status shows the question; Prefer: wait does not wait on it.
		start = time.Now()
		r = e.do(t, http.MethodGet, "/s/s/messages/m-1", "", "Prefer", "wait=20")
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Less(t, time.Since(start), 10*time.Second, "a waiting message is not waited for")
		assert.Equal(t, "waiting", r.body["state"])
		assert.Equal(t, false, r.body["live"])
		sq, ok := r.body["waiting"].(map[string]any)
		require.True(t, ok, r.raw)
		assert.Equal(t, "approve", sq["name"])
		assert.Equal(t, map[string]any{"amount": float64(35), "to": "taxi"}, sq["question"])
		assert.NotEmpty(t, sq["deadline"])
		assert.NotContains(t, r.body, "reply")

		// A body that is not JSON: 400, nothing recorded.
		for _, body := range []string{`{"ok": tru`, ``, `{"ok":true} {"ok":false}`} {
			r = e.answer(t, "s", "m-1", "approve", body)
			require.Equal(t, http.StatusBadRequest, r.code, "%q: %s", body, r.raw)
			assert.Equal(t, testBase+httpapi.TypeInvalidRequest, problemType(r))
		}
		r = e.answer(t, "s", "m-1", "approve", `"`+strings.Repeat("x", httpapi.DefaultMaxAnswerBytes)+`"`)
		require.Equal(t, http.StatusBadRequest, r.code, "too large")
		assert.Contains(t, r.body["detail"], "larger than")
		st, err := e.runner.Status(context.Background(), "s", "m-1")
		require.NoError(t, err)
		assert.Equal(t, request.StateWaiting, st.State, "no answer recorded")

		// Under a name it does not wait for: 409 not-waiting, no Retry-After.
		r = e.answer(t, "s", "m-1", "confirm", `true`)
		require.Equal(t, http.StatusConflict, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeNotWaiting, problemType(r))
		assert.Empty(t, r.header.Get("Retry-After"))
		assert.Equal(t, st.RequestID, r.body["request_id"])

		// Other methods: 405.
		r = e.do(t, http.MethodGet, "/s/s/messages/m-1/answers/approve", "")
		require.Equal(t, http.StatusMethodNotAllowed, r.code, r.raw)
		assert.Equal(t, http.MethodPost, r.header.Get("Allow"))

		// The answer: the run goes on, 200 with the reply.
		r = e.answer(t, "s", "m-1", "approve", `{"ok":true,"by":"ann"}`)
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "paid, approved by ann", r.body["reply"])
		assert.Equal(t, map[string]any{"amount": float64(35)}, r.body["result"])
		assert.Equal(t, st.RequestID, r.body["request_id"])
		assert.NotContains(t, r.body, "waiting")
		assert.Equal(t, int32(1), a.paid.Load())

		// The same answer again, formatted otherwise: the same outcome,
		// nothing run twice.
		r = e.answer(t, "s", "m-1", "approve", " { \"by\": \"ann\", \"ok\": true }\n")
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "paid, approved by ann", r.body["reply"])
		assert.Equal(t, true, r.body["replayed"])
		assert.Equal(t, int32(1), a.paid.Load(), "paid once")

		// Another answer: 409 already-answered; the first stands.
		r = e.answer(t, "s", "m-1", "approve", `{"ok":false,"by":"bob"}`)
		require.Equal(t, http.StatusConflict, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeAlreadyAnswered, problemType(r))
		assert.Empty(t, r.header.Get("Retry-After"))
		assert.Equal(t, st.RequestID, r.body["request_id"])
		// Under a name it never waited for: 409 not-waiting.
		r = e.answer(t, "s", "m-1", "confirm", `true`)
		require.Equal(t, http.StatusConflict, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeNotWaiting, problemType(r))
		assert.Equal(t, int32(1), a.paid.Load())

		// Its status: succeeded, no question.
		r = e.do(t, http.MethodGet, "/s/s/messages/m-1", "")
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "succeeded", r.body["state"])
		assert.NotContains(t, r.body, "waiting")

		// An unknown message: 404.
		r = e.answer(t, "s", "no-such", "approve", `true`)
		require.Equal(t, http.StatusNotFound, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeNotFound, problemType(r))

		// A run that stops at a later wait: 202 with that question.
		waitingOf(t, e.post(t, "s", "m-2", "twice"), "s", "m-2")
		r = e.answer(t, "s", "m-2", "approve", `{"ok":true,"by":"cy"}`)
		q = waitingOf(t, r, "s", "m-2")
		assert.Equal(t, "confirm", q["name"])
		assert.Equal(t, "really?", q["question"])
		assert.NotContains(t, q, "deadline", "the confirmation has none")
		r = e.answer(t, "s", "m-2", "confirm", `true`)
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "paid, approved by cy", r.body["reply"])
		assert.Equal(t, int32(2), a.paid.Load())

		// The session answers another message: the answer is recorded,
		// 409 session-busy with Retry-After; the same answer once the
		// session is free runs it.
		waitingOf(t, e.post(t, "s", "m-3", "pay again"), "s", "m-3")
		blocked := e.postAsync(t, "s", "b-1")
		r = e.answer(t, "s", "m-3", "approve", `{"ok":true,"by":"dee"}`)
		require.Equal(t, http.StatusConflict, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeSessionBusy, problemType(r))
		assert.NotEmpty(t, r.header.Get("Retry-After"))
		e.gate.release()
		require.Equal(t, http.StatusOK, (<-blocked).code)
		r = e.answer(t, "s", "m-3", "approve", `{"ok":true,"by":"dee"}`)
		require.Equal(t, http.StatusOK, r.code, r.raw)
		assert.Equal(t, "paid, approved by dee", r.body["reply"])
		assert.Equal(t, int32(3), a.paid.Load())

		// After the deadline: 409 wait-expired, nothing recorded (no
		// Started Runner runs it on here).
		waitingOf(t, e.post(t, "s", "m-4", "soon"), "s", "m-4")
		time.Sleep(time.Second) // the deadline is time passing: nothing signals it
		r = e.answer(t, "s", "m-4", "approve", `{"ok":true,"by":"eve"}`)
		require.Equal(t, http.StatusConflict, r.code, r.raw)
		assert.Equal(t, testBase+httpapi.TypeWaitExpired, problemType(r))
		assert.Empty(t, r.header.Get("Retry-After"))
		assert.Equal(t, int32(3), a.paid.Load())
	})
}

// The config checks of AnswerHandler, and PathAnswerKeys without its
// wildcards.
func TestAnswerHandlerConfig(t *testing.T) {
	_, err := httpapi.AnswerHandler(httpapi.AnswerConfig{Keys: httpapi.PathAnswerKeys("s", "id", "name")})
	assert.Error(t, err, "no Runner")
	db := testdb.Open(t, lease.SQLite)
	r := newRunner(t, db, true)
	_, err = httpapi.AnswerHandler(httpapi.AnswerConfig{Runner: r})
	assert.Error(t, err, "no Keys")

	_, _, _, err = httpapi.PathAnswerKeys("s", "id", "name")(nil, httptest.NewRequest(http.MethodPost, "/", nil))
	assert.ErrorIs(t, err, lease.ErrNotFound)
	assert.Equal(t, http.StatusNotFound, httpapi.StatusCode(err))
}

// A queued message waited for with Prefer: wait that stops to wait for
// an answer is answered as soon as it does: 202 waiting, with
// Preference-Applied — on each database.
func TestMessageHandlerQueuedThenWaiting(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e, _ := newAnswerEnv(t, db)
		blocked := e.postAsync(t, "s", "b-1")
		queued := make(chan resp, 1)
		go func() { queued <- e.post(t, "s", "m-1", "pay", "queue", "Prefer", "wait=20") }()
		// The queued message is stored before the gate opens.
		require.Eventually(t, func() bool {
			st, err := e.runner.Status(context.Background(), "s", "m-1")
			return err == nil && st.State == request.StateQueued
		}, 10*time.Second, 5*time.Millisecond)
		e.gate.release()
		require.Equal(t, http.StatusOK, (<-blocked).code)
		r := <-queued
		q := waitingOf(t, r, "s", "m-1")
		assert.Equal(t, "approve", q["name"])
		assert.Equal(t, "wait=20", r.header.Get("Preference-Applied"))
	})
}

// The JSON of a waiting message, in a 202 and in its status: the
// deadline in UTC, the question as the agent asked it (null for none),
// no deadline member without one.
func TestWaitingBodies(t *testing.T) {
	deadline := time.Date(2030, 1, 2, 4, 4, 5, 0, time.FixedZone("CET", 3600))
	q := &request.Question{Name: "approve", Question: json.RawMessage(`{"amount":35}`), Deadline: &deadline}
	w := httptest.NewRecorder()
	httpapi.WriteJSON(w, http.StatusAccepted, httpapi.NewWaitingBody(q))
	assert.Equal(t, `{"status":"waiting","waiting":{"name":"approve","question":{"amount":35},"deadline":"2030-01-02T03:04:05Z"}}`,
		strings.TrimSpace(w.Body.String()))
	assert.Equal(t, "CET", q.Deadline.Location().String(), "the Outcome's question is not changed")

	w = httptest.NewRecorder()
	httpapi.WriteJSON(w, http.StatusAccepted, httpapi.NewWaitingBody(&request.Question{Name: "confirm"}))
	assert.Equal(t, `{"status":"waiting","waiting":{"name":"confirm","question":null}}`, strings.TrimSpace(w.Body.String()))

	st := request.Status{RequestID: "r-1", SessionKey: "s", ClientRequestID: "m-1", State: request.StateWaiting, Attempt: 1, Waiting: q}
	w = httptest.NewRecorder()
	httpapi.WriteJSON(w, http.StatusOK, httpapi.NewStatusBody(st))
	assert.Equal(t, `{"request_id":"r-1","session_key":"s","client_request_id":"m-1","state":"waiting","live":false,`+
		`"waiting":{"name":"approve","question":{"amount":35},"deadline":"2030-01-02T03:04:05Z"},"attempt":1}`,
		strings.TrimSpace(w.Body.String()))

	st.State = request.StateProcessing // a question only while it waits
	w = httptest.NewRecorder()
	httpapi.WriteJSON(w, http.StatusOK, httpapi.NewStatusBody(st))
	assert.Equal(t, `{"request_id":"r-1","session_key":"s","client_request_id":"m-1","state":"processing","live":false,"attempt":1}`,
		strings.TrimSpace(w.Body.String()))
}

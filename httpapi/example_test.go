package httpapi_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// Example answers three messages of one session on SQLite: a second
// message while the first one runs (409 with Retry-After), the first
// message's id reused for other content (422), and an empty id (400).
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "httpapi-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "chat.db")+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := schema.Apply(ctx, db, lease.SQLite); err != nil {
		log.Fatal(err)
	}
	runner, err := request.New(request.Config{DB: db, TTL: 10 * time.Second, Session: session.Config{AutoCreate: true}})
	if err != nil {
		log.Fatal(err)
	}

	// answer is a web handler's error branch.
	answer := func(err error) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		p := httpapi.ProblemFor(err)
		p.RetryAfter = min(p.RetryAfter, 5*time.Second) // a live holder usually finishes sooner
		httpapi.Write(w, httptest.NewRequest(http.MethodPost, "/sessions/s-1/messages", nil), p)
		return w
	}

	first := request.Message{SessionKey: "s-1", ClientRequestID: "m-1", Content: "lunch 35"}
	_, err = runner.Handle(ctx, first, func(ctx context.Context, run *request.Run) (request.Answer, error) {
		// While m-1 runs, the same session gets m-2.
		_, err := runner.Handle(ctx, request.Message{SessionKey: "s-1", ClientRequestID: "m-2", Content: "taxi 18"},
			func(context.Context, *request.Run) (request.Answer, error) { return request.Answer{}, nil })
		w := answer(err)
		fmt.Println(w.Code, w.Header().Get("Content-Type"), "Retry-After:", w.Header().Get("Retry-After"))
		fmt.Print(w.Body.String())
		return request.Answer{Reply: "noted"}, nil
	})
	if err != nil {
		log.Fatal(err)
	}

	_, err = runner.Handle(ctx, request.Message{SessionKey: "s-1", ClientRequestID: "m-1", Content: "lunch 53"},
		func(context.Context, *request.Run) (request.Answer, error) { return request.Answer{}, nil })
	fmt.Println(answer(err).Code, httpapi.ProblemFor(err).Type)

	_, err = runner.Handle(ctx, request.Message{SessionKey: "s-1", Content: "no id"},
		func(context.Context, *request.Run) (request.Answer, error) { return request.Answer{}, nil })
	fmt.Println(answer(err).Code, httpapi.ProblemFor(err).Detail)
	// Output:
	// 409 application/problem+json Retry-After: 5
	// {"type":"https://rowlease.dev/problems/session-busy","title":"Session busy","status":409,"detail":"the session is answering another message; retry with the same client request id after Retry-After seconds","instance":"/sessions/s-1/messages"}
	// 422 https://rowlease.dev/problems/client-request-id-reused
	// 400 request: invalid client request id: empty
}

// ExampleIsUnavailable: a SQLite file that cannot be opened is a database
// that cannot be reached — 503 with Retry-After — while a deadline of the
// caller's own is not.
func ExampleIsUnavailable() {
	db, err := sql.Open("sqlite", filepath.Join(os.TempDir(), "no-such-directory-httpapi", "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	err = db.PingContext(context.Background())
	fmt.Println(httpapi.IsUnavailable(err), httpapi.StatusCode(err), httpapi.ProblemFor(err).RetryAfter)

	fmt.Println(httpapi.IsUnavailable(fmt.Errorf("query: %w", context.DeadlineExceeded)))
	// Output:
	// true 503 1s
	// false
}

// ExamplePing: a health check.
func ExamplePing() {
	db, err := sql.Open("sqlite", filepath.Join(os.TempDir(), "no-such-directory-httpapi", "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	err = httpapi.Ping(context.Background(), db, 2*time.Second)
	fmt.Println(errors.Is(err, httpapi.ErrUnavailable))
	// Output:
	// true
}

// ExamplePreferWait reads "Prefer: wait=N", capped at the server's limit,
// and echoes what was applied.
func ExamplePreferWait() {
	h := http.Header{}
	h.Add("Prefer", `respond-async, wait=30`)
	wait, ok := httpapi.PreferWait(h, 10*time.Second)
	fmt.Println(wait, ok)

	out := http.Header{}
	httpapi.SetPreferenceApplied(out, wait)
	fmt.Println("Preference-Applied:", out.Get("Preference-Applied"))

	h.Set("Prefer", "wait=soon")
	fmt.Println(httpapi.PreferWait(h, 10*time.Second))
	// Output:
	// 10s true
	// Preference-Applied: wait=10
	// 0s false
}

// ExampleAnswerHandler mounts the message, status and answer handlers on
// SQLite, for an agent that asks a person to approve a payment: the
// message is a 202 with the question, the answer runs it on (200 with
// the reply), and another answer afterwards is a 409.
func ExampleAnswerHandler() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "httpapi-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "chat.db")+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := schema.Apply(ctx, db, lease.SQLite); err != nil {
		log.Fatal(err)
	}
	agent := func(ctx context.Context, run *request.Run) (request.Answer, error) {
		ok, err := request.Await[bool](ctx, run, "approve", map[string]any{"pay": 35})
		if err != nil {
			return request.Answer{}, err // request.ErrWaiting: the run stops as waiting
		}
		if !ok {
			return request.Answer{Reply: "not paid"}, nil
		}
		return request.Answer{Reply: "paid 35"}, nil
	}
	runner, err := request.New(request.Config{DB: db, TTL: 10 * time.Second, Agent: agent, Session: session.Config{AutoCreate: true}})
	if err != nil {
		log.Fatal(err)
	}
	defer runner.Close(ctx)

	location := func(m request.Message) string { return "/sessions/" + m.SessionKey + "/messages/" + m.ClientRequestID }
	messages, err := httpapi.MessageHandler(httpapi.MessageConfig{Runner: runner, Message: httpapi.JSONMessage("session", 0), Location: location})
	if err != nil {
		log.Fatal(err)
	}
	status, err := httpapi.StatusHandler(httpapi.StatusConfig{Runner: runner, Keys: httpapi.PathKeys("session", "id")})
	if err != nil {
		log.Fatal(err)
	}
	answers, err := httpapi.AnswerHandler(httpapi.AnswerConfig{Runner: runner, Keys: httpapi.PathAnswerKeys("session", "id", "name"), Location: location})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /sessions/{session}/messages", messages)
	mux.Handle("GET /sessions/{session}/messages/{id}", status)
	mux.Handle("POST /sessions/{session}/messages/{id}/answers/{name}", answers)
	send := func(method, path, body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
		return w
	}

	w := send("POST", "/sessions/s-1/messages", `{"client_request_id":"m-1","content":"pay the taxi"}`)
	fmt.Println(w.Code, w.Header().Get("Location"))
	fmt.Print(w.Body.String())

	var st httpapi.StatusBody
	w = send("GET", "/sessions/s-1/messages/m-1", "")
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		log.Fatal(err)
	}
	fmt.Println(w.Code, st.State, st.Waiting.Name, string(st.Waiting.Question))

	var out request.Outcome
	w = send("POST", "/sessions/s-1/messages/m-1/answers/approve", `true`)
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		log.Fatal(err)
	}
	fmt.Println(w.Code, out.Reply)

	var p httpapi.Problem
	w = send("POST", "/sessions/s-1/messages/m-1/answers/approve", `false`)
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		log.Fatal(err)
	}
	fmt.Println(w.Code, p.Type)
	// Output:
	// 202 /sessions/s-1/messages/m-1
	// {"status":"waiting","waiting":{"name":"approve","question":{"pay":35}}}
	// 200 waiting approve {"pay":35}
	// 200 paid 35
	// 409 https://rowlease.dev/problems/already-answered
}

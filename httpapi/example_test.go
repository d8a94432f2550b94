package httpapi_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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

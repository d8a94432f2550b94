package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// fuzzTables are the tables a request may write; a 4xx must leave their
// row counts as they were.
var fuzzTables = []string{"chat_session", "chat_message", "ledger_transaction", "rowlease_session", "rowlease_request", "rowlease_tool_execution"}

// FuzzHandler sends any method, path, body and headers to the bookkeeper's
// HTTP handler on a healthy SQLite database and checks the answer: never
// a 5xx (the database is up); every 4xx is application/problem+json with
// its status in the body and writes nothing; a success is JSON (the
// mux's redirects of unclean paths, 3xx, are answers too).
func FuzzHandler(f *testing.F) {
	f.Add(uint8(0), uint8(0), "", []byte(`{"content":"lunch 35","client_request_id":"c1"}`), "application/json")
	f.Add(uint8(0), uint8(0), "", []byte(`{"content":"lunch 35","client_request_id":"c1"}`), "text/plain")
	f.Add(uint8(0), uint8(0), "", []byte(`{"content":"taxi 3.5e1","client_request_id":"c1"}`), "application/json")
	f.Add(uint8(0), uint8(0), "", []byte(`{"content":"","client_request_id":"c2"}`), "application/json")
	f.Add(uint8(0), uint8(0), "", []byte(`{"content":"x","client_request_id":""}`), "")
	f.Add(uint8(0), uint8(0), "", []byte(`{"content":"x","client_request_id":"c3","extra":1}`), "")
	f.Add(uint8(0), uint8(0), "", []byte(`{"content":"x","client_request_id":"c3"} {}`), "")
	f.Add(uint8(0), uint8(0), "", []byte(`[1,2]`), "")
	f.Add(uint8(0), uint8(0), "", []byte(`{"content":5}`), "")
	f.Add(uint8(0), uint8(0), "", []byte("{\"content\":\"\xff\",\"client_request_id\":\"c4\"}"), "")
	f.Add(uint8(0), uint8(1), "no-such-session", []byte(`{"content":"x","client_request_id":"c5"}`), "")
	f.Add(uint8(0), uint8(1), "%00", []byte(`{}`), "")
	f.Add(uint8(1), uint8(0), "", []byte(nil), "")
	f.Add(uint8(2), uint8(0), "", []byte(`{}`), "")
	f.Add(uint8(0), uint8(2), "", []byte(`{}`), "")
	f.Add(uint8(1), uint8(3), "", []byte(nil), "")
	f.Add(uint8(1), uint8(4), "api/sessions/x/transactions", []byte(nil), "")
	f.Add(uint8(5), uint8(4), "../../etc/passwd", []byte(nil), "")
	f.Add(uint8(0), uint8(0), "", bytes.Repeat([]byte("a"), api.MaxBodyBytes+1), "application/json")

	db := testdb.Open(f, lease.SQLite)
	st := store.New(db.DB, lease.SQLite)
	svc, err := service.New(context.Background(), st, service.Config{LLMLatency: -1, LeaseTTL: 10 * time.Second, Logger: quietLogger()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(svc.API.Close)
	rec := httptest.NewRecorder()
	svc.API.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/sessions", nil))
	var sess struct {
		ID string `json:"id"`
	}
	if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &sess) != nil {
		f.Fatalf("create session: %d %s", rec.Code, rec.Body)
	}
	counts := func(t *testing.T) map[string]int {
		out := map[string]int{}
		for _, tb := range fuzzTables {
			var n int
			if err := db.QueryRow("SELECT COUNT(*) FROM " + tb).Scan(&n); err != nil {
				t.Fatal(err)
			}
			out[tb] = n
		}
		return out
	}
	methods := []string{http.MethodPost, http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead}

	f.Fuzz(func(t *testing.T, method, route uint8, part string, body []byte, ctype string) {
		var path string
		switch route % 5 {
		case 0:
			path = "/api/sessions/" + sess.ID + "/messages"
		case 1:
			path = "/api/sessions/" + url.PathEscape(part) + "/messages"
		case 2:
			path = "/api/sessions"
		case 3:
			path = "/api/sessions/" + sess.ID
		default:
			path = "/" + part
		}
		u, err := url.Parse(path)
		if err != nil || strings.ContainsAny(path, " \t\r\n#?") {
			return // not a request a client could send
		}
		req := &http.Request{Method: methods[int(method)%len(methods)], URL: u, RequestURI: u.RequestURI(), Host: "example.test",
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, Body: http.NoBody}
		if body != nil {
			req.Body = httpBody(body)
			req.ContentLength = int64(len(body))
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		before := counts(t)
		rec := httptest.NewRecorder()
		svc.API.ServeHTTP(rec, req.WithContext(context.Background()))
		res := rec.Result()
		raw := rec.Body.Bytes()
		if res.StatusCode >= 500 {
			t.Fatalf("%s %s: %d with a healthy database: %s", req.Method, path, res.StatusCode, raw)
		}
		if res.StatusCode >= 400 {
			if ct := res.Header.Get("Content-Type"); ct != api.ProblemContentType {
				t.Fatalf("%s %s: %d with Content-Type %q, want %s", req.Method, path, res.StatusCode, ct, api.ProblemContentType)
			}
			var p api.Problem
			if req.Method != http.MethodHead {
				if err := json.Unmarshal(raw, &p); err != nil || p.Status != res.StatusCode || p.Title == "" {
					t.Fatalf("%s %s: %d with a body that is not its problem: %s", req.Method, path, res.StatusCode, raw)
				}
			}
			if after := counts(t); !equalCounts(before, after) {
				t.Fatalf("%s %s: %d, yet rows changed: %v → %v", req.Method, path, res.StatusCode, before, after)
			}
			return
		}
		if res.StatusCode < 300 && req.Method != http.MethodHead && !json.Valid(raw) {
			t.Fatalf("%s %s: %d with a body that is not JSON: %q", req.Method, path, res.StatusCode, raw)
		}
	})
}

func equalCounts(a, b map[string]int) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

func httpBody(b []byte) readCloser { return readCloser{bytes.NewReader(b)} }

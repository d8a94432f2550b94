package llm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const testKey = "sk-test-SECRET-123"

// newTestClient returns a client for srv with fast retries.
func newTestClient(t *testing.T, srv *httptest.Server, mod func(*OpenAIConfig)) *OpenAIClient {
	t.Helper()
	cfg := OpenAIConfig{
		BaseURL:     srv.URL + "/v1/",
		Model:       "gpt-test",
		APIKey:      testKey,
		Timeout:     5 * time.Second,
		BackoffBase: time.Millisecond,
		MaxBackoff:  50 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewOpenAIClient(cfg)
	if err != nil {
		t.Fatalf("NewOpenAIClient: %v", err)
	}
	return c
}

func userRequest(text string) Request {
	return Request{Messages: []Message{{Role: RoleSystem, Content: "You keep books."}, user(text)}, Tools: BookkeeperTools()}
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

const okBody = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}`

// fakeOpenAI speaks enough of the chat-completions protocol to drive one
// tool round trip, and checks every request it gets.
func fakeOpenAI(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
			writeJSON(w, 404, `{"error":{"message":"not found"}}`)
			return
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+testKey {
			t.Errorf("Authorization = %q", got)
			writeJSON(w, 401, `{"error":{"message":"bad key","type":"invalid_request_error"}}`)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
		var body struct {
			Model      string    `json:"model"`
			Messages   []Message `json:"messages"`
			Tools      []Tool    `json:"tools"`
			ToolChoice string    `json:"tool_choice"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("request body: %v", err)
			writeJSON(w, 400, `{"error":{"message":"bad json"}}`)
			return
		}
		equal(t, body.Model, "gpt-test", "model")
		equal(t, len(body.Tools), 3, "tool count")
		if len(body.Tools) == 3 {
			equal(t, body.Tools[0].Function.Name, ToolCreateTransaction, "first tool")
			if !json.Valid(body.Tools[0].Function.Parameters) {
				t.Errorf("tool parameters not JSON")
			}
		}
		equal(t, body.ToolChoice, "auto", "tool_choice")
		last := body.Messages[len(body.Messages)-1]
		switch last.Role {
		case RoleUser:
			writeJSON(w, 200, `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[
				{"id":"call_abc","type":"function","function":{"name":"create_transaction","arguments":"{\"type\":\"expense\",\"amount\":35,\"category_name\":\"餐饮\"}"}}]},
				"finish_reason":"tool_calls"}]}`)
		case RoleTool:
			equal(t, last.ToolCallID, "call_abc", "tool_call_id")
			prev := body.Messages[len(body.Messages)-2]
			if len(prev.ToolCalls) != 1 || prev.ToolCalls[0].ID != "call_abc" {
				t.Errorf("assistant tool call not echoed: %+v", prev)
			}
			writeJSON(w, 200, `{"choices":[{"index":0,"message":{"role":"assistant","content":"已记账：支出 35.00 元（餐饮）"},"finish_reason":"stop"}]}`)
		default:
			t.Errorf("unexpected last message %+v", last)
			writeJSON(w, 400, `{"error":{"message":"bad conversation"}}`)
		}
	}))
}

func TestOpenAIClientToolRoundTrip(t *testing.T) {
	srv := fakeOpenAI(t)
	defer srv.Close()
	c := newTestClient(t, srv, nil)
	req := userRequest("中午吃粉花了 35")
	resp, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	call := onlyCall(t, resp.Message)
	equal(t, call.ID, "call_abc", "call id")
	equal(t, call.Type, "function", "call type")
	equal(t, call.Function.Name, ToolCreateTransaction, "tool")
	var args CreateTransactionArgs
	if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
		t.Fatal(err)
	}
	equal(t, args, CreateTransactionArgs{Type: TypeExpense, Amount: 35, CategoryName: "餐饮"}, "args")

	req.Messages = append(req.Messages, resp.Message, toolResult(call, `{"transaction_id":12,"type":"expense","amount":"35.00","category":"餐饮"}`))
	resp, err = c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, resp.Message.Role, RoleAssistant, "role")
	equal(t, resp.Message.Content, "已记账：支出 35.00 元（餐饮）", "content")
	equal(t, len(resp.Message.ToolCalls), 0, "tool calls")
}

func TestOpenAIClientNoToolsOmitsToolChoice(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		if _, ok := body["tools"]; ok {
			t.Errorf("tools sent: %v", body)
		}
		if _, ok := body["tool_choice"]; ok {
			t.Errorf("tool_choice sent without tools: %v", body)
		}
		writeJSON(w, 200, okBody)
	}))
	defer srv.Close()
	resp, err := newTestClient(t, srv, nil).Complete(context.Background(), Request{Messages: []Message{user("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, resp.Message.Content, "Done.", "content")
}

func TestOpenAIClientRetries500(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			writeJSON(w, 500, `{"error":{"message":"boom","type":"server_error"}}`)
			return
		}
		writeJSON(w, 200, okBody)
	}))
	defer srv.Close()
	resp, err := newTestClient(t, srv, nil).Complete(context.Background(), userRequest("lunch 35"))
	if err != nil {
		t.Fatal(err)
	}
	equal(t, resp.Message.Content, "Done.", "content")
	equal(t, n.Load(), int32(2), "attempts")
}

func TestOpenAIClientRetryAfter(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			writeJSON(w, 429, `{"error":{"message":"slow down","type":"rate_limit_error"}}`)
			return
		}
		writeJSON(w, 200, okBody)
	}))
	defer srv.Close()
	// A long back-off base shows that Retry-After: 0 replaces it.
	c := newTestClient(t, srv, func(cfg *OpenAIConfig) { cfg.BackoffBase, cfg.MaxBackoff = time.Minute, time.Minute })
	start := time.Now()
	if _, err := c.Complete(context.Background(), userRequest("lunch 35")); err != nil {
		t.Fatal(err)
	}
	equal(t, n.Load(), int32(2), "attempts")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v; Retry-After: 0 was not honoured", d)
	}
}

func TestOpenAIClientRetryAfterIsBounded(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "3600")
			writeJSON(w, 503, `{"error":{"message":"overloaded"}}`)
			return
		}
		writeJSON(w, 200, okBody)
	}))
	defer srv.Close()
	c := newTestClient(t, srv, func(cfg *OpenAIConfig) { cfg.MaxBackoff = 20 * time.Millisecond })
	start := time.Now()
	if _, err := c.Complete(context.Background(), userRequest("lunch 35")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v; Retry-After was not capped by MaxBackoff", d)
	}
}

func TestOpenAIClientGivesUp(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		writeJSON(w, 502, `<html>bad gateway</html>`)
	}))
	defer srv.Close()
	_, err := newTestClient(t, srv, nil).Complete(context.Background(), userRequest("lunch 35"))
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want *APIError", err)
	}
	equal(t, apiErr.StatusCode, 502, "status")
	equal(t, apiErr.Message, "<html>bad gateway</html>", "message")
	equal(t, n.Load(), int32(1+DefaultOpenAIMaxRetries), "attempts")

	// Negative MaxRetries disables retrying.
	n.Store(0)
	_, err = newTestClient(t, srv, func(cfg *OpenAIConfig) { cfg.MaxRetries = -1 }).Complete(context.Background(), userRequest("lunch 35"))
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want *APIError", err)
	}
	equal(t, n.Load(), int32(1), "attempts without retries")
}

func TestOpenAIClientDoesNotRetry4xx(t *testing.T) {
	for _, status := range []int{400, 401, 403, 404, 422} {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			// Some servers echo the key in error messages; it must not leak.
			writeJSON(w, status, `{"error":{"message":"Incorrect API key provided: `+testKey+`","type":"invalid_request_error","code":"invalid_api_key"}}`)
		}))
		_, err := newTestClient(t, srv, nil).Complete(context.Background(), userRequest("lunch 35"))
		srv.Close()
		var apiErr *APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("status %d: err = %v, want *APIError", status, err)
		}
		equal(t, n.Load(), int32(1), "attempts")
		equal(t, apiErr.StatusCode, status, "status")
		equal(t, apiErr.Type, "invalid_request_error", "type")
		equal(t, apiErr.Code, "invalid_api_key", "code")
		equal(t, apiErr.Retryable(), false, "retryable")
		if strings.Contains(err.Error(), testKey) || strings.Contains(apiErr.Message, testKey) {
			t.Errorf("error leaks the API key: %v", err)
		}
		if !strings.Contains(err.Error(), "[REDACTED]") {
			t.Errorf("error %q lost the message", err)
		}
	}
}

func TestOpenAIClientContextCancel(t *testing.T) {
	release := make(chan struct{})
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := newTestClient(t, srv, nil).Complete(ctx, userRequest("lunch 35"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("took %v after cancel", d)
	}
	equal(t, n.Load(), int32(1), "attempts")

	// Cancelled while waiting to retry.
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 503, `{"error":{"message":"busy"}}`)
	}))
	defer srv2.Close()
	c := newTestClient(t, srv2, func(cfg *OpenAIConfig) { cfg.BackoffBase, cfg.MaxBackoff = time.Hour, time.Hour })
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Complete(ctx, userRequest("lunch 35")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
}

func TestOpenAIClientAttemptTimeoutIsRetried(t *testing.T) {
	var n atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if n.Add(1) == 1 {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		writeJSON(w, 200, okBody)
	}))
	defer srv.Close()
	defer close(release)
	c := newTestClient(t, srv, func(cfg *OpenAIConfig) { cfg.Timeout = 100 * time.Millisecond })
	resp, err := c.Complete(context.Background(), userRequest("lunch 35"))
	if err != nil {
		t.Fatal(err)
	}
	equal(t, resp.Message.Content, "Done.", "content")
	equal(t, n.Load(), int32(2), "attempts")
}

func TestOpenAIClientNetworkErrorIsRetried(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			_ = conn.Close() // drop the connection without a response
			return
		}
		writeJSON(w, 200, okBody)
	}))
	defer srv.Close()
	if _, err := newTestClient(t, srv, nil).Complete(context.Background(), userRequest("lunch 35")); err != nil {
		t.Fatal(err)
	}
	equal(t, n.Load(), int32(2), "attempts")
}

func TestOpenAIClientMalformedResponse(t *testing.T) {
	for _, body := range []string{`{"choices": [`, `not json at all`, `{"choices":[]}`, `{"choices":[{"message":{"content":42}}]}`} {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			writeJSON(w, 200, body)
		}))
		_, err := newTestClient(t, srv, nil).Complete(context.Background(), userRequest("lunch 35"))
		srv.Close()
		if !errors.Is(err, ErrBadResponse) {
			t.Errorf("body %q: err = %v, want ErrBadResponse", body, err)
		}
		equal(t, n.Load(), int32(1), "attempts for "+body)
	}
}

func TestOpenAIClientLenientDecoding(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Content as text parts, arguments as an object, no role/type.
		writeJSON(w, 200, `{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],
			"tool_calls":[{"id":"c1","function":{"name":"list_categories","arguments":{}}}]}}]}`)
	}))
	defer srv.Close()
	resp, err := newTestClient(t, srv, nil).Complete(context.Background(), userRequest("show categories"))
	if err != nil {
		t.Fatal(err)
	}
	equal(t, resp.Message.Role, RoleAssistant, "role")
	equal(t, resp.Message.Content, "ab", "content")
	equal(t, len(resp.Message.ToolCalls), 1, "tool calls")
	equal(t, resp.Message.ToolCalls[0].Type, "function", "type")
	equal(t, resp.Message.ToolCalls[0].Function.Arguments, "{}", "arguments")
}

func TestNewOpenAIClientConfig(t *testing.T) {
	if _, err := NewOpenAIClient(OpenAIConfig{}); err == nil {
		t.Error("missing model accepted")
	}
	for _, base := range []string{"ftp://example.com", "://bad", "example.com/v1"} {
		if _, err := NewOpenAIClient(OpenAIConfig{Model: "m", BaseURL: base}); err == nil {
			t.Errorf("BaseURL %q accepted", base)
		}
	}
	if _, err := NewOpenAIClient(OpenAIConfig{Model: "m", Timeout: -time.Second}); err == nil {
		t.Error("negative timeout accepted")
	}
	if _, err := NewOpenAIClient(OpenAIConfig{Model: "m", APIKey: "a\nb"}); err == nil {
		t.Error("API key with newline accepted")
	}
	c, err := NewOpenAIClient(OpenAIConfig{Model: "gpt-4o-mini"})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, c.endpoint, "https://api.openai.com/v1/chat/completions", "endpoint")
	equal(t, c.maxRetries, 2, "max retries")
	equal(t, c.timeout, DefaultOpenAITimeout, "timeout")
	equal(t, c.http.Timeout, DefaultOpenAITimeout, "http client timeout")
	equal(t, c.backoffBase, DefaultOpenAIBackoffBase, "backoff base")
	equal(t, c.maxBackoff, DefaultOpenAIMaxBackoff, "max backoff")
}

func TestRetryDelay(t *testing.T) {
	c := &OpenAIClient{backoffBase: 100 * time.Millisecond, maxBackoff: time.Second}
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 60: time.Second} {
		equal(t, c.retryDelay(attempt, errors.New("x")), want, "delay")
	}
	ra := &retryAfterError{APIError: &APIError{StatusCode: 429}, after: 10 * time.Second}
	equal(t, c.retryDelay(1, ra), time.Second, "Retry-After capped")
	ra.after = 0
	equal(t, c.retryDelay(3, ra), time.Duration(0), "Retry-After 0")
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 14, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"2", 2 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true},
		{now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"", 0, false},
		{"-1", 0, false},
		{"soon", 0, false},
	} {
		got, ok := parseRetryAfter(tc.v, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

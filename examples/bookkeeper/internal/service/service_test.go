package service

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// fakeOpenAI answers like a chat-completions endpoint: a create_transaction
// call for a fresh user message, then a summary of the tool result.
type fakeOpenAI struct {
	mu    sync.Mutex
	auth  []string
	tools int
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string        `json:"model"`
		Messages []llm.Message `json:"messages"`
		Tools    []llm.Tool    `json:"tools"`
	}
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Model != "fake-model" {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.tools = len(req.Tools)
	f.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	var msg any
	if last.Role == llm.RoleTool {
		msg = map[string]any{"role": "assistant", "content": "Noted: " + last.Content}
	} else {
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": "call_abc", "type": "function",
			"function": map[string]any{"name": "create_transaction", "arguments": `{"type":"expense","amount":9.99,"category_name":"Entertainment","note":"movie"}`},
		}}}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": msg, "finish_reason": "stop"}}})
}

func TestOpenAIModel(t *testing.T) {
	fake := &fakeOpenAI{}
	upstream := httptest.NewServer(fake)
	defer upstream.Close()
	ctx := context.Background()
	svc, err := Open(ctx, Config{DB: "sqlite:" + filepath.Join(t.TempDir(), "b.db"), LLM: LLMOpenAI,
		LLMBaseURL: upstream.URL + "/v1", LLMModel: "fake-model", LLMAPIKey: "sk-test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	defer svc.Close()
	ts := httptest.NewServer(svc.API)
	defer ts.Close()
	defer svc.API.Close()

	resp, err := http.Post(ts.URL+"/api/sessions", "application/json", nil)
	require.NoError(t, err)
	var sess struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sess))
	resp.Body.Close()

	body, _ := json.Marshal(api.MessageRequest{Content: "movie 9.99", ClientRequestID: "m1"})
	resp, err = http.Post(ts.URL+"/api/sessions/"+sess.ID+"/messages", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out api.MessageResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.NotNil(t, out.TransactionID)
	assert.Contains(t, out.Reply, `"amount":"9.99"`)
	assert.Contains(t, out.Reply, `"category":"Entertainment"`)

	fake.mu.Lock()
	defer fake.mu.Unlock()
	assert.Equal(t, []string{"Bearer sk-test", "Bearer sk-test"}, fake.auth, "two rounds, with the key")
	assert.Equal(t, 3, fake.tools)
}

func TestBadConfig(t *testing.T) {
	_, err := Open(context.Background(), Config{DB: "sqlite:" + filepath.Join(t.TempDir(), "b.db"), LLM: "gpt"})
	require.ErrorContains(t, err, `-llm "gpt"`)
	_, err = Open(context.Background(), Config{DB: "sqlite:" + filepath.Join(t.TempDir(), "b.db"), LeaseTTL: 3e9, Heartbeat: 2e9})
	require.Error(t, err)
}

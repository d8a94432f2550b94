package demo

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// Every scripted phrase means what the script says to the rule model.
func TestScriptPhrases(t *testing.T) {
	model := llm.NewRuleModel(llm.RuleOptions{})
	for _, tc := range []struct {
		phrases []string
		tool    string
	}{{creates, llm.ToolCreateTransaction}, {queries, ""}} {
		for _, p := range tc.phrases {
			resp, err := model.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: p}}})
			require.NoError(t, err)
			require.Len(t, resp.Message.ToolCalls, 1, p)
			name := resp.Message.ToolCalls[0].Function.Name
			if tc.tool != "" {
				assert.Equal(t, tc.tool, name, p)
			} else {
				assert.NotEqual(t, llm.ToolCreateTransaction, name, p)
			}
		}
	}
}

func TestRun(t *testing.T) {
	tty := true
	var stdout, stderr bytes.Buffer
	ok, err := Run(context.Background(), Config{
		Service:  service.Config{LLMLatency: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Sessions: 4, Progress: &tty,
	}, &stdout, &stderr)
	require.NoError(t, err)
	require.True(t, ok, stdout.String())
	out := stdout.String()
	for _, want := range []string{"409 session-busy", "200 replayed", "422 client-request-id-reused", "transactions written",
		"202 queued (on_busy: queue)", "409 interrupted", "on_busy interrupt", "Prefer: wait", "PASS"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "FAIL")
	assert.True(t, strings.Contains(stderr.String(), "\r["), "a terminal gets an in-place bar")
}

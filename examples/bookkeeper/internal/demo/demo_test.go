package demo

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// Every scripted phrase means what the script says to the rule model.
func TestScriptPhrases(t *testing.T) {
	model := llm.NewRuleModel(llm.RuleOptions{})
	for _, tc := range []struct {
		phrases []string
		tool    string
	}{{append(creates, slowMessage, approvalRent, approvalLaptop), llm.ToolCreateTransaction}, {queries, ""}} {
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

// The demo, on every dialect: its checks pass, the slow-tool scene shows
// the duplicate's 409 and its replay, and the busy-session scene shows the
// three policies and a waiting duplicate.
func TestRun(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			tty := true
			var stdout, stderr bytes.Buffer
			ok, err := Run(context.Background(), Config{
				Service: service.Config{DB: dbURL(t, d), LLMLatency: 20 * time.Millisecond,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
				Sessions: 4, Progress: &tty, SlowTool: 1500 * time.Millisecond,
			}, &stdout, &stderr)
			require.NoError(t, err)
			require.True(t, ok, stdout.String())
			out := stdout.String()
			for _, want := range []string{"409 session-busy", "200 replayed", "422 client-request-id-reused", "transactions written",
				"[ok  ] every transaction posted to the webhook once",
				"scene: a slow tool", "laptop  sends the same (slow-1): 409 request-in-flight", "laptop  200, replayed=true",
				"[ok  ] the duplicate from the second device got 409 request-in-flight while the tool ran",
				"[ok  ] it outlived its 1s TTL on renewals",
				"202 queued (on_busy: queue)", "409 interrupted", "on_busy interrupt", "Prefer: wait",
				"scene: an approval", `laptop  sends "paid rent 4,800.00" (ap-1): 202 waiting, approve-1 "Book 4,800.00 to Housing?"`,
				`phone   approves (approve-1): 200 "Recorded expense 4800.00 (Housing).`,
				`laptop  denies (approve-1): 200 "Not booked: expense 1299.00 (Shopping) was not approved."`,
				"[ok  ] approved: booked once (1 ledger row)", "[ok  ] denied: nothing booked", "PASS"} {
				assert.Contains(t, out, want)
			}
			assert.NotContains(t, out, "FAIL")
			assert.True(t, strings.Contains(stderr.String(), "\r["), "a terminal gets an in-place bar")
		})
	}
}

// dbURL makes a fresh database of dialect d and returns its -db value; ""
// (a fresh SQLite file made by Run) for SQLite.
func dbURL(t *testing.T, d lease.Dialect) string {
	t.Helper()
	switch d {
	case lease.MySQL:
		db := testdb.Open(t, d) // a fresh database, dropped at cleanup
		var name string
		require.NoError(t, db.Get(&name, "SELECT DATABASE()"))
		cfg, err := mysql.ParseDSN(os.Getenv(testdb.MySQLEnv))
		require.NoError(t, err)
		u := url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + name}
		return u.String()
	case lease.Postgres:
		db := testdb.Open(t, d) // a fresh schema, dropped at cleanup
		var name string
		require.NoError(t, db.Get(&name, "SELECT current_schema()"))
		u, err := url.Parse(os.Getenv(testdb.PostgresEnv))
		require.NoError(t, err)
		q := u.Query()
		q.Set("search_path", name)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return ""
}

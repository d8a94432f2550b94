package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// TestMain fails the run if a goroutine is left behind.
func TestMain(m *testing.M) { testdb.Main(m) }

// testLatency is the rule model's delay per round: a message takes two
// rounds, long enough for a second device to find it running.
const testLatency = time.Second

// bookkeeper serves the bookkeeper on db in-process, with the rule model
// at testLatency per round.
func bookkeeper(t *testing.T, db *sqlx.DB) (*httptest.Server, *store.Store) {
	t.Helper()
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	st := store.New(db.DB, d)
	svc, err := service.New(context.Background(), st, service.Config{LLMLatency: testLatency,
		LeaseTTL: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ts := httptest.NewServer(svc.API)
	t.Cleanup(func() {
		svc.API.Close()
		ts.Close()
	})
	return ts, st
}

// postMessage sends a message through the API, as a client would, and
// returns the status and, for an error, its problem type.
func postMessage(t *testing.T, url, session, content, id string) (int, string) {
	t.Helper()
	body, err := json.Marshal(map[string]string{"content": content, "client_request_id": id})
	require.NoError(t, err)
	resp, err := http.Post(url+"/api/sessions/"+session+"/messages", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var p struct {
		Type string `json:"type"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, p.Type
}

// messageStatus reads a message's status through the API.
func messageStatus(t *testing.T, url, session, id string) string {
	t.Helper()
	resp, err := http.Get(url + "/api/sessions/" + session + "/messages/" + id)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st struct {
		Status string `json:"status"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st.Status
}

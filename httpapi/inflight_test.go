package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
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

// A message in flight, asked again: its run renews a 30 s lease every
// 2 s, so the 409's Retry-After is the 2 s of the heartbeat (when an
// answer is likely), not the ~30 s left on the lease, and its detail
// points at "Prefer: wait"; a handler that ignores the preference does
// not mention it.
func TestInFlightRetryAfterIsTheHeartbeat(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		d, err := lease.DetectDialect(db)
		require.NoError(t, err)
		require.NoError(t, schema.Apply(context.Background(), db, d))
		g := newGate()
		r, err := request.New(request.Config{DB: db, Dialect: d, TTL: 30 * time.Second, HeartbeatInterval: 2 * time.Second,
			ReleaseTimeout: 5 * time.Second, Agent: g.agent, Session: session.Config{AutoCreate: true}})
		require.NoError(t, err)
		assert.Equal(t, 2*time.Second, r.HeartbeatInterval())
		handler := func(maxWait time.Duration) http.Handler {
			h, err := httpapi.MessageHandler(httpapi.MessageConfig{Runner: r, Message: httpapi.JSONMessage("session", 0), MaxWait: maxWait})
			require.NoError(t, err)
			return h
		}
		mux := http.NewServeMux()
		mux.Handle("POST /s/{session}/messages", handler(0))
		mux.Handle("POST /nowait/{session}/messages", handler(-1))
		srv := httptest.NewServer(mux)
		t.Cleanup(func() {
			srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			assert.NoError(t, r.Close(ctx))
		})
		e := &handlerEnv{url: srv.URL, runner: r, gate: g}

		first := e.postAsync(t, "s", "a")
		got := e.post(t, "s", "a", "block")
		require.Equal(t, http.StatusConflict, got.code, got.raw)
		assert.Equal(t, httpapi.ProblemBase+httpapi.TypeRequestInFlight, problemType(got))
		assert.Equal(t, "2", got.header.Get("Retry-After"), "the heartbeat interval, not the lease's time left")
		assert.Contains(t, got.body["detail"], `"Prefer: wait=N"`)

		got = e.do(t, http.MethodPost, "/nowait/s/messages", `{"client_request_id":"a","content":"block"}`)
		require.Equal(t, http.StatusConflict, got.code, got.raw)
		assert.Equal(t, "2", got.header.Get("Retry-After"))
		assert.NotContains(t, got.body["detail"], "Prefer", "this handler does not wait")

		g.release()
		got = <-first
		require.Equal(t, http.StatusOK, got.code, got.raw)
	})
}

package api_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

func (e *env) cancel(session, id string) hreply {
	e.t.Helper()
	return e.doH(http.MethodDelete, "/api/sessions/"+session+"/messages/"+url.PathEscape(id), nil)
}

// DELETE …/messages/{id}: a running message stops and ends cancelled —
// its pending call and every resend answer 409 cancelled, final — and a
// queued one never runs; a second DELETE is 200 again; an unknown id is
// 404; a message that succeeded is 409 already-final and stays
// succeeded.
func TestCancelMessage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		gm := newGateModel()
		e := newEnv(t, db, withModel(gm))
		sid := e.newSession()
		busy, release := gm.hold("coffee 4.5")
		defer release()
		running := make(chan hreply, 1)
		go func() { running <- e.post(sid, "coffee 4.5", "m1", "") }()
		<-busy
		r := e.post(sid, "taxi 18 yesterday", "q1", "queue")
		require.Equal(t, http.StatusAccepted, r.status, string(r.raw))

		// The queued one first: it never runs.
		r = e.cancel(sid, "q1")
		require.Equal(t, http.StatusOK, r.status, string(r.raw))
		assert.JSONEq(t, `{"client_request_id":"q1","status":"cancelled","reply":null,"transaction_id":null}`, string(r.raw))
		// The running one: stopped, its pending call answers 409 cancelled.
		r = e.cancel(sid, "m1")
		require.Equal(t, http.StatusOK, r.status, string(r.raw))
		assert.Equal(t, "cancelled", readStatus(t, r).Status)
		for _, r := range []hreply{<-running, e.post(sid, "coffee 4.5", "m1", ""), e.post(sid, "coffee 4.5", "m1", "", "Prefer", "wait=5"),
			e.post(sid, "taxi 18 yesterday", "q1", "queue")} {
			require.Equal(t, http.StatusConflict, r.status, string(r.raw))
			assert.Equal(t, problemType(api.ProblemCancelled), r.problem(t).Type)
			assert.Empty(t, r.header.Get("Retry-After"), "final: no Retry-After")
		}
		for _, id := range []string{"m1", "q1"} {
			st := readStatus(t, e.status(sid, id))
			assert.Equal(t, "cancelled", st.Status, id)
			assert.Nil(t, st.Reply, id)
			r = e.cancel(sid, id)
			assert.Equal(t, http.StatusOK, r.status, "a second DELETE of %s: %s", id, r.raw)
		}
		assert.Zero(t, e.ledgerCount(), "neither booked anything")

		// Unknown: 404. Succeeded: 409 already-final, unchanged.
		r = e.cancel(sid, "nope")
		require.Equal(t, http.StatusNotFound, r.status, string(r.raw))
		assert.Equal(t, problemType(api.ProblemNotFound), r.problem(t).Type)
		r = e.cancel("no-session", "m1")
		require.Equal(t, http.StatusNotFound, r.status, string(r.raw))
		assert.Equal(t, problemType(api.ProblemSessionNotFound), r.problem(t).Type)
		require.Equal(t, http.StatusOK, e.post(sid, "lunch 35", "done", "").status)
		r = e.cancel(sid, "done")
		require.Equal(t, http.StatusConflict, r.status, string(r.raw))
		assert.Equal(t, problemType(api.ProblemAlreadyFinal), r.problem(t).Type)
		assert.Empty(t, r.header.Get("Retry-After"))
		assert.Equal(t, "succeeded", readStatus(t, e.status(sid, "done")).Status)
		assert.Equal(t, 1, e.ledgerCount())
	})
}

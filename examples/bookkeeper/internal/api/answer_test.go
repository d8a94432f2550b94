package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/agent"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// rent is above the default threshold of approval (1,000.00).
const rent = "paid rent 4,800.00"

// waiting decodes a 202 waiting.
func waiting(t *testing.T, r reply) api.WaitingResponse {
	t.Helper()
	require.Equal(t, http.StatusAccepted, r.status, string(r.raw))
	var w api.WaitingResponse
	require.NoError(t, json.Unmarshal(r.raw, &w), string(r.raw))
	require.Equal(t, "waiting", w.Status)
	require.NotNil(t, w.Waiting, string(r.raw))
	return w
}

func (e *env) answer(session, id, name, body string) reply {
	e.t.Helper()
	return e.do(http.MethodPost, "/api/sessions/"+session+"/messages/"+id+"/answers/"+name, []byte(body))
}

func (e *env) statusOf(session, id string) api.MessageStatus {
	e.t.Helper()
	r := e.do(http.MethodGet, "/api/sessions/"+session+"/messages/"+id, nil)
	require.Equal(e.t, http.StatusOK, r.status, string(r.raw))
	var st api.MessageStatus
	require.NoError(e.t, json.Unmarshal(r.raw, &st))
	return st
}

// askRent sends the rent and checks the question it waits with: a 202
// with Location, the question in the body and in the status, nothing
// booked.
func askRent(t *testing.T, e *env, sid, id string) api.WaitingResponse {
	t.Helper()
	before := e.ledgerCount()
	r := e.send(sid, rent, id)
	w := waiting(t, r)
	assert.Equal(t, agent.ApprovalName(1), w.Waiting.Name)
	var q agent.ApprovalQuestion
	require.NoError(t, json.Unmarshal(w.Waiting.Question, &q), string(w.Waiting.Question))
	assert.Equal(t, agent.ApprovalQuestion{Text: "Book 4,800.00 to Housing?", Type: "expense", Amount: "4800.00",
		Category: "Housing", Description: rent}, q)
	assert.Nil(t, w.Waiting.Deadline, "no -approval-within: no deadline")
	assert.Contains(t, string(r.raw), `{"status":"waiting","waiting":{"name":"approve-1","question":{`)

	st := e.statusOf(sid, id)
	assert.Equal(t, "waiting", st.Status)
	require.NotNil(t, st.Waiting)
	assert.Equal(t, w.Waiting.Name, st.Waiting.Name)
	assert.JSONEq(t, string(w.Waiting.Question), string(st.Waiting.Question))
	assert.Nil(t, st.Reply)
	// A resend of the message while it waits: the same question, nothing runs.
	w2 := waiting(t, e.send(sid, rent, id))
	assert.JSONEq(t, string(w.Waiting.Question), string(w2.Waiting.Question))
	assert.Equal(t, before, e.ledgerCount(), "nothing is booked while the question is open")
	return w
}

// An expense above the threshold waits for approval: approved, it is
// booked once, whatever the answers after; denied, nothing is booked.
// The same answer twice gets the same outcome; another one, an unknown
// name, or a message that waits for nothing are 409s.
func TestApproval(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		sid := e.newSession()

		// Under the threshold: as before, no question.
		r := e.send(sid, "lunch 42.5", "small-1")
		require.Equal(t, http.StatusOK, r.status, string(r.raw))
		assert.Contains(t, r.msg.Reply, "Recorded expense 42.50")
		assert.Equal(t, 1, e.ledgerCount())

		// Approve.
		askRent(t, e, sid, "rent-1")
		ok := e.answer(sid, "rent-1", agent.ApprovalName(1), `{"approved": true}`)
		require.Equal(t, http.StatusOK, ok.status, string(ok.raw))
		assert.Equal(t, "Recorded expense 4800.00 (Housing).", ok.msg.Reply)
		require.NotNil(t, ok.msg.TransactionID)
		assert.False(t, ok.msg.Resumed, "going on after an answer is no takeover")
		assert.False(t, ok.msg.Replayed)
		assert.Equal(t, 2, e.ledgerCount())
		st := e.statusOf(sid, "rent-1")
		assert.Equal(t, "succeeded", st.Status)
		assert.Nil(t, st.Waiting)
		require.NotNil(t, st.TransactionID)
		assert.Equal(t, *ok.msg.TransactionID, *st.TransactionID)

		// The same answer again (another device), otherwise formatted: the
		// same outcome, nothing booked twice.
		again := e.answer(sid, "rent-1", agent.ApprovalName(1), `{ "approved" : true }`)
		require.Equal(t, http.StatusOK, again.status, string(again.raw))
		assert.Equal(t, ok.msg.Reply, again.msg.Reply)
		assert.Equal(t, *ok.msg.TransactionID, *again.msg.TransactionID)
		assert.True(t, again.msg.Replayed)
		// Another answer to the wait already answered: 409, nothing changes.
		other := e.answer(sid, "rent-1", agent.ApprovalName(1), `{"approved": false}`)
		assert.Equal(t, http.StatusConflict, other.status, string(other.raw))
		// A name the message never asked: 409.
		wrong := e.answer(sid, "rent-1", "approve-9", `{"approved": true}`)
		assert.Equal(t, http.StatusConflict, wrong.status, string(wrong.raw))
		// A message that never waited: 409.
		never := e.answer(sid, "small-1", agent.ApprovalName(1), `{"approved": true}`)
		assert.Equal(t, http.StatusConflict, never.status, string(never.raw))
		assert.Equal(t, 2, e.ledgerCount())
		assert.Equal(t, 1, bookings(t, e, "rent-1"))
		// The message itself, resent: the stored reply.
		resent := e.send(sid, rent, "rent-1")
		require.Equal(t, http.StatusOK, resent.status, string(resent.raw))
		assert.True(t, resent.msg.Replayed)
		assert.Equal(t, *ok.msg.TransactionID, *resent.msg.TransactionID)

		// Deny: nothing is booked, the reply says so.
		askRent(t, e, sid, "rent-2")
		// While it waits: a wrong name is 409 and leaves it waiting.
		wrong = e.answer(sid, "rent-2", "approve-2", `{"approved": false}`)
		assert.Equal(t, http.StatusConflict, wrong.status, string(wrong.raw))
		assert.Equal(t, "waiting", e.statusOf(sid, "rent-2").Status)
		no := e.answer(sid, "rent-2", agent.ApprovalName(1), `{"approved": false}`)
		require.Equal(t, http.StatusOK, no.status, string(no.raw))
		assert.Equal(t, "Not booked: expense 4800.00 (Housing) was not approved.", no.msg.Reply)
		assert.Nil(t, no.msg.TransactionID)
		assert.Equal(t, 0, bookings(t, e, "rent-2"))
		assert.Equal(t, 2, e.ledgerCount())
		// Approving it afterwards changes nothing: 409.
		late := e.answer(sid, "rent-2", agent.ApprovalName(1), `{"approved": true}`)
		assert.Equal(t, http.StatusConflict, late.status, string(late.raw))
		assert.Equal(t, 0, bookings(t, e, "rent-2"))

		// The conversation holds each message once, with its reply.
		ms := e.messages(sid)
		require.Len(t, ms, 6)
		assert.Equal(t, "Not booked: expense 4800.00 (Housing) was not approved.", ms[5].Content)
	})
}

// Two devices answer at once with the same answer: one run, one booking,
// the same reply for both. Each device follows a 409 session-busy as a
// client does (the Runner waits for the answer that runs, but the one
// that finds the session taken before that run is visible may still be
// told the session is busy).
func TestApprovalSameAnswerAtOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, withLatency(300*time.Millisecond))
		sid := e.newSession()
		waiting(t, e.send(sid, rent, "rent-1"))
		var wg sync.WaitGroup
		replies := make([]reply, 2)
		var busy atomic.Int64
		start := make(chan struct{})
		for i := range replies {
			wg.Go(func() {
				<-start
				for range 100 {
					replies[i] = e.answer(sid, "rent-1", agent.ApprovalName(1), `{"approved":true}`)
					if replies[i].status != http.StatusConflict || replies[i].problem.Type != problemType(api.ProblemSessionBusy) {
						return
					}
					busy.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
		close(start)
		wg.Wait()
		for _, r := range replies {
			require.Equal(t, http.StatusOK, r.status, string(r.raw))
			require.NotNil(t, r.msg.TransactionID)
			assert.Equal(t, *replies[0].msg.TransactionID, *r.msg.TransactionID)
			assert.Equal(t, replies[0].msg.Reply, r.msg.Reply)
		}
		assert.Equal(t, 1, e.ledgerCount())
		assert.Len(t, e.messages(sid), 2)
		if n := busy.Load(); n > 0 {
			t.Logf("an answer was told session-busy %d time(s) before it got the outcome", n)
		}
	})
}

// Bad answers are 400s before anything is written; an unknown message is
// 404; with the threshold off nothing waits.
func TestApprovalInput(t *testing.T) {
	e := newEnv(t, testdb.Open(t, lease.SQLite))
	sid := e.newSession()
	waiting(t, e.send(sid, rent, "rent-1"))
	for _, body := range []string{``, `{}`, `{"approved":"yes"}`, `{"approved":true,"x":1}`, `[true]`, `{"approved":true} {}`, `true`} {
		r := e.answer(sid, "rent-1", agent.ApprovalName(1), body)
		assert.Equal(t, http.StatusBadRequest, r.status, "%q: %s", body, r.raw)
		assert.Equal(t, problemType(api.ProblemInvalidRequest), r.problem.Type, body)
	}
	assert.Equal(t, "waiting", e.statusOf(sid, "rent-1").Status, "a bad answer changes nothing")
	r := e.answer(sid, "no-such-message", agent.ApprovalName(1), `{"approved":true}`)
	assert.Equal(t, http.StatusNotFound, r.status, string(r.raw))
	r = e.do(http.MethodGet, "/api/sessions/"+sid+"/messages/rent-1/answers/approve-1", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, r.status)

	off := newEnv(t, testdb.Open(t, lease.SQLite), func(c *service.Config) { c.ApproveAbove = -1 })
	sid = off.newSession()
	r = off.send(sid, rent, "rent-1")
	require.Equal(t, http.StatusOK, r.status, string(r.raw))
	assert.Equal(t, "Recorded expense 4800.00 (Housing).", r.msg.Reply)
}

// With a deadline, an approval nobody gives expires: the Runner runs the
// message on, nothing is booked, and the reply says the approval
// expired; an answer after it is 409.
func TestApprovalExpires(t *testing.T) {
	e := newEnv(t, testdb.Open(t, lease.SQLite), func(c *service.Config) {
		c.ApprovalWithin = 300 * time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, e.svc.Runner.Start(ctx))
	sid := e.newSession()
	w := waiting(t, e.send(sid, rent, "rent-1"))
	require.NotNil(t, w.Waiting.Deadline, "the question says when it expires")
	waitFor(t, "the expired approval's reply", func() bool { return e.statusOf(sid, "rent-1").Status == "succeeded" })
	st := e.statusOf(sid, "rent-1")
	require.NotNil(t, st.Reply)
	assert.Equal(t, "Not booked: the approval of expense 4800.00 (Housing) expired before anyone answered.", *st.Reply)
	assert.Nil(t, st.TransactionID)
	assert.Equal(t, 0, e.ledgerCount())
	r := e.answer(sid, "rent-1", agent.ApprovalName(1), `{"approved":true}`)
	assert.Equal(t, http.StatusConflict, r.status, string(r.raw))
	assert.Equal(t, 0, e.ledgerCount())
}

// bookings counts the ledger rows of one message.
func bookings(t *testing.T, e *env, clientRequestID string) int {
	t.Helper()
	per, err := e.st.TransactionsPerClientRequest(context.Background(), e.st.DB)
	require.NoError(t, err)
	for _, p := range per {
		if p.ClientRequestID == clientRequestID {
			return p.Transactions
		}
	}
	return 0
}

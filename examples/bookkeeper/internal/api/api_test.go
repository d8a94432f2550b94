package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/schema"
)

func problemType(kind string) string { return api.ProblemBase + kind }

// The same client request id from 24 devices at once: one run, one
// transaction; everyone else 409 (with problem+json and Retry-After) or a
// replay of the same answer.
func TestDuplicateStorm(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		sid := e.newSession()
		const n = 24
		replies := make([]reply, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				replies[i] = e.send(sid, "中午吃粉花了 35", "storm-1")
			})
		}
		close(start)
		wg.Wait()

		fresh, replayed, conflicts := 0, 0, 0
		txIDs := map[string]bool{}
		for _, r := range replies {
			switch r.status {
			case http.StatusOK:
				require.NotNil(t, r.msg.TransactionID)
				txIDs[*r.msg.TransactionID] = true
				if r.msg.Replayed {
					replayed++
				} else {
					fresh++
				}
			case http.StatusConflict:
				conflicts++
				retryAfterOK(t, r)
				assert.Contains(t, []string{problemType(api.ProblemRequestInFlight), problemType(api.ProblemSessionBusy)}, r.problem.Type)
			default:
				t.Fatalf("unexpected %d: %s", r.status, r.raw)
			}
		}
		assert.Equal(t, 1, fresh, "exactly one device ran the agent")
		assert.Equal(t, n, fresh+replayed+conflicts)
		assert.Len(t, txIDs, 1, "every 200 names the same transaction")
		assert.Equal(t, 1, e.ledgerCount())

		// A retry now replays the stored answer.
		r := e.sendUntilDone(sid, "中午吃粉花了 35", "storm-1")
		require.Equal(t, http.StatusOK, r.status)
		assert.True(t, r.msg.Replayed)
		for id := range txIDs {
			assert.Equal(t, id, *r.msg.TransactionID)
		}
		assert.Equal(t, 1, e.ledgerCount())
		ms := e.messages(sid)
		require.Len(t, ms, 2, "one user and one assistant message, however many sends")
		assert.Equal(t, "user", ms[0].Role)
		assert.Equal(t, "assistant", ms[1].Role)
	})
}

// Different messages into one session at once: the session runs one at a
// time (the rest get 409 session-busy); with retries all are answered, and
// the conversation has each user message followed by its own reply.
func TestOneSessionManyMessages(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		sid := e.newSession()
		phrases := []string{"lunch 12", "taxi 18", "coffee 4.5", "买咖啡 28", "地铁 4 元", "groceries 56.3", "parking 15", "book 39.9"}
		var wg sync.WaitGroup
		var mu sync.Mutex
		busy := 0
		for i, p := range phrases {
			wg.Go(func() {
				id := fmt.Sprintf("msg-%d", i)
				for {
					r := e.send(sid, p, id)
					if r.status == http.StatusConflict {
						assert.Equal(t, problemType(api.ProblemSessionBusy), r.problem.Type, "distinct ids only ever wait for the session")
						retryAfterOK(t, r)
						mu.Lock()
						busy++
						mu.Unlock()
						time.Sleep(15 * time.Millisecond)
						continue
					}
					assert.Equal(t, http.StatusOK, r.status, string(r.raw))
					assert.False(t, r.msg.Replayed)
					assert.NotNil(t, r.msg.TransactionID)
					return
				}
			})
		}
		wg.Wait()
		assert.Positive(t, busy, "some sends found the session busy")
		assert.Equal(t, len(phrases), e.ledgerCount())
		ms := e.messages(sid)
		require.Len(t, ms, 2*len(phrases))
		for i := 0; i < len(ms); i += 2 {
			assert.Equal(t, "user", ms[i].Role)
			assert.Equal(t, "assistant", ms[i+1].Role)
			assert.Equal(t, ms[i].ClientRequestID, ms[i+1].ClientRequestID, "a reply follows its own message: the session ran one at a time")
			assert.Equal(t, int64(i+1), ms[i].Seq)
		}
	})
}

func TestReplayAnd422(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		sid := e.newSession()
		first := e.send(sid, "taxi 18 yesterday", "c1")
		require.Equal(t, http.StatusOK, first.status, string(first.raw))
		assert.False(t, first.msg.Replayed)
		require.NotNil(t, first.msg.TransactionID)
		assert.Contains(t, first.msg.Reply, "18.00")

		again := e.send(sid, "taxi 18 yesterday", "c1")
		require.Equal(t, http.StatusOK, again.status)
		assert.True(t, again.msg.Replayed)
		assert.Equal(t, first.msg.Reply, again.msg.Reply)
		assert.Equal(t, *first.msg.TransactionID, *again.msg.TransactionID)

		other := e.send(sid, "taxi 81 yesterday", "c1")
		require.Equal(t, http.StatusUnprocessableEntity, other.status)
		assert.Equal(t, problemType(api.ProblemIDReused), other.problem.Type)
		assert.Equal(t, 1, e.ledgerCount(), "a 422 changes nothing")
		assert.Len(t, e.messages(sid), 2)

		// The same client id in another session is another message.
		sid2 := e.newSession()
		r := e.send(sid2, "taxi 81 yesterday", "c1")
		require.Equal(t, http.StatusOK, r.status)
		assert.False(t, r.msg.Replayed)
		assert.Equal(t, 2, e.ledgerCount())

		// A question writes nothing: transaction_id is null.
		q := e.send(sid, "how much did I spend yesterday", "c2")
		require.Equal(t, http.StatusOK, q.status)
		assert.Nil(t, q.msg.TransactionID)
		assert.Contains(t, string(q.raw), `"transaction_id":null`)
		assert.Contains(t, q.msg.Reply, "18.00")

		// The read endpoints.
		lr := e.do(http.MethodGet, "/api/sessions/"+sid+"/transactions", nil)
		require.Equal(t, http.StatusOK, lr.status)
		var txs struct {
			Transactions []api.TransactionJSON `json:"transactions"`
			TotalExpense string                `json:"total_expense"`
		}
		require.NoError(t, json.Unmarshal(lr.raw, &txs))
		require.Len(t, txs.Transactions, 1)
		assert.Equal(t, "18.00", txs.Transactions[0].Amount)
		assert.Equal(t, "Transport", txs.Transactions[0].CategoryEN)
		assert.Equal(t, "c1", txs.Transactions[0].ClientRequestID)
		assert.Equal(t, time.Now().AddDate(0, 0, -1).Format("2006-01-02"), txs.Transactions[0].OccurDate)
		assert.Equal(t, "18.00", txs.TotalExpense)

		mr := e.do(http.MethodGet, "/api/sessions/"+sid+"/messages", nil)
		require.Equal(t, http.StatusOK, mr.status)
		var msgs struct {
			Messages []api.MessageJSON `json:"messages"`
		}
		require.NoError(t, json.Unmarshal(mr.raw, &msgs))
		require.Len(t, msgs.Messages, 4)
		assert.Equal(t, "taxi 18 yesterday", msgs.Messages[0].Content)
		assert.Equal(t, first.msg.Reply, msgs.Messages[1].Content)

		sr := e.do(http.MethodGet, "/api/sessions/"+sid, nil)
		require.Equal(t, http.StatusOK, sr.status)
		assert.Contains(t, string(sr.raw), sid)
	})
}

func TestBadRequests(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		sid := e.newSession()
		long := strings.Repeat("x", api.MaxContentLen+1)
		for _, tc := range []struct {
			name, body, detail string
		}{
			{"empty body", ``, "empty"},
			{"not JSON", `content=hi`, "not valid JSON"},
			{"truncated JSON", `{"content": "hi"`, "not valid JSON"},
			{"array", `[1, 2]`, "JSON object"},
			{"unknown field", `{"content":"hi","client_request_id":"a","amount":3}`, `unknown field "amount"`},
			{"wrong type", `{"content":5,"client_request_id":"a"}`, `"content"`},
			{"missing content", `{"client_request_id":"a"}`, `"content" is required`},
			{"blank content", `{"content":"   ","client_request_id":"a"}`, `"content" is required`},
			{"missing id", `{"content":"lunch 12"}`, `"client_request_id" is required`},
			{"content too long", `{"content":"` + long + `","client_request_id":"a"}`, "longer than 2000"},
			{"content too long in runes", `{"content":"` + strings.Repeat("饭", api.MaxContentLen+1) + `","client_request_id":"a"}`, "longer than 2000"},
			{"id too long", `{"content":"hi","client_request_id":"` + strings.Repeat("i", 192) + `"}`, "longer than 191"},
			{"id with control", `{"content":"hi","client_request_id":"a\u0000b"}`, "control"},
			{"id with spaces", `{"content":"hi","client_request_id":" a "}`, "spaces"},
			{"two objects", `{"content":"hi","client_request_id":"a"} {}`, "after the JSON object"},
			{"body too large", `{"content":"hi","client_request_id":"a","x":"` + strings.Repeat("y", api.MaxBodyBytes) + `"}`, "larger than"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := e.do(http.MethodPost, "/api/sessions/"+sid+"/messages", []byte(tc.body))
				require.Equal(t, http.StatusBadRequest, r.status, string(r.raw))
				assert.Equal(t, problemType(api.ProblemInvalidRequest), r.problem.Type)
				assert.Contains(t, r.problem.Detail, tc.detail)
			})
		}
		assert.Equal(t, 0, e.ledgerCount())
		assert.Empty(t, e.messages(sid))
	})
}

func TestNotFoundAndMethods(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		for _, tc := range []struct {
			method, path string
			body         []byte
			status       int
			kind         string
		}{
			{http.MethodPost, "/api/sessions/nope/messages", msgBody("lunch 12", "a"), 404, api.ProblemSessionNotFound},
			{http.MethodPost, "/api/sessions/nope/messages", []byte("garbage"), 404, api.ProblemSessionNotFound},
			{http.MethodGet, "/api/sessions/nope/messages", nil, 404, api.ProblemSessionNotFound},
			{http.MethodGet, "/api/sessions/nope/transactions", nil, 404, api.ProblemSessionNotFound},
			{http.MethodGet, "/api/sessions/nope", nil, 404, api.ProblemSessionNotFound},
			{http.MethodGet, "/api/sessions/" + strings.Repeat("s", 300) + "/messages", nil, 404, api.ProblemSessionNotFound},
			{http.MethodGet, "/api/nothing", nil, 404, api.ProblemNotFound},
			{http.MethodGet, "/api/sessions", nil, 405, api.ProblemMethodNotAllowed},
			{http.MethodDelete, "/api/sessions/x/messages", nil, 405, api.ProblemMethodNotAllowed},
			{http.MethodPost, "/healthz", nil, 405, api.ProblemMethodNotAllowed},
		} {
			r := e.do(tc.method, tc.path, tc.body)
			assert.Equal(t, tc.status, r.status, "%s %s: %s", tc.method, tc.path, r.raw)
			assert.Equal(t, problemType(tc.kind), r.problem.Type, "%s %s", tc.method, tc.path)
		}
		r := e.do(http.MethodGet, "/healthz", nil)
		assert.Equal(t, http.StatusOK, r.status)
		assert.Contains(t, string(r.raw), `"status":"ok"`)
	})
}

// A client that hangs up mid-request does not cancel the run: it finishes,
// and the retry replays it.
func TestClientDisconnectDoesNotCancelTheRun(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, withLatency(300*time.Millisecond))
		sid := e.newSession()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/api/sessions/"+sid+"/messages",
			strings.NewReader(string(msgBody("lunch 42", "gone"))))
		require.NoError(t, err)
		errc := make(chan error, 1)
		go func() {
			resp, err := e.hc.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		waitFor(t, "the run to start", func() bool { return len(e.messages(sid)) == 1 })
		cancel() // the client hangs up during the first model round
		require.ErrorIs(t, <-errc, context.Canceled)

		waitFor(t, "the abandoned request to finish", func() bool {
			var status string
			err := db.QueryRow(db.Rebind("SELECT status FROM "+schema.RequestTable+" WHERE client_request_id = ?"), "gone").Scan(&status)
			return err == nil && status == schema.StoredSucceeded
		})
		r := e.send(sid, "lunch 42", "gone")
		require.Equal(t, http.StatusOK, r.status, string(r.raw))
		assert.True(t, r.msg.Replayed)
		assert.Equal(t, 1, e.ledgerCount())
	})
}

// Close (shutdown after the grace period) cancels running agents: they
// answer 503, release their leases at once, and a retry on a fresh server
// resumes the message without waiting for the TTL.
func TestCloseReleasesLeases(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, withLatency(time.Hour), withTTL(time.Minute))
		sid := e.newSession()
		done := make(chan reply, 1)
		go func() { done <- e.send(sid, "coffee 4.5", "slow") }()
		waitFor(t, "the user message to be stored", func() bool { return len(e.messages(sid)) == 1 })

		e.svc.API.Close()
		r := <-done
		require.Equal(t, http.StatusServiceUnavailable, r.status, string(r.raw))
		assert.Equal(t, problemType(api.ProblemShuttingDown), r.problem.Type)
		assert.Equal(t, "1", r.retryAfter)
		require.NoError(t, e.svc.API.Wait(context.Background()))

		var held int
		require.NoError(t, db.QueryRow(db.Rebind("SELECT COUNT(*) FROM "+schema.RequestTable+" WHERE token IS NOT NULL")).Scan(&held))
		assert.Zero(t, held, "the request lease was released")
		require.NoError(t, db.QueryRow(db.Rebind("SELECT COUNT(*) FROM "+schema.SessionTable+" WHERE token IS NOT NULL")).Scan(&held))
		assert.Zero(t, held, "the session lease was released")

		// A closed server refuses new runs.
		r = e.send(sid, "coffee 5", "late")
		assert.Equal(t, http.StatusServiceUnavailable, r.status)

		e2 := newEnv(t, db, withTTL(time.Minute))
		r = e2.send(sid, "coffee 4.5", "slow")
		require.Equal(t, http.StatusOK, r.status, "no 409 although the TTL is a minute: %s", r.raw)
		assert.True(t, r.msg.Resumed)
		assert.Equal(t, 1, e2.ledgerCount())
		assert.Len(t, e2.messages(sid), 2)
	})
}

// failingModel fails every call.
type failingModel struct{}

func (failingModel) Complete(context.Context, llm.Request) (llm.Response, error) {
	return llm.Response{}, errors.New("upstream exploded")
}

func TestModelFailureIs502AndRetryable(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, withModel(failingModel{}))
		sid := e.newSession()
		r := e.send(sid, "lunch 12", "m")
		require.Equal(t, http.StatusBadGateway, r.status, string(r.raw))
		assert.Equal(t, problemType(api.ProblemModelFailed), r.problem.Type)
		assert.NotContains(t, r.problem.Detail, "exploded", "internal errors are not leaked")

		e2 := newEnv(t, db)
		r = e2.send(sid, "lunch 12", "m")
		require.Equal(t, http.StatusOK, r.status, "a failed request is retried with the same id: %s", r.raw)
		assert.True(t, r.msg.Resumed)
		assert.Equal(t, 1, e2.ledgerCount())
	})
}

package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/request"
)

// answer is what httpapi sends for one error: the status, Retry-After
// and body of WriteError, and the Retry-After and body of a
// MessageHandler's default Fail (whose Runner renews every 4s, and whose
// MaxWait is positive); handlerBody "" means the same body as WriteError's.
type answer struct {
	status            int
	retryAfter        string
	body              string
	handlerRetryAfter string
	handlerBody       string
}

// contractHandler is a MessageHandler whose Message func refuses every
// request with the error named by the X-Error header.
func contractHandler(t *testing.T, errs map[string]error) http.Handler {
	t.Helper()
	db := testdb.Open(t, engine.SQLite)
	r, err := request.New(request.Config{DB: db, Dialect: engine.SQLite, TTL: 30 * time.Second, HeartbeatInterval: 4 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(t.Context()) })
	h, err := httpapi.MessageHandler(httpapi.MessageConfig{Runner: r,
		Message: func(_ http.ResponseWriter, req *http.Request) (request.Message, error) {
			return request.Message{}, errs[req.Header.Get("X-Error")]
		}})
	require.NoError(t, err)
	return h
}

// TestHTTPContract pins, for every error the library returns
// (contractErrors), the status, problem type, title, detail, Retry-After
// and extension members that httpapi answers: clients switch on them.
func TestHTTPContract(t *testing.T) {
	errs := contractErrors()
	var names []string
	for name := range errs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		_, ok := contract[name]
		assert.True(t, ok, "no answer pinned for %q", name)
	}
	for name := range contract {
		_, ok := errs[name]
		assert.True(t, ok, "no error built for %q", name)
	}
	h := contractHandler(t, errs)
	for _, name := range names {
		want := contract[name]
		t.Run(name, func(t *testing.T) {
			err := errs[name]
			if name != "nil" {
				require.Error(t, err)
			}
			w := httptest.NewRecorder()
			p := httpapi.WriteError(w, httptest.NewRequest(http.MethodPost, "/m", nil), err)
			assert.Equal(t, want.status, w.Code)
			assert.Equal(t, want.status, p.Status)
			assert.Equal(t, want.status, httpapi.StatusCode(err))
			assert.Equal(t, want.retryAfter, w.Header().Get("Retry-After"))
			assert.Equal(t, want.body, strings.TrimSpace(w.Body.String()))
			assert.Equal(t, httpapi.ContentType, w.Header().Get("Content-Type"))

			if err == nil {
				return // the handler would run a message
			}
			req := httptest.NewRequest(http.MethodPost, "/m", nil)
			req.Header.Set("X-Error", name)
			w = httptest.NewRecorder()
			h.ServeHTTP(w, req)
			assert.Equal(t, want.status, w.Code)
			assert.Equal(t, want.handlerRetryAfter, w.Header().Get("Retry-After"))
			hb := want.handlerBody
			if hb == "" {
				hb = want.body
			}
			assert.Equal(t, hb, strings.TrimSpace(w.Body.String()))
		})
	}
}

// contract is the answer to each error of contractErrors.
var contract = map[string]answer{
	"agent failed": {500, "",
		`{"type":"https://rowlease.dev/problems/agent-failed","title":"Agent failed","status":500,"detail":"the agent failed; retry with the same client request id","instance":"/m"}`,
		"", ``},
	"agent failed, stored": {500, "",
		`{"type":"https://rowlease.dev/problems/agent-failed","title":"Agent failed","status":500,"detail":"the agent failed; retry with the same client request id","instance":"/m"}`,
		"", ``},
	"agent's invalid input": {500, "",
		`{"type":"https://rowlease.dev/problems/agent-failed","title":"Agent failed","status":500,"detail":"the agent failed; retry with the same client request id","instance":"/m"}`,
		"", ``},
	"already answered": {409, "",
		`{"type":"https://rowlease.dev/problems/already-answered","title":"Already answered","status":409,"detail":"this wait was already answered with another answer; the first answer stands: read the message's status","instance":"/m"}`,
		"", ``},
	"arguments not an object": {400, "",
		`{"type":"https://rowlease.dev/problems/invalid-request","title":"Invalid request","status":400,"detail":"the tool arguments are not a valid JSON object, or hold an integer that a double does not hold exactly (send such a number as a string)","instance":"/m"}`,
		"", ``},
	"bad connection": {503, "1",
		`{"type":"https://rowlease.dev/problems/unavailable","title":"Unavailable","status":503,"detail":"the database cannot be reached; retry after Retry-After seconds (a message resent with the same client request id is never run twice)","instance":"/m"}`,
		"1", ``},
	"call of another session": {409, "",
		`{"type":"https://rowlease.dev/problems/already-exists","title":"Already exists","status":409,"detail":"a row with this key already exists","instance":"/m"}`,
		"", ``},
	"caller cancelled": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"caller's deadline": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"cancelled": {409, "",
		`{"type":"https://rowlease.dev/problems/cancelled","title":"Cancelled","status":409,"detail":"this message was cancelled; the tool calls it had committed stay, and it is never run again","instance":"/m"}`,
		"", ``},
	"cancelled, joined": {409, "",
		`{"type":"https://rowlease.dev/problems/cancelled","title":"Cancelled","status":409,"detail":"this message was cancelled; the tool calls it had committed stay, and it is never run again","instance":"/m"}`,
		"", ``},
	"connection refused": {503, "1",
		`{"type":"https://rowlease.dev/problems/unavailable","title":"Unavailable","status":503,"detail":"the database cannot be reached; retry after Retry-After seconds (a message resent with the same client request id is never run twice)","instance":"/m"}`,
		"1", ``},
	"deadlock": {503, "1",
		`{"type":"https://rowlease.dev/problems/database-busy","title":"Database busy","status":503,"detail":"the database kept refusing a transaction (deadlock, serialization failure, lock timeout, busy) and nothing of it committed; resend with the same client request id","instance":"/m"}`,
		"1", ``},
	"expired": {410, "",
		`{"type":"https://rowlease.dev/problems/expired","title":"Expired","status":410,"detail":"this client request id was answered longer ago than the server keeps answers; it is never run again: use a new id for a new message","instance":"/m"}`,
		"", ``},
	"fingerprint": {422, "",
		`{"type":"https://rowlease.dev/problems/client-request-id-reused","title":"Client request id reused","status":422,"detail":"this client request id was already used in this session with different content; use a new id for a new message","instance":"/m"}`,
		"", ``},
	"heartbeat invalid": {400, "",
		`{"type":"https://rowlease.dev/problems/invalid-request","title":"Invalid request","status":400,"detail":"heartbeat: invalid ttl: disagrees","instance":"/m"}`,
		"", ``},
	"heartbeat no connection": {503, "1",
		`{"type":"https://rowlease.dev/problems/pool-exhausted","title":"Pool exhausted","status":503,"detail":"the server had no free database connection to keep this message's locks alive, and stopped it; nobody else took it over: resend with the same client request id after Retry-After seconds","instance":"/m"}`,
		"1", ``},
	"heartbeat started": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"heartbeat stopped": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"heartbeat write lock": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"in flight": {409, "3",
		`{"type":"https://rowlease.dev/problems/request-in-flight","title":"Request in flight","status":409,"detail":"this client request id is being answered right now (another device or an earlier try); retry after Retry-After seconds to get its reply","instance":"/m"}`,
		"3", `{"type":"https://rowlease.dev/problems/request-in-flight","title":"Request in flight","status":409,"detail":"this client request id is being answered right now (another device or an earlier try); retry after Retry-After seconds to get its reply, or resend it with \"Prefer: wait=N\" to get its reply as soon as it is there (waiting up to N seconds)","instance":"/m"}`},
	"in flight, bare": {409, "1",
		`{"type":"https://rowlease.dev/problems/request-in-flight","title":"Request in flight","status":409,"detail":"this client request id is being answered right now (another device or an earlier try); retry after Retry-After seconds to get its reply","instance":"/m"}`,
		"1", `{"type":"https://rowlease.dev/problems/request-in-flight","title":"Request in flight","status":409,"detail":"this client request id is being answered right now (another device or an earlier try); retry after Retry-After seconds to get its reply, or resend it with \"Prefer: wait=N\" to get its reply as soon as it is there (waiting up to N seconds)","instance":"/m"}`},
	"in flight, changing": {409, "1",
		`{"type":"https://rowlease.dev/problems/request-in-flight","title":"Request in flight","status":409,"detail":"this client request id is being answered right now (another device or an earlier try); retry after Retry-After seconds to get its reply","instance":"/m"}`,
		"1", `{"type":"https://rowlease.dev/problems/request-in-flight","title":"Request in flight","status":409,"detail":"this client request id is being answered right now (another device or an earlier try); retry after Retry-After seconds to get its reply, or resend it with \"Prefer: wait=N\" to get its reply as soon as it is there (waiting up to N seconds)","instance":"/m"}`},
	"in flight, long lease": {409, "10",
		`{"type":"https://rowlease.dev/problems/request-in-flight","title":"Request in flight","status":409,"detail":"this client request id is being answered right now (another device or an earlier try); retry after Retry-After seconds to get its reply","instance":"/m"}`,
		"4", `{"type":"https://rowlease.dev/problems/request-in-flight","title":"Request in flight","status":409,"detail":"this client request id is being answered right now (another device or an earlier try); retry after Retry-After seconds to get its reply, or resend it with \"Prefer: wait=N\" to get its reply as soon as it is there (waiting up to N seconds)","instance":"/m"}`},
	"in flight, refused": {503, "1",
		`{"type":"https://rowlease.dev/problems/database-busy","title":"Database busy","status":503,"detail":"the database kept refusing a transaction (deadlock, serialization failure, lock timeout, busy) and nothing of it committed; resend with the same client request id","instance":"/m"}`,
		"1", ``},
	"interrupted": {409, "",
		`{"type":"https://rowlease.dev/problems/interrupted","title":"Interrupted","status":409,"detail":"a later message of the session interrupted this one; the tool calls it had committed stay, and it is never run again","instance":"/m"}`,
		"", `{"type":"https://rowlease.dev/problems/interrupted","title":"Interrupted","status":409,"detail":"a later message of the session interrupted this one; the tool calls it had committed stay, and it is never run again","instance":"/m","interrupted_by":"m-2"}`},
	"interrupted, unknown": {409, "",
		`{"type":"https://rowlease.dev/problems/interrupted","title":"Interrupted","status":409,"detail":"a later message of the session interrupted this one; the tool calls it had committed stay, and it is never run again","instance":"/m"}`,
		"", ``},
	"invalid arguments": {400, "",
		`{"type":"https://rowlease.dev/problems/invalid-request","title":"Invalid request","status":400,"detail":"the tool arguments are not a valid JSON object, or hold an integer that a double does not hold exactly (send such a number as a string)","instance":"/m"}`,
		"", ``},
	"invalid arguments, agent": {500, "",
		`{"type":"https://rowlease.dev/problems/agent-failed","title":"Agent failed","status":500,"detail":"the agent failed; retry with the same client request id","instance":"/m"}`,
		"", ``},
	"key taken": {409, "",
		`{"type":"https://rowlease.dev/problems/effect-key-taken","title":"Effect key taken","status":409,"detail":"a tool call of this message has the effect key of a call that an earlier message with this client request id made, whose record is gone; nothing was performed: use a new client request id for a new message","instance":"/m"}`,
		"", ``},
	"key taken, agent": {409, "",
		`{"type":"https://rowlease.dev/problems/effect-key-taken","title":"Effect key taken","status":409,"detail":"a tool call of this message has the effect key of a call that an earlier message with this client request id made, whose record is gone; nothing was performed: use a new client request id for a new message","instance":"/m"}`,
		"", ``},
	"lease exists": {409, "",
		`{"type":"https://rowlease.dev/problems/already-exists","title":"Already exists","status":409,"detail":"a row with this key already exists","instance":"/m"}`,
		"", ``},
	"lease held": {409, "3",
		`{"type":"https://rowlease.dev/problems/lease-held","title":"Lease held","status":409,"detail":"another holder holds this lease; retry after Retry-After seconds","instance":"/m"}`,
		"3", ``},
	"lease held, no time left": {409, "1",
		`{"type":"https://rowlease.dev/problems/lease-held","title":"Lease held","status":409,"detail":"another holder holds this lease; retry after Retry-After seconds","instance":"/m"}`,
		"1", ``},
	"lease invalid": {400, "",
		`{"type":"https://rowlease.dev/problems/invalid-request","title":"Invalid request","status":400,"detail":"lease: invalid ttl: below the minimum","instance":"/m"}`,
		"", ``},
	"lease invalid, bare": {400, "",
		`{"type":"https://rowlease.dev/problems/invalid-request","title":"Invalid request","status":400,"detail":"the input was rejected","instance":"/m"}`,
		"", ``},
	"lease invalid, of request": {400, "",
		`{"type":"https://rowlease.dev/problems/invalid-request","title":"Invalid request","status":400,"detail":"request: invalid client request id: empty","instance":"/m"}`,
		"", ``},
	"lease lost": {409, "1",
		`{"type":"https://rowlease.dev/problems/lease-lost","title":"Lease lost","status":409,"detail":"the lease was lost to another holder before the work was done; retry","instance":"/m"}`,
		"1", ``},
	"lease not found": {404, "",
		`{"type":"https://rowlease.dev/problems/not-found","title":"Not found","status":404,"detail":"nothing has this key","instance":"/m"}`,
		"", ``},
	"lease state": {409, "",
		`{"type":"https://rowlease.dev/problems/wrong-state","title":"Wrong state","status":409,"detail":"the row is in a state that does not allow this","instance":"/m"}`,
		"", ``},
	"lock wait timeout": {503, "1",
		`{"type":"https://rowlease.dev/problems/database-busy","title":"Database busy","status":503,"detail":"the database kept refusing a transaction (deadlock, serialization failure, lock timeout, busy) and nothing of it committed; resend with the same client request id","instance":"/m"}`,
		"1", ``},
	"marked unavailable": {503, "1",
		`{"type":"https://rowlease.dev/problems/unavailable","title":"Unavailable","status":503,"detail":"the database cannot be reached; retry after Retry-After seconds (a message resent with the same client request id is never run twice)","instance":"/m"}`,
		"1", ``},
	"metadata too large": {400, "",
		`{"type":"https://rowlease.dev/problems/invalid-request","title":"Invalid request","status":400,"detail":"the message's metadata is larger than the service takes","instance":"/m"}`,
		"", ``},
	"model API down": {500, "",
		`{"type":"https://rowlease.dev/problems/agent-failed","title":"Agent failed","status":500,"detail":"the agent failed; retry with the same client request id","instance":"/m"}`,
		"", ``},
	"nil": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"node behind": {503, "1",
		`{"type":"https://rowlease.dev/problems/database-busy","title":"Database busy","status":503,"detail":"the database kept refusing a transaction (deadlock, serialization failure, lock timeout, busy) and nothing of it committed; resend with the same client request id","instance":"/m"}`,
		"1", ``},
	"not waiting, none": {409, "",
		`{"type":"https://rowlease.dev/problems/not-waiting","title":"Not waiting","status":409,"detail":"this message does not wait for an answer under this name; read its status: it waits for another name, or for none","instance":"/m"}`,
		"", ``},
	"not waiting, other name": {409, "",
		`{"type":"https://rowlease.dev/problems/not-waiting","title":"Not waiting","status":409,"detail":"this message does not wait for an answer under this name; read its status: it waits for another name, or for none","instance":"/m"}`,
		"", ``},
	"outcome unknown": {502, "1",
		`{"type":"https://rowlease.dev/problems/outcome-unknown","title":"Outcome unknown","status":502,"detail":"an effect outside the database may or may not have happened; resend with the same client request id to reconcile it (it is never performed under a new key)","instance":"/m"}`,
		"1", ``},
	"outcome unknown, agent": {502, "1",
		`{"type":"https://rowlease.dev/problems/outcome-unknown","title":"Outcome unknown","status":502,"detail":"an effect outside the database may or may not have happened; resend with the same client request id to reconcile it (it is never performed under a new key)","instance":"/m"}`,
		"1", ``},
	"outcome unknown, db down": {503, "1",
		`{"type":"https://rowlease.dev/problems/unavailable","title":"Unavailable","status":503,"detail":"the database cannot be reached; retry after Retry-After seconds (a message resent with the same client request id is never run twice)","instance":"/m"}`,
		"1", ``},
	"outside tx": {500, "",
		`{"type":"https://rowlease.dev/problems/tool-write-outside-tx","title":"Tool wrote outside its transaction","status":500,"detail":"a tool of this service wrote outside its transaction, which the database refused; nothing of it committed. It is the service's bug: a resend fails the same way until the tool is fixed","instance":"/m"}`,
		"", ``},
	"outside tx, bare": {500, "",
		`{"type":"https://rowlease.dev/problems/tool-write-outside-tx","title":"Tool wrote outside its transaction","status":500,"detail":"a tool of this service wrote outside its transaction, which the database refused; nothing of it committed. It is the service's bug: a resend fails the same way until the tool is fixed","instance":"/m"}`,
		"", ``},
	"own timeout": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"pool exhausted": {503, "1",
		`{"type":"https://rowlease.dev/problems/pool-exhausted","title":"Pool exhausted","status":503,"detail":"the server had no free database connection to keep this message's locks alive, and stopped it; nobody else took it over: resend with the same client request id after Retry-After seconds","instance":"/m"}`,
		"1", ``},
	"queue full": {429, "1",
		`{"type":"https://rowlease.dev/problems/queue-full","title":"Queue full","status":429,"detail":"the session already has as many messages queued as it takes; nothing was stored: retry after Retry-After seconds","instance":"/m"}`,
		"1", `{"type":"https://rowlease.dev/problems/queue-full","title":"Queue full","status":429,"detail":"the session already has as many messages queued as it takes; nothing was stored: retry after Retry-After seconds","instance":"/m","queue_max":20}`},
	"request not found": {404, "",
		`{"type":"https://rowlease.dev/problems/not-found","title":"Not found","status":404,"detail":"nothing has this key","instance":"/m"}`,
		"", ``},
	"runner closed": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"session busy": {409, "3",
		`{"type":"https://rowlease.dev/problems/session-busy","title":"Session busy","status":409,"detail":"the session is answering another message; retry with the same client request id after Retry-After seconds","instance":"/m"}`,
		"3", ``},
	"session busy, queued": {409, "1",
		`{"type":"https://rowlease.dev/problems/session-busy","title":"Session busy","status":409,"detail":"the session is answering another message; retry with the same client request id after Retry-After seconds","instance":"/m"}`,
		"1", ``},
	"session busy, request": {409, "3",
		`{"type":"https://rowlease.dev/problems/session-busy","title":"Session busy","status":409,"detail":"the session is answering another message; retry with the same client request id after Retry-After seconds","instance":"/m"}`,
		"3", ``},
	"session lost on touch": {409, "1",
		`{"type":"https://rowlease.dev/problems/lease-lost","title":"Lease lost","status":409,"detail":"the lease was lost to another holder before the work was done; retry","instance":"/m"}`,
		"1", ``},
	"session not found": {404, "",
		`{"type":"https://rowlease.dev/problems/session-not-found","title":"Session not found","status":404,"detail":"no session has this id","instance":"/m"}`,
		"", ``},
	"step diverged": {500, "",
		`{"type":"https://rowlease.dev/problems/agent-failed","title":"Agent failed","status":500,"detail":"the agent failed; retry with the same client request id","instance":"/m"}`,
		"", ``},
	"step diverged, bare": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"step too large": {500, "",
		`{"type":"https://rowlease.dev/problems/agent-failed","title":"Agent failed","status":500,"detail":"the agent failed; retry with the same client request id","instance":"/m"}`,
		"", ``},
	"step too large, bare": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"taken over": {409, "1",
		`{"type":"https://rowlease.dev/problems/taken-over","title":"Taken over","status":409,"detail":"this run lost its lease to another run of the same message; retry with the same client request id to get its reply","instance":"/m"}`,
		"1", ``},
	"taken over, deadline": {503, "1",
		`{"type":"https://rowlease.dev/problems/unavailable","title":"Unavailable","status":503,"detail":"the database cannot be reached; retry after Retry-After seconds (a message resent with the same client request id is never run twice)","instance":"/m"}`,
		"1", ``},
	"taken over, recording": {409, "1",
		`{"type":"https://rowlease.dev/problems/taken-over","title":"Taken over","status":409,"detail":"this run lost its lease to another run of the same message; retry with the same client request id to get its reply","instance":"/m"}`,
		"1", ``},
	"taken over, rolled back": {409, "1",
		`{"type":"https://rowlease.dev/problems/taken-over","title":"Taken over","status":409,"detail":"this run lost its lease to another run of the same message; retry with the same client request id to get its reply","instance":"/m"}`,
		"1", ``},
	"tool busy": {409, "7",
		`{"type":"https://rowlease.dev/problems/tool-in-flight","title":"Tool call in flight","status":409,"detail":"a tool call of this message is still running elsewhere; retry with the same client request id after Retry-After seconds","instance":"/m"}`,
		"7", ``},
	"tool busy, agent": {409, "7",
		`{"type":"https://rowlease.dev/problems/tool-in-flight","title":"Tool call in flight","status":409,"detail":"a tool call of this message is still running elsewhere; retry with the same client request id after Retry-After seconds","instance":"/m"}`,
		"7", ``},
	"tool busy, changing": {409, "1",
		`{"type":"https://rowlease.dev/problems/tool-in-flight","title":"Tool call in flight","status":409,"detail":"a tool call of this message is still running elsewhere; retry with the same client request id after Retry-After seconds","instance":"/m"}`,
		"1", ``},
	"tool failed": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"tool failed, agent": {500, "",
		`{"type":"https://rowlease.dev/problems/agent-failed","title":"Agent failed","status":500,"detail":"the agent failed; retry with the same client request id","instance":"/m"}`,
		"", ``},
	"tool not performed": {500, "",
		`{"type":"https://rowlease.dev/problems/agent-failed","title":"Agent failed","status":500,"detail":"the agent failed; retry with the same client request id","instance":"/m"}`,
		"", ``},
	"tool transient": {503, "1",
		`{"type":"https://rowlease.dev/problems/database-busy","title":"Database busy","status":503,"detail":"the database kept refusing a transaction (deadlock, serialization failure, lock timeout, busy) and nothing of it committed; resend with the same client request id","instance":"/m"}`,
		"1", ``},
	"tool transient, agent": {503, "1",
		`{"type":"https://rowlease.dev/problems/database-busy","title":"Database busy","status":503,"detail":"the database kept refusing a transaction (deadlock, serialization failure, lock timeout, busy) and nothing of it committed; resend with the same client request id","instance":"/m"}`,
		"1", ``},
	"unknown agent": {400, "",
		`{"type":"https://rowlease.dev/problems/invalid-request","title":"Invalid request","status":400,"detail":"the message names an agent that this service does not have","instance":"/m"}`,
		"", ``},
	"unknown error": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"unknown tool": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
	"unknown tool, agent": {500, "",
		`{"type":"https://rowlease.dev/problems/agent-failed","title":"Agent failed","status":500,"detail":"the agent failed; retry with the same client request id","instance":"/m"}`,
		"", ``},
	"wait expired": {409, "",
		`{"type":"https://rowlease.dev/problems/wait-expired","title":"Wait expired","status":409,"detail":"this wait passed its deadline before it was answered and takes no answer now; the message runs on without one: read its status","instance":"/m"}`,
		"", ``},
	"wait expired, agent": {409, "",
		`{"type":"https://rowlease.dev/problems/wait-expired","title":"Wait expired","status":409,"detail":"this wait passed its deadline before it was answered and takes no answer now; the message runs on without one: read its status","instance":"/m"}`,
		"", ``},
	"waiting, outside an agent": {500, "",
		`{"type":"https://rowlease.dev/problems/internal","title":"Internal error","status":500,"detail":"an unexpected error occurred","instance":"/m"}`,
		"", ``},
}

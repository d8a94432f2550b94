package httpapi_test

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// refused is the error a dial to a closed port gives.
func refused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// wrap joins errors the way the packages do: "%w: %w".
func wrap(outer, inner error) error { return fmt.Errorf("%w: %w", outer, inner) }

// keyTaken is the error toolexec returns for a call whose effect key is
// another request's call.
func keyTaken() error {
	return &toolexec.KeyTakenError{Tool: "pay", EffectKey: "5b0e3c1e-8f0a-5d4e-9c7b-0d1e2f3a4b5c", RequestID: "r-old",
		Err: &engine.DuplicateKeyError{Key: "5b0e3c1e-8f0a-5d4e-9c7b-0d1e2f3a4b5c", Err: errors.New("1062")}}
}

// The error chains below are built as lease, session, toolexec and request
// build them (see TestProblemForRealErrors for the same from a database).
func TestProblemFor(t *testing.T) {
	busy := &lease.ConflictError{Key: "s", Holder: "r-1", Generation: 3, Remaining: 2100 * time.Millisecond}
	toolBusy := &lease.ConflictError{Key: "t", Holder: "h", Generation: 1, Remaining: 7 * time.Second}
	heartbeatDeadline := &heartbeat.LostError{Lease: "request", Reason: heartbeat.ReasonDeadline, Err: refused()}
	poolExhausted := &heartbeat.LostError{Lease: "session", Reason: heartbeat.ReasonPoolExhausted,
		Err: fmt.Errorf("%w: waited for one to renew until the trust deadline: %w", lease.ErrPoolExhausted, context.DeadlineExceeded)}
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		typ        string
		retryAfter time.Duration
	}{
		{"session busy", &session.BusyError{Key: "s", Err: busy}, 409, httpapi.TypeSessionBusy, 2100 * time.Millisecond},
		{"session busy without time", &session.BusyError{Key: "s", Err: errors.New("queue ahead")}, 409, httpapi.TypeSessionBusy, time.Second},
		{"session busy, wrapped", fmt.Errorf("request: %w", &session.BusyError{Key: "s", Err: busy}), 409, httpapi.TypeSessionBusy, 2100 * time.Millisecond},
		{"in flight", wrap(request.ErrInFlight, busy), 409, httpapi.TypeRequestInFlight, 2100 * time.Millisecond},
		{"in flight, expired just now", wrap(request.ErrInFlight, &lease.ConflictError{Remaining: 0}), 409, httpapi.TypeRequestInFlight, time.Second},
		{"in flight, a long lease left", wrap(request.ErrInFlight, &lease.ConflictError{Remaining: 25 * time.Second}), 409, httpapi.TypeRequestInFlight,
			httpapi.DefaultInFlightRetryAfter},
		{"tool conflict", &toolexec.BusyError{Tool: "t", Err: toolBusy}, 409, httpapi.TypeToolInFlight, 7 * time.Second},
		{"tool conflict returned by the agent", errors.Join(wrap(request.ErrAgentFailed, &toolexec.BusyError{Tool: "t", Err: toolBusy}), nil),
			409, httpapi.TypeToolInFlight, 7 * time.Second},
		{"taken over", wrap(request.ErrTakenOver, &heartbeat.LostError{Lease: "request", Reason: heartbeat.ReasonGone, Err: &lease.LostError{Key: "r", Op: "renew"}}),
			409, httpapi.TypeTakenOver, time.Second},
		{"fingerprint", request.ErrFingerprintMismatch, 422, httpapi.TypeClientRequestIDReused, 0},
		{"expired", request.ErrExpired, 410, httpapi.TypeExpired, 0},
		{"queue full", &request.QueueFullError{Max: 20}, 429, httpapi.TypeQueueFull, time.Second},
		{"interrupted", &request.InterruptedError{By: "m-2"}, 409, httpapi.TypeInterrupted, 0},
		{"cancelled", request.ErrCancelled, 409, httpapi.TypeCancelled, 0},
		{"cancelled, as the run's error", fmt.Errorf("run: %w", request.ErrCancelled), 409, httpapi.TypeCancelled, 0},
		{"request not found", lease.ErrNotFound, 404, httpapi.TypeNotFound, 0},
		{"session not found", &session.NotFoundError{Key: "s"}, 404, httpapi.TypeSessionNotFound, 0},
		{"agent failed", wrap(request.ErrAgentFailed, errors.New("boom")), 500, httpapi.TypeAgentFailed, 0},
		{"the agent's own validation error", wrap(request.ErrAgentFailed, &engine.ValidationError{Field: "ttl", Reason: "0"}), 500, httpapi.TypeAgentFailed, 0},
		{"validation", &engine.ValidationError{Field: "client request id", Reason: "empty"}, 400, httpapi.TypeInvalidRequest, 0},
		{"invalid tool arguments", &toolexec.ArgumentsError{Err: errors.New("not JSON")}, 400, httpapi.TypeInvalidRequest, 0},
		{"unknown agent", &request.UnknownAgentError{Name: "chat"}, 400, httpapi.TypeInvalidRequest, 0},
		{"metadata too large", &request.MetadataTooLargeError{Size: 70000, Limit: 65536}, 400, httpapi.TypeInvalidRequest, 0},
		{"lease held", busy, 409, httpapi.TypeLeaseHeld, 2100 * time.Millisecond},
		{"lease lost", &lease.LostError{Key: "k", Op: "renew"}, 409, httpapi.TypeLeaseLost, time.Second},
		{"lease not found", lease.ErrNotFound, 404, httpapi.TypeNotFound, 0},
		{"lease exists", &engine.DuplicateKeyError{Key: "k", Err: errors.New("1062")}, 409, httpapi.TypeAlreadyExists, 0},
		{"lease state", &engine.StateError{Key: "k", State: "success", Want: []string{"error"}}, 409, httpapi.TypeWrongState, 0},
		{"unknown", errors.New("whatever"), 500, httpapi.TypeInternal, 0},
		{"transient", wrap(request.ErrAgentFailed, &toolexec.TransientError{Tool: "t", Err: errors.New("deadlock")}), 503, httpapi.TypeDatabaseBusy, time.Second},
		{"outcome unknown", wrap(request.ErrAgentFailed, &toolexec.UnknownOutcomeError{Tool: "notify", EffectKey: "k"}), 502, httpapi.TypeOutcomeUnknown, time.Second},
		{"outcome unknown: the remote side refused", wrap(request.ErrAgentFailed, &toolexec.UnknownOutcomeError{Tool: "notify", EffectKey: "k", Err: refused()}),
			502, httpapi.TypeOutcomeUnknown, time.Second},
		{"outcome unknown: the remote side's answer cut short", wrap(request.ErrAgentFailed, &toolexec.UnknownOutcomeError{Tool: "notify", EffectKey: "k", Err: io.ErrUnexpectedEOF}),
			502, httpapi.TypeOutcomeUnknown, time.Second},
		{"outcome unknown, and the database gone giving the call back", errors.Join(&toolexec.UnknownOutcomeError{Tool: "notify", EffectKey: "k", Err: refused()}, driver.ErrBadConn),
			503, httpapi.TypeUnavailable, time.Second},
		{"a tool failed on another service's refusal, returned by the agent", wrap(request.ErrAgentFailed, &toolexec.FailedError{Tool: "mail", Err: refused()}),
			500, httpapi.TypeAgentFailed, 0},
		{"effect key taken, returned by the agent", wrap(request.ErrAgentFailed, keyTaken()), 409, httpapi.TypeEffectKeyTaken, 0},
		{"effect key taken", keyTaken(), 409, httpapi.TypeEffectKeyTaken, 0},
		{"a tool wrote outside its transaction", errors.Join(wrap(request.ErrAgentFailed, &toolexec.OutsideTxError{Tool: "t", Err: sqliteError(5)}), nil),
			500, httpapi.TypeToolWriteOutsideTx, 0},
		{"nil", nil, 500, httpapi.TypeInternal, 0},
		{"database down", wrap(errors.New("store: get session"), refused()), 503, httpapi.TypeUnavailable, time.Second},
		{"database down while the agent ran", errors.Join(wrap(request.ErrAgentFailed, refused()), refused()), 503, httpapi.TypeUnavailable, time.Second},
		{"database down: the heartbeat gave up", wrap(request.ErrTakenOver, heartbeatDeadline), 503, httpapi.TypeUnavailable, time.Second},
		{"the heartbeat found no free connection", fmt.Errorf("request: run stopped, its heartbeat had no connection: %w", poolExhausted),
			503, httpapi.TypePoolExhausted, time.Second},
		{"no free connection, whatever wraps it", wrap(request.ErrTakenOver, poolExhausted), 503, httpapi.TypePoolExhausted, time.Second},
		{"the model's API down is not the database", wrap(request.ErrAgentFailed, &url.Error{Op: "Post", URL: "https://api.example", Err: refused()}),
			500, httpapi.TypeAgentFailed, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := httpapi.ProblemFor(tc.err)
			assert.Equal(t, tc.status, p.Status)
			assert.Equal(t, httpapi.ProblemBase+tc.typ, p.Type)
			assert.Equal(t, tc.retryAfter, p.RetryAfter)
			assert.Equal(t, tc.status, httpapi.StatusCode(tc.err))
			assert.NotEmpty(t, p.Title)
			assert.NotEmpty(t, p.Detail)
			if tc.err != nil && tc.status != http.StatusBadRequest {
				assert.NotContains(t, p.Detail, tc.err.Error(), "the error's own text is not shown")
			}
		})
	}
}

func TestProblemForShowsOnlyValidationText(t *testing.T) {
	p := httpapi.ProblemFor(fmt.Errorf("handler %s: %w", "secret-context", &engine.ValidationError{Field: "key", Reason: "empty"}))
	assert.Equal(t, "lease: invalid key: empty", p.Detail)
}

func TestIsUnavailable(t *testing.T) {
	canceledDial := &net.OpError{Op: "dial", Net: "tcp", Err: context.Canceled}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"refused", refused(), true},
		{"refused, wrapped", wrap(errors.New("query"), refused()), true},
		{"refused, joined", errors.Join(errors.New("a"), wrap(errors.New("b"), refused())), true},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{"broken pipe, bare errno", wrap(errors.New("write"), syscall.EPIPE), true},
		{"i/o timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{"dns", &net.DNSError{Err: "no such host", Name: "db"}, true},
		{"bad conn", driver.ErrBadConn, true},
		{"mysql invalid conn", mysql.ErrInvalidConn, true},
		{"mysql too many connections", &mysql.MySQLError{Number: 1040}, true},
		{"mysql shutdown", &mysql.MySQLError{Number: 1053}, true},
		{"mysql killed", &mysql.MySQLError{Number: 1927}, true},
		{"galera non-primary node", &mysql.MySQLError{Number: 1047, SQLState: [5]byte{'0', '8', 'S', '0', '1'}, Message: "WSREP has not yet prepared node for application use"}, true},
		{"galera non-primary node, wrapped", wrap(errors.New("request: session"), &mysql.MySQLError{Number: 1047, Message: "WSREP has not yet prepared node for application use"}), true},
		{"mysql duplicate", &mysql.MySQLError{Number: 1062}, false},
		{"mysql deadlock", &mysql.MySQLError{Number: 1213}, false},
		{"postgres connection failure", sqlState("08006"), true},
		{"postgres admin shutdown", sqlState("57P01"), true},
		{"postgres starting up", sqlState("57P03"), true},
		{"postgres too many connections", sqlState("53300"), true},
		{"postgres syntax error", sqlState("42601"), false},
		{"postgres serialization", sqlState("40001"), false},
		{"sqlite busy", sqliteCode(5), true},
		{"sqlite busy (extended)", sqliteCode(517), true},
		{"sqlite cantopen", sqliteCode(14), true},
		{"sqlite ioerr (extended)", sqliteCode(10 | 3<<8), true},
		{"sqlite constraint", sqliteCode(2067), false},
		{"marked", httpapi.Unavailable(errors.New("ping timed out")), true},
		{"marked, wrapped", wrap(errors.New("health"), httpapi.Unavailable(context.DeadlineExceeded)), true},
		{"deadline", context.DeadlineExceeded, false},
		{"canceled", wrap(errors.New("query"), context.Canceled), false},
		{"dial canceled by the caller", canceledDial, false},
		{"an HTTP client's refusal", &url.Error{Op: "Post", URL: "https://api.example", Err: refused()}, false},
		{"an HTTP client's refusal next to a database's", errors.Join(&url.Error{Op: "Post", URL: "u", Err: refused()}, driver.ErrBadConn), true},
		{"a tool's failure: another service's refusal", &toolexec.FailedError{Tool: "mail", Err: refused()}, false},
		{"an external effect's unknown outcome: a refusal", wrap(errors.New("agent"), &toolexec.UnknownOutcomeError{Tool: "pay", Err: refused()}), false},
		{"an external effect's unknown outcome: a cut answer", &toolexec.UnknownOutcomeError{Tool: "pay", Err: io.ErrUnexpectedEOF}, false},
		{"an external effect's unknown outcome next to a database's error", errors.Join(&toolexec.UnknownOutcomeError{Tool: "pay", Err: refused()}, sqlState("57P01")), true},
		{"other", errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, httpapi.IsUnavailable(tc.err))
		})
	}
	assert.Nil(t, httpapi.Unavailable(nil))
	// A Galera node cut off from the primary component refuses every
	// statement with 1047: the client is told to resend (503), not that
	// its lease is lost or that the server failed (500).
	nonPrimary := fmt.Errorf("request: %w", &mysql.MySQLError{Number: 1047, Message: "WSREP has not yet prepared node for application use"})
	assert.Equal(t, http.StatusServiceUnavailable, httpapi.ProblemFor(nonPrimary).Status)
	assert.NotZero(t, httpapi.ProblemFor(nonPrimary).RetryAfter)
	assert.ErrorIs(t, httpapi.Unavailable(driver.ErrBadConn), driver.ErrBadConn, "the mark keeps the error")
}

type sqlStateError string

func (e sqlStateError) Error() string    { return "pg: " + string(e) }
func (e sqlStateError) SQLState() string { return string(e) }

func sqlState(s string) error { return wrap(errors.New("query"), sqlStateError(s)) }

type sqliteError int

func (e sqliteError) Error() string { return fmt.Sprintf("sqlite: %d", int(e)) }
func (e sqliteError) Code() int     { return int(e) }

func sqliteCode(c int) error { return sqliteError(c) }

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		retryAfter time.Duration
		header     string
	}{
		{0, ""},
		{-time.Second, ""},
		{time.Nanosecond, "1"},
		{200 * time.Millisecond, "1"},
		{time.Second, "1"},
		{2100 * time.Millisecond, "3"},
		{30 * time.Second, "30"},
	} {
		w := httptest.NewRecorder()
		p := httpapi.NewProblem(http.StatusConflict, httpapi.TypeSessionBusy, "Session busy", "busy")
		p.RetryAfter = tc.retryAfter
		httpapi.Write(w, httptest.NewRequest(http.MethodPost, "/api/sessions/s/messages?x=1", nil), p)
		assert.Equal(t, tc.header, w.Header().Get("Retry-After"), "RetryAfter %s", tc.retryAfter)
		assert.Equal(t, http.StatusConflict, w.Code)
		assert.Equal(t, httpapi.ContentType, w.Header().Get("Content-Type"))
		assert.Equal(t, "no-store", w.Header().Get("Cache-Control"))
		var body map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
		assert.Equal(t, map[string]any{"type": httpapi.ProblemBase + "session-busy", "title": "Session busy", "status": 409.0,
			"detail": "busy", "instance": "/api/sessions/s/messages"}, body, "exactly the RFC 9457 members; Retry-After is a header")
	}

	// The zero Problem: about:blank, the status text, 500.
	w := httptest.NewRecorder()
	httpapi.Write(w, nil, httpapi.Problem{})
	assert.Equal(t, http.StatusInternalServerError, w.Code)
	assert.JSONEq(t, `{"type":"about:blank","title":"Internal Server Error","status":500}`, w.Body.String())

	// WriteError returns what it wrote.
	w = httptest.NewRecorder()
	p := httpapi.WriteError(w, httptest.NewRequest(http.MethodGet, "/x", nil), wrap(request.ErrInFlight, &lease.ConflictError{Remaining: 4 * time.Second}))
	assert.Equal(t, http.StatusConflict, w.Code)
	assert.Equal(t, "4", w.Header().Get("Retry-After"))
	assert.Equal(t, httpapi.ProblemBase+httpapi.TypeRequestInFlight, p.Type)
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		0: 1, -5 * time.Second: 1, time.Millisecond: 1, time.Second: 1, time.Second + 1: 2,
		59*time.Second + 999*time.Millisecond: 60, time.Duration(1<<63 - 1): 9223372037,
	} {
		assert.Equal(t, want, httpapi.RetryAfterSeconds(d), "%s", d)
	}
}

func TestPreferWait(t *testing.T) {
	const limit = 30 * time.Second
	for _, tc := range []struct {
		name    string
		headers []string
		limit   time.Duration
		want    time.Duration
		ok      bool
	}{
		{"none", nil, limit, 0, false},
		{"other preferences only", []string{"return=minimal, respond-async"}, limit, 0, false},
		{"plain", []string{"wait=5"}, limit, 5 * time.Second, true},
		{"zero", []string{"wait=0"}, limit, 0, true},
		{"among others", []string{"respond-async, wait=10, handling=lenient"}, limit, 10 * time.Second, true},
		{"case and spaces", []string{"  WAIT = 7 "}, limit, 7 * time.Second, true},
		{"with a parameter", []string{"wait=8; foo=bar"}, limit, 8 * time.Second, true},
		{"capped", []string{"wait=100"}, limit, limit, true},
		{"capped by a fractional limit", []string{"wait=3"}, 2500 * time.Millisecond, 2500 * time.Millisecond, true},
		{"under a fractional limit", []string{"wait=2"}, 2500 * time.Millisecond, 2 * time.Second, true},
		{"huge", []string{"wait=99999999999999999999999999"}, limit, limit, true},
		{"negative limit", []string{"wait=5"}, -time.Second, 0, true},
		{"first wins", []string{"wait=3, wait=9"}, limit, 3 * time.Second, true},
		{"first header wins", []string{"respond-async", "wait=4", "wait=6"}, limit, 4 * time.Second, true},
		{"first wins even when invalid", []string{"wait=soon, wait=9"}, limit, 0, false},
		{"negative", []string{"wait=-1"}, limit, 0, false},
		{"fraction", []string{"wait=1.5"}, limit, 0, false},
		{"quoted", []string{`wait="5"`}, limit, 0, false},
		{"empty", []string{"wait="}, limit, 0, false},
		{"no value", []string{"wait"}, limit, 0, false},
		{"comma inside a quoted value", []string{`foo="a, wait=1", wait=2`}, limit, 2 * time.Second, true},
		{"escaped quote inside a quoted value", []string{`foo="a\", wait=1", wait=2`}, limit, 2 * time.Second, true},
		{"a name that only starts with wait", []string{"waiting=1, wait=2"}, limit, 2 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.headers {
				h.Add("Prefer", v)
			}
			got, ok := httpapi.PreferWait(h, tc.limit)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestSetPreferenceApplied(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "wait=0", -time.Second: "wait=0", 10 * time.Second: "wait=10", 2500 * time.Millisecond: "wait=3",
	} {
		h := http.Header{}
		httpapi.SetPreferenceApplied(h, d)
		assert.Equal(t, []string{want}, h.Values("Preference-Applied"), "%s", d)
	}
	h := http.Header{}
	h.Set("Preference-Applied", "return=minimal")
	httpapi.SetPreferenceApplied(h, time.Second)
	assert.Equal(t, []string{"return=minimal", "wait=1"}, h.Values("Preference-Applied"), "added, not replaced")
}

// InFlightRetryAfter: the heartbeat interval, no longer than the time
// left on the lease in the way, at least 1 s.
func TestInFlightRetryAfter(t *testing.T) {
	left := func(d time.Duration) error { return wrap(request.ErrInFlight, &lease.ConflictError{Remaining: d}) }
	assert.Equal(t, 2*time.Second, httpapi.InFlightRetryAfter(left(28*time.Second), 2*time.Second), "the interval")
	assert.Equal(t, 1500*time.Millisecond, httpapi.InFlightRetryAfter(left(1500*time.Millisecond), 10*time.Second), "the time left")
	assert.Equal(t, time.Second, httpapi.InFlightRetryAfter(left(28*time.Second), 100*time.Millisecond), "at least 1 s")
	assert.Equal(t, time.Second, httpapi.InFlightRetryAfter(request.ErrInFlight, 10*time.Second), "no time left known")
}

// TestRetryAfterOfEvery409: WriteError sends Retry-After with every 409
// that a resend can resolve (the lock in the way is released or expires,
// or the resend finds the other run's reply), and none with the 409s a
// resend answers the same way: interrupted (the request is final; a
// Retry-After would invite a pointless retry), already-exists,
// wrong-state and effect-key-taken. README says which is which.
func TestRetryAfterOfEvery409(t *testing.T) {
	left := &lease.ConflictError{Remaining: 3 * time.Second}
	for _, tc := range []struct {
		name   string
		err    error
		header string
	}{
		{"session busy", &session.BusyError{Key: "s", Err: left}, "3"},
		{"request in flight", wrap(request.ErrInFlight, left), "3"},
		{"tool in flight", wrap(request.ErrAgentFailed, &toolexec.BusyError{Tool: "t", Err: left}), "3"},
		{"taken over", wrap(request.ErrTakenOver, &lease.LostError{Key: "r", Op: "renew"}), "1"},
		{"lease held", left, "3"},
		{"lease lost", &lease.LostError{Key: "k", Op: "renew"}, "1"},
		{"interrupted", &request.InterruptedError{By: "m-2"}, ""},
		{"already exists", &engine.DuplicateKeyError{Key: "k", Err: errors.New("1062")}, ""},
		{"wrong state", &engine.StateError{Key: "k", State: "success", Want: []string{"error"}}, ""},
		{"effect key taken", wrap(request.ErrAgentFailed, keyTaken()), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			httpapi.WriteError(w, httptest.NewRequest(http.MethodPost, "/m", nil), tc.err)
			require.Equal(t, http.StatusConflict, w.Code)
			_, has := w.Header()["Retry-After"]
			assert.Equal(t, tc.header != "", has, "Retry-After present")
			assert.Equal(t, tc.header, w.Header().Get("Retry-After"))
		})
	}
}

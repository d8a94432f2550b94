package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
)

// DefaultMaxWait caps the wait a client asks for with "Prefer: wait=N"
// when a handler's MaxWait is 0.
const DefaultMaxWait = 60 * time.Second

// Problems says how the handlers write problems.
type Problems struct {
	// Base is the prefix of the problem type URIs; "" means ProblemBase.
	// The type names (Type…) stay the same under any base.
	Base string
	// MaxRetryAfter caps Retry-After; 0 leaves it as ProblemFor says.
	MaxRetryAfter time.Duration
}

// For is ProblemFor(err), its type under Base and its RetryAfter capped
// by MaxRetryAfter.
func (ps Problems) For(err error) Problem { return ps.problem(err, inFlight{}) }

// inFlight is how a handler answers a message in flight beyond
// ProblemFor: a heartbeat interval for its Retry-After (when positive),
// and whether it honours "Prefer: wait" (and says so in the detail).
type inFlight struct {
	interval time.Duration
	wait     bool
}

// problem is For, with a 409 request-in-flight answered as f says.
func (ps Problems) problem(err error, f inFlight) Problem {
	p := ProblemFor(err)
	if p.Type == ProblemBase+TypeRequestInFlight {
		if f.interval > 0 {
			p.RetryAfter = InFlightRetryAfter(err, f.interval)
		}
		if f.wait {
			p.Detail += `, or resend it with "Prefer: wait=N" to get its reply as soon as it is there (waiting up to N seconds)`
		}
	}
	if ps.Base != "" {
		if name, ok := strings.CutPrefix(p.Type, ProblemBase); ok {
			p.Type = ps.Base + name
		}
	}
	if ps.MaxRetryAfter > 0 {
		p.RetryAfter = min(p.RetryAfter, ps.MaxRetryAfter)
	}
	return p
}

// write answers err: p (For(err) or as a handler made it), with the RFC
// 9457 extension members that help a client act on it (see
// Problem.Extensions).
func (ps Problems) write(w http.ResponseWriter, r *http.Request, p Problem, err error, requestID string) {
	ext := map[string]any{}
	if requestID != "" {
		ext["request_id"] = requestID
	}
	var ie *request.InterruptedError
	if errors.As(err, &ie) && ie.By != "" {
		ext["interrupted_by"] = ie.By
	}
	var qf *request.QueueFullError
	if errors.As(err, &qf) {
		ext["queue_max"] = qf.Max
	}
	if len(ext) > 0 {
		p.Extensions = ext
	}
	Write(w, r, p)
}

// MessageConfig configures MessageHandler.
type MessageConfig struct {
	// Runner handles the messages. Required.
	Runner *request.Runner
	// Agent answers a message; nil means the agent the message names
	// (request.Message.Agent, which Message may set: one of the Runner's
	// Config.Agents), or the Runner's Config.Agent when it names none. A
	// name the Runner does not have is a 400.
	Agent request.Agent
	// Message reads the message from the request: its session key and
	// client request id (from the path, a header or the body: the
	// service's choice), content and OnBusy policy. It may refuse the
	// request with an error, which is answered as Fail says; it must not
	// write to w. Required. JSONMessage reads a JSON body.
	Message func(w http.ResponseWriter, r *http.Request) (request.Message, error)
	// Location is the URL of a message's status (a StatusHandler), sent
	// as Location with a 202; nil sends none.
	Location func(msg request.Message) string
	// MaxWait caps "Prefer: wait=N"; 0 means DefaultMaxWait; negative
	// ignores the preference.
	MaxWait time.Duration
	// RunContext gives the context of one run and a func to call when
	// the run is over, or an error to answer instead (for example while
	// the service shuts down). nil means context.WithoutCancel of the
	// request's context: a client that goes away does not stop its
	// message's run (a resend with the same client request id gets its
	// reply).
	RunContext func(r *http.Request) (ctx context.Context, done func(), err error)
	// WriteAnswer writes the 200 of an answered message; nil writes the
	// request.Outcome as JSON. An error it returns before writing is
	// answered as Fail says.
	WriteAnswer func(w http.ResponseWriter, r *http.Request, out request.Outcome) error
	// WriteQueued writes the 202 of a queued message, after the Location
	// header is set; nil writes {"status": "queued", "position": N}. An
	// error it returns before writing is answered as Fail says.
	WriteQueued func(w http.ResponseWriter, r *http.Request, out request.Outcome) error
	// WriteWaiting writes the 202 of a message whose run stopped to wait
	// for a person's answer (out.Waiting is set), after the Location
	// header is set; nil writes a WaitingBody. An error it returns before
	// writing is answered as Fail says.
	WriteWaiting func(w http.ResponseWriter, r *http.Request, out request.Outcome) error
	// Fail answers an error; nil writes Problems.For(err) with the
	// extension members request_id (when the request is known),
	// interrupted_by and queue_max.
	Fail func(w http.ResponseWriter, r *http.Request, err error)
	// Problems configures the default Fail.
	Problems Problems
}

// QueuedBody is the default body of a 202: the message is queued behind
// the one its session is answering.
type QueuedBody struct {
	// Status is "queued" (request.StateQueued).
	Status request.State `json:"status"`
	// Position is the number of queued messages that run before it (0:
	// it runs next).
	Position int `json:"position"`
}

// WaitingBody is the default body of a 202 for a message whose run
// stopped to wait for a person's answer (request.Await): the question to
// put to the person, and the name to send the answer under (AnswerHandler).
type WaitingBody struct {
	// Status is "waiting" (request.StateWaiting).
	Status request.State `json:"status"`
	// Waiting is the open question: its name, the JSON the agent asked
	// with (null for none) and, when the wait has one, its deadline (RFC
	// 3339, UTC; the database's deadline as this process's clock reads
	// it).
	Waiting *request.Question `json:"waiting"`
}

// NewWaitingBody returns the WaitingBody of the open question q.
func NewWaitingBody(q *request.Question) WaitingBody {
	return WaitingBody{Status: request.StateWaiting, Waiting: forClient(q)}
}

// forClient is a copy of q with its deadline in UTC (nil for nil): the
// Question the handlers send.
func forClient(q *request.Question) *request.Question {
	if q == nil {
		return nil
	}
	c := *q
	if c.Deadline != nil {
		d := c.Deadline.UTC()
		c.Deadline = &d
	}
	return &c
}

// MessageHandler returns the handler of a message endpoint (for example
// POST /sessions/{session}/messages), to mount under the service's own
// route:
//
//   - it reads the message (cfg.Message) and runs it
//     (request.Runner.Handle) under cfg.RunContext;
//   - an answered message (a first run, a resumed one or a replay) is a
//     200 (cfg.WriteAnswer);
//   - a queued one is a 202 with Location (cfg.Location) and its
//     position (cfg.WriteQueued);
//   - one whose run stopped to wait for a person's answer
//     (request.Await; Outcome.Waiting), or a resend of such a message, is a
//     202 with Location and the question (cfg.WriteWaiting, by default a
//     WaitingBody): the client puts it to the person and sends the answer
//     to an AnswerHandler;
//   - an error is a problem+json (cfg.Fail): 409 with Retry-After for a
//     busy session or a message in flight, and the rest of the table in
//     the package documentation. The default Fail gives a message in
//     flight (409 request-in-flight) the Retry-After of
//     InFlightRetryAfter with the Runner's heartbeat interval
//     (request.Runner.HeartbeatInterval), and, unless cfg.MaxWait is
//     negative, a detail that points the client at "Prefer: wait=N".
//
// "Prefer: wait=N" (capped by cfg.MaxWait): a message in flight (409
// request-in-flight) or queued (202) is waited for up to N seconds with
// request.Runner.Wait, and its stored outcome answered: 200 with the reply
// (Replayed), the problem of a failed, interrupted or cancelled one, or,
// still unfinished, what it answers now (409, or 202 with its current
// position). A run that stops to wait for a person's answer is an answer
// too: the 202 waiting, at once, whether Handle or the wait found it. The
// response carries "Preference-Applied: wait=N" when the handler waited.
//
// It returns an error for a cfg without Runner or Message.
func MessageHandler(cfg MessageConfig) (http.Handler, error) {
	if cfg.Runner == nil || cfg.Message == nil {
		return nil, errors.New("httpapi: MessageHandler needs a Runner and a Message func")
	}
	return &messageHandler{cfg: cfg}, nil
}

type messageHandler struct{ cfg MessageConfig }

func (h *messageHandler) fail(w http.ResponseWriter, r *http.Request, err error, requestID string) {
	if h.cfg.Fail != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	// A message in flight: ask again at the pace its run proves it is
	// alive, not when its lease would expire, or wait for it.
	f := inFlight{interval: h.cfg.Runner.HeartbeatInterval(), wait: h.cfg.MaxWait >= 0}
	h.cfg.Problems.write(w, r, h.cfg.Problems.problem(err, f), err, requestID)
}

// ServeHTTP handles one message.
func (h *messageHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	msg, err := h.cfg.Message(w, r)
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	ctx, done, err := runContext(r, h.cfg.RunContext)
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	defer done()
	out, err := h.cfg.Runner.Handle(ctx, msg, h.cfg.Agent)
	out, err = h.waitIfAsked(w, r, msg, out, err)
	if err != nil {
		h.fail(w, r, err, out.RequestID)
		return
	}
	fail := func(err error) { h.fail(w, r, err, out.RequestID) }
	switch {
	case out.Waiting != nil:
		writeAccepted(w, r, h.cfg.Location, msg, out, h.cfg.WriteWaiting, NewWaitingBody(out.Waiting), fail)
	case out.Queued:
		writeAccepted(w, r, h.cfg.Location, msg, out, h.cfg.WriteQueued,
			QueuedBody{Status: request.StateQueued, Position: out.Position}, fail)
	default:
		writeAnswer(w, r, out, h.cfg.WriteAnswer, fail)
	}
}

// writeAccepted writes the 202 of a queued or waiting message: Location
// (when location is set) and write's body, or def when write is nil. An
// error of write is answered by fail, without the Location.
func writeAccepted(w http.ResponseWriter, r *http.Request, location func(request.Message) string, msg request.Message,
	out request.Outcome, write func(http.ResponseWriter, *http.Request, request.Outcome) error, def any, fail func(error)) {
	if location != nil {
		w.Header().Set("Location", location(msg))
	}
	if write == nil {
		WriteJSON(w, http.StatusAccepted, def)
		return
	}
	if err := write(w, r, out); err != nil {
		w.Header().Del("Location")
		fail(err)
	}
}

// writeAnswer writes the 200 of an answered message: write's body, or the
// Outcome as JSON when write is nil. An error of write is answered by
// fail.
func writeAnswer(w http.ResponseWriter, r *http.Request, out request.Outcome,
	write func(http.ResponseWriter, *http.Request, request.Outcome) error, fail func(error)) {
	if write == nil {
		WriteJSON(w, http.StatusOK, out)
		return
	}
	if err := write(w, r, out); err != nil {
		fail(err)
	}
}

// waitIfAsked honours "Prefer: wait=N" for a message in flight or queued;
// anything else, a waiting message's outcome included, is returned as it
// came. A wait ends when the message waits for an answer too
// (request.Runner.Wait returns then).
func (h *messageHandler) waitIfAsked(w http.ResponseWriter, r *http.Request, msg request.Message, out request.Outcome, err error) (request.Outcome, error) {
	wait, ok := preferWait(r, h.cfg.MaxWait)
	if !ok || !(errors.Is(err, request.ErrInFlight) || err == nil && out.Queued) {
		return out, err
	}
	SetPreferenceApplied(w.Header(), wait)
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	st, werr := h.cfg.Runner.Wait(ctx, msg.SessionKey, msg.ClientRequestID)
	switch {
	case werr == nil:
		return st.Outcome()
	case ctx.Err() != nil && st.State == request.StateProcessing && err != nil:
		return out, err // still running: the 409 of before
	case ctx.Err() != nil && st.State != "":
		return st.Outcome() // still queued (202, the position of now), or now running (409)
	}
	return out, werr
}

// preferWait is the wait the request asks for, capped by limit (0:
// DefaultMaxWait; negative: none); ok is false when there is none to do.
func preferWait(r *http.Request, limit time.Duration) (time.Duration, bool) {
	if limit < 0 {
		return 0, false
	}
	if limit == 0 {
		limit = DefaultMaxWait
	}
	wait, ok := PreferWait(r.Header, limit)
	return wait, ok && wait > 0
}

// StatusConfig configures StatusHandler.
type StatusConfig struct {
	// Runner reads the statuses. Required.
	Runner *request.Runner
	// Keys reads the session key and the client request id of the
	// message from the request (PathKeys reads them from path
	// wildcards), or refuses it with an error, answered as Fail says; it
	// must not write to w. Required.
	Keys func(w http.ResponseWriter, r *http.Request) (sessionKey, clientRequestID string, err error)
	// MaxWait caps "Prefer: wait=N"; 0 means DefaultMaxWait; negative
	// ignores the preference.
	MaxWait time.Duration
	// WriteStatus writes the 200; nil writes a StatusBody. An error it
	// returns before writing is answered as Fail says.
	WriteStatus func(w http.ResponseWriter, r *http.Request, st request.Status) error
	// Fail answers an error; nil writes Problems.For(err) with the
	// extension members request_id (when the request is known) and
	// interrupted_by.
	Fail func(w http.ResponseWriter, r *http.Request, err error)
	// Problems configures the default Fail.
	Problems Problems
}

// StatusBody is the default body of a status: what request.Status holds
// for a client. It never holds the stored error text (it may carry
// details for the operator) nor a token.
type StatusBody struct {
	RequestID       string        `json:"request_id"`
	SessionKey      string        `json:"session_key"`
	ClientRequestID string        `json:"client_request_id"`
	State           request.State `json:"state"`
	// Position is set for a queued message only.
	Position *int `json:"position,omitempty"`
	// Live: a run holds the request's lease now.
	Live bool `json:"live"`
	// Reply and Result are set for a succeeded message only.
	Reply  *string         `json:"reply,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	// Waiting is set for a waiting message only: its open question (the
	// wait's name, the JSON the agent asked with, and its deadline, RFC
	// 3339 in UTC, when it has one), as in a WaitingBody.
	Waiting         *request.Question `json:"waiting,omitempty"`
	Attempt         int64             `json:"attempt"`
	InterruptedBy   string            `json:"interrupted_by,omitempty"`
	CancelRequested bool              `json:"cancel_requested,omitempty"`
	// Metadata is the JSON object the message was sent with, if any.
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// NewStatusBody returns the StatusBody of st.
func NewStatusBody(st request.Status) StatusBody {
	b := StatusBody{RequestID: st.RequestID, SessionKey: st.SessionKey, ClientRequestID: st.ClientRequestID,
		State: st.State, Live: st.Live, Attempt: st.Attempt, InterruptedBy: st.InterruptedBy, CancelRequested: st.CancelRequested,
		Metadata: st.Metadata}
	switch st.State {
	case request.StateQueued:
		pos := st.Position
		b.Position = &pos
	case request.StateSucceeded:
		reply := st.Reply
		b.Reply, b.Result = &reply, st.Result
	case request.StateWaiting:
		b.Waiting = forClient(st.Waiting)
	}
	return b
}

// StatusHandler returns the handler of a message's status endpoint (for
// example GET /sessions/{session}/messages/{id}), to mount under the
// service's own route. It answers request.Runner.Status: 200 with the
// status (cfg.WriteStatus) of a queued, processing, waiting (with its
// question), succeeded, failed, interrupted or cancelled message; 404 for
// an unknown one; 410 expired for one whose outcome the retention swept.
//
// "Prefer: wait=N" (capped by cfg.MaxWait) waits up to N seconds with
// request.Runner.Wait for a final state or a wait for a person's answer,
// then answers the status of then (unfinished, if the wait ran out), with
// "Preference-Applied: wait=N". A message that waits for an answer
// already is answered at once: only the answer moves it on.
//
// It returns an error for a cfg without Runner or Keys.
func StatusHandler(cfg StatusConfig) (http.Handler, error) {
	if cfg.Runner == nil || cfg.Keys == nil {
		return nil, errors.New("httpapi: StatusHandler needs a Runner and a Keys func")
	}
	return &statusHandler{cfg: cfg}, nil
}

type statusHandler struct{ cfg StatusConfig }

func (h *statusHandler) fail(w http.ResponseWriter, r *http.Request, err error, requestID string) {
	if h.cfg.Fail != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	h.cfg.Problems.write(w, r, h.cfg.Problems.For(err), err, requestID)
}

// ServeHTTP answers one status.
func (h *statusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sessionKey, clientRequestID, err := h.cfg.Keys(w, r)
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	st, err := h.cfg.Runner.Status(r.Context(), sessionKey, clientRequestID)
	if wait, ok := preferWait(r, h.cfg.MaxWait); ok && err == nil && !st.State.Final() && st.State != request.StateWaiting {
		SetPreferenceApplied(w.Header(), wait)
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		var werr error
		st, werr = h.cfg.Runner.Wait(ctx, sessionKey, clientRequestID)
		cancel()
		if werr != nil && (ctx.Err() == nil || st.State == "") {
			err = werr
		}
	}
	if err == nil && st.State == request.StateExpired {
		err = request.ErrExpired
	}
	if err != nil {
		h.fail(w, r, err, st.RequestID)
		return
	}
	if h.cfg.WriteStatus == nil {
		WriteJSON(w, http.StatusOK, NewStatusBody(st))
		return
	}
	if err := h.cfg.WriteStatus(w, r, st); err != nil {
		h.fail(w, r, err, st.RequestID)
	}
}

// PathKeys reads the session key and the client request id from the
// path wildcards named session and clientRequestID (http.Request.PathValue,
// as net/http.ServeMux sets them). A missing one is lease.ErrNotFound
// (404 not-found); the Runner checks the rest.
func PathKeys(session, clientRequestID string) func(w http.ResponseWriter, r *http.Request) (string, string, error) {
	return func(_ http.ResponseWriter, r *http.Request) (string, string, error) {
		s, c := r.PathValue(session), r.PathValue(clientRequestID)
		if s == "" || c == "" {
			return "", "", fmt.Errorf("httpapi: no session key or client request id in the path: %w", lease.ErrNotFound)
		}
		return s, c, nil
	}
}

// MessageBody is the JSON body JSONMessage reads.
type MessageBody struct {
	ClientRequestID string `json:"client_request_id"`
	Content         string `json:"content"`
	// OnBusy is "reject" (or empty), "queue" or "interrupt"
	// (request.ParsePolicy).
	OnBusy string `json:"on_busy,omitempty"`
	// Metadata is an optional JSON object stored with the message
	// (request.Message.Metadata): the user, attachments' references,
	// model settings. null means none. The Runner checks it (one object,
	// at most its Config.MaxMetadata bytes: 400 otherwise); the body's
	// limit (JSONMessage's maxBytes) bounds it too.
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// JSONMessage returns a MessageConfig.Message that reads a MessageBody
// (unknown fields refused, at most maxBytes bytes; 0 means 64 KiB), with
// the session key from the path wildcard named session. Bad input is an
// error matching lease.ErrInvalid (400 invalid-request); the Runner checks the
// keys and the content further.
func JSONMessage(session string, maxBytes int64) func(w http.ResponseWriter, r *http.Request) (request.Message, error) {
	if maxBytes <= 0 {
		maxBytes = 64 << 10
	}
	invalid := func(field, reason string) error {
		return &engine.ValidationError{Package: "httpapi", Field: field, Reason: reason}
	}
	return func(w http.ResponseWriter, r *http.Request) (request.Message, error) {
		key := r.PathValue(session)
		if key == "" {
			return request.Message{}, invalid("session key", "empty")
		}
		var in MessageBody
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBytes))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				return request.Message{}, invalid("body", fmt.Sprintf("larger than %d bytes", maxBytes))
			}
			return request.Message{}, invalid("body", "not a JSON message object")
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return request.Message{}, invalid("body", "data after the JSON object")
		}
		policy, err := request.ParsePolicy(in.OnBusy)
		if err != nil {
			return request.Message{}, invalid("on_busy", `want "reject", "queue" or "interrupt"`)
		}
		if string(in.Metadata) == "null" {
			in.Metadata = nil
		}
		return request.Message{SessionKey: key, ClientRequestID: in.ClientRequestID, Content: in.Content, OnBusy: policy,
			Metadata: in.Metadata}, nil
	}
}

// WriteJSON writes v as a JSON response with status, Content-Type
// application/json and Cache-Control: no-store (HTML characters are not
// escaped). It ignores the error of writing the body (the client has
// gone).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// runContext is the context a handler runs a message (or an answer) under,
// and the func to call when the run is over: rc's, or, with rc nil, the
// request's context without its cancellation.
func runContext(r *http.Request, rc func(*http.Request) (context.Context, func(), error)) (context.Context, func(), error) {
	if rc == nil {
		return context.WithoutCancel(r.Context()), func() {}, nil
	}
	return rc(r)
}

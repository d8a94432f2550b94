package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
)

// DefaultMaxAnswerBytes bounds an answer's body when AnswerConfig.MaxBytes
// is 0: JSONMessage's default bound of a message's body.
const DefaultMaxAnswerBytes = 64 << 10

// AnswerConfig configures AnswerHandler.
type AnswerConfig struct {
	// Runner records the answers and runs the requests on. Required. It
	// runs each request with the agent that accepted its message.
	Runner *request.Runner
	// Keys reads the session key, the client request id of the message
	// and the name of the wait from the request (PathAnswerKeys reads
	// them from path wildcards), or refuses it with an error, answered as
	// Fail says; it must not write to w. Required.
	Keys func(w http.ResponseWriter, r *http.Request) (sessionKey, clientRequestID, name string, err error)
	// MaxBytes bounds the body (the answer); 0 means
	// DefaultMaxAnswerBytes. The Runner bounds it too (its
	// Config.MaxStepOutput).
	MaxBytes int64
	// Location is the URL of the message's status (a StatusHandler), sent
	// as Location with a 202 waiting; nil sends none. It gets a
	// request.Message with SessionKey and ClientRequestID only, so that
	// MessageConfig.Location serves here too.
	Location func(msg request.Message) string
	// RunContext gives the context of one run and a func to call when
	// the run is over, or an error to answer instead, as
	// MessageConfig.RunContext. nil means context.WithoutCancel of the
	// request's context: a client that goes away does not stop the run it
	// started (the same answer sent again gets its outcome).
	RunContext func(r *http.Request) (ctx context.Context, done func(), err error)
	// WriteAnswer writes the 200 of a request answered; nil writes the
	// request.Outcome as JSON. An error it returns before writing is
	// answered as Fail says.
	WriteAnswer func(w http.ResponseWriter, r *http.Request, out request.Outcome) error
	// WriteWaiting writes the 202 of a request whose run stopped at a
	// later wait (out.Waiting is set), after the Location header is set;
	// nil writes a WaitingBody. An error it returns before writing is
	// answered as Fail says.
	WriteWaiting func(w http.ResponseWriter, r *http.Request, out request.Outcome) error
	// Fail answers an error; nil writes Problems.For(err) with the
	// extension members request_id (when the request is known),
	// interrupted_by and queue_max.
	Fail func(w http.ResponseWriter, r *http.Request, err error)
	// Problems configures the default Fail.
	Problems Problems
}

// AnswerHandler returns the handler of a wait's answer endpoint (for
// example POST /sessions/{session}/messages/{id}/answers/{name}), to
// mount under the service's own route: the endpoint a client sends a
// person's answer to, after a MessageHandler (or a StatusHandler) showed
// the question of a message that waits (request.Await).
//
//   - It accepts POST only: another method is a 405 with "Allow: POST",
//     and nothing is read or written.
//   - It reads the keys and the wait's name (cfg.Keys) and the body, the
//     answer: one JSON value of any kind, at most cfg.MaxBytes. A body
//     that is not JSON, or is larger, is a 400 invalid-request, and
//     nothing is recorded.
//   - It calls request.Runner.Answer under cfg.RunContext: the answer is
//     recorded and the request runs on with it.
//   - The request answered (its reply, or a replay) is a 200
//     (cfg.WriteAnswer); a run that stopped at a later wait is a 202 with
//     Location (cfg.Location) and that wait's question (cfg.WriteWaiting).
//   - An error is a problem+json (cfg.Fail), by the table in the package
//     documentation: 404 not-found for an unknown message; 409
//     not-waiting for a name the request does not wait for, 409
//     already-answered for another answer to a wait answered before, 409
//     wait-expired after the wait's deadline, none of them with
//     Retry-After and none writing anything; 409 session-busy with
//     Retry-After when the answer was recorded but the session answers
//     another message (the request runs when it is free; the same answer
//     sent again runs it); and the run's own outcome, as MessageHandler
//     answers it (500 agent-failed, 409 interrupted, ...).
//
// The same answer sent again (the same JSON value, whatever its
// formatting) runs nothing twice: it gets the request's outcome, waiting
// for a run in flight elsewhere. There is no "Prefer: wait": the handler
// answers when the run is over.
//
// It returns an error for a cfg without Runner or Keys.
func AnswerHandler(cfg AnswerConfig) (http.Handler, error) {
	if cfg.Runner == nil || cfg.Keys == nil {
		return nil, errors.New("httpapi: AnswerHandler needs a Runner and a Keys func")
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxAnswerBytes
	}
	return &answerHandler{cfg: cfg}, nil
}

type answerHandler struct{ cfg AnswerConfig }

func (h *answerHandler) fail(w http.ResponseWriter, r *http.Request, err error, requestID string) {
	if h.cfg.Fail != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	// A run in flight that Answer could not wait for: ask again at the
	// pace its run proves it is alive.
	f := inFlight{interval: h.cfg.Runner.HeartbeatInterval()}
	h.cfg.Problems.write(w, r, h.cfg.Problems.problem(err, f), err, requestID)
}

// ServeHTTP handles one answer.
func (h *answerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		Write(w, r, Problem{Status: http.StatusMethodNotAllowed, Detail: "send an answer with POST"})
		return
	}
	sessionKey, clientRequestID, name, err := h.cfg.Keys(w, r)
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	answer, err := h.readAnswer(w, r)
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
	out, err := h.cfg.Runner.Answer(ctx, sessionKey, clientRequestID, name, answer)
	if err != nil {
		h.fail(w, r, err, out.RequestID)
		return
	}
	fail := func(err error) { h.fail(w, r, err, out.RequestID) }
	if out.Waiting != nil {
		msg := request.Message{SessionKey: sessionKey, ClientRequestID: clientRequestID}
		writeAccepted(w, r, h.cfg.Location, msg, out, h.cfg.WriteWaiting, NewWaitingBody(out.Waiting), fail)
		return
	}
	writeAnswer(w, r, out, h.cfg.WriteAnswer, fail)
}

// readAnswer reads the body: one JSON value, at most cfg.MaxBytes. Bad
// input is an error matching lease.ErrInvalid.
func (h *answerHandler) readAnswer(w http.ResponseWriter, r *http.Request) (json.RawMessage, error) {
	invalid := func(reason string) error {
		return &engine.ValidationError{Package: "httpapi", Field: "answer", Reason: reason}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, invalid(fmt.Sprintf("larger than %d bytes", h.cfg.MaxBytes))
	case err != nil:
		return nil, invalid("the body could not be read")
	}
	body = bytes.TrimSpace(body)
	if !json.Valid(body) {
		return nil, invalid("the body is not one JSON value")
	}
	return json.RawMessage(body), nil
}

// PathAnswerKeys reads the session key, the client request id and the
// wait's name from the path wildcards named session, clientRequestID and
// name (http.Request.PathValue, as net/http.ServeMux sets them). A
// missing one is lease.ErrNotFound (404 not-found); the Runner checks the
// rest.
func PathAnswerKeys(session, clientRequestID, name string) func(w http.ResponseWriter, r *http.Request) (string, string, string, error) {
	return func(_ http.ResponseWriter, r *http.Request) (string, string, string, error) {
		s, c, n := r.PathValue(session), r.PathValue(clientRequestID), r.PathValue(name)
		if s == "" || c == "" || n == "" {
			return "", "", "", fmt.Errorf("httpapi: no session key, client request id or wait name in the path: %w", lease.ErrNotFound)
		}
		return s, c, n, nil
	}
}

package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/agent"
	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
)

// QueuedResponse is the body of a 202: the message is queued behind the
// one the session is answering.
type QueuedResponse struct {
	// Status is "queued".
	Status string `json:"status"`
	// Position is the number of queued messages that run before it (0:
	// it runs next).
	Position int `json:"position"`
}

// MessageStatus is the body of GET /api/sessions/{id}/messages/{client_request_id}.
type MessageStatus struct {
	// ClientRequestID is the message's id.
	ClientRequestID string `json:"client_request_id"`
	// Status is "queued", "processing", "succeeded", "failed",
	// "interrupted" or "cancelled".
	Status string `json:"status"`
	// Position is, for a queued message only, the number of queued
	// messages that run before it.
	Position *int `json:"position,omitempty"`
	// Reply is the agent's answer, once it succeeded; null before.
	Reply *string `json:"reply"`
	// TransactionID is the transaction the message recorded, or null.
	TransactionID *string `json:"transaction_id"`
}

// messageLocation is where a message's status is read.
func messageLocation(sessionID, clientRequestID string) string {
	return "/api/sessions/" + url.PathEscape(sessionID) + "/messages/" + url.PathEscape(clientRequestID)
}

// writeQueued answers 202 Accepted for a queued message, with the
// Location of its status.
func (s *Server) writeQueued(w http.ResponseWriter, sessionID, clientRequestID string, position int) {
	w.Header().Set("Location", messageLocation(sessionID, clientRequestID))
	writeJSON(w, http.StatusAccepted, QueuedResponse{Status: string(request.StateQueued), Position: position})
}

// waitIfAsked honours "Prefer: wait=N" on POST …/messages: when the
// message is in flight (409 request-in-flight) or queued (202), it waits
// up to N seconds (capped by MaxWait) for it to finish, and then answers
// its stored outcome (200 with the reply, "replayed": true) — or, still
// unfinished, what it answers now: 409, or 202 with the current position.
// The response then carries Preference-Applied. Anything else is returned
// as it came.
func (s *Server) waitIfAsked(w http.ResponseWriter, r *http.Request, sessionID, clientRequestID string, out request.Outcome, err error) (request.Outcome, error) {
	wait, ok := httpapi.PreferWait(r.Header, s.cfg.MaxWait)
	if !ok || wait <= 0 || !(errors.Is(err, request.ErrInFlight) || err == nil && out.Queued) {
		return out, err
	}
	httpapi.SetPreferenceApplied(w.Header(), wait)
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	st, werr := s.cfg.Runner.Wait(ctx, sessionID, clientRequestID)
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

// cancelWait bounds how long DELETE …/messages/{id} waits for a running
// message to stop.
const cancelWait = 10 * time.Second

// cancelMessage cancels a queued, running or failed message
// (Runner.Cancel): 200 with its status ("cancelled"), also when it was
// cancelled before; 202 when a running one has not stopped within
// cancelWait (it will); 404 for an unknown id; 409 already-final when it
// finished otherwise (succeeded, interrupted), which a cancel does not
// change.
func (s *Server) cancelMessage(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	id := r.PathValue("client_request_id")
	if id == "" || len(id) > schema.MaxClientRequestIDLen || !utf8.ValidString(id) {
		s.fail(w, r, request.ErrNotFound)
		return
	}
	ctx, cancel := context.WithTimeoutCause(r.Context(), cancelWait, errCancelWait)
	st, err := s.cfg.Runner.Cancel(ctx, sess.ID, id)
	cancel()
	if err != nil && errors.Is(err, errCancelWait) && st.State == request.StateProcessing {
		w.Header().Set("Location", messageLocation(sess.ID, id))
		writeJSON(w, http.StatusAccepted, MessageStatus{ClientRequestID: id, Status: string(st.State)})
		return
	}
	if err == nil && st.State == request.StateExpired {
		err = request.ErrExpired
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if st.State != request.StateCancelled {
		s.fail(w, r, &alreadyFinal{state: st.State})
		return
	}
	writeJSON(w, http.StatusOK, MessageStatus{ClientRequestID: id, Status: string(st.State)})
}

// errCancelWait is the cause of a cancel that waited cancelWait.
var errCancelWait = errors.New("api: the message is still stopping")

// alreadyFinal: a cancel of a message that finished in another state.
type alreadyFinal struct{ state request.State }

// Error says in which state.
func (e *alreadyFinal) Error() string {
	return fmt.Sprintf("the message already finished (%s); a cancel changes nothing", e.state)
}

// getMessage answers the status of one message; "Prefer: wait=N" waits up
// to N seconds for it to finish.
func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	id := r.PathValue("client_request_id")
	if id == "" || len(id) > schema.MaxClientRequestIDLen || !utf8.ValidString(id) {
		s.fail(w, r, request.ErrNotFound)
		return
	}
	st, err := s.cfg.Runner.Status(r.Context(), sess.ID, id)
	if wait, ok := httpapi.PreferWait(r.Header, s.cfg.MaxWait); ok && wait > 0 && err == nil && !st.State.Final() {
		httpapi.SetPreferenceApplied(w.Header(), wait)
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		var werr error
		st, werr = s.cfg.Runner.Wait(ctx, sess.ID, id)
		cancel()
		if werr != nil && (ctx.Err() == nil || st.State == "") {
			err = werr
		}
	}
	if err == nil && st.State == request.StateExpired {
		err = request.ErrExpired
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	body := MessageStatus{ClientRequestID: id, Status: string(st.State)}
	switch st.State {
	case request.StateQueued:
		body.Position = &st.Position
	case request.StateSucceeded:
		res, err := agent.ParseResult(st.Result)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		body.Reply, body.TransactionID = &st.Reply, res.TransactionID
	}
	writeJSON(w, http.StatusOK, body)
}

package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"
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
	// Status is "queued", "processing", "succeeded", "failed" or
	// "interrupted".
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

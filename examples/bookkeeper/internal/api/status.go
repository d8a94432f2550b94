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
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
)

// QueuedResponse is the body of a 202: the message is queued behind the
// one the session is answering. Status is "queued"; Position is the number
// of queued messages that run before it (0: it runs next). It is the body
// httpapi.MessageHandler writes.
type QueuedResponse = httpapi.QueuedBody

// MessageStatus is the body of GET /api/sessions/{id}/messages/{client_request_id}.
type MessageStatus struct {
	// ClientRequestID is the message's id.
	ClientRequestID string `json:"client_request_id"`
	// Status is "queued", "processing", "waiting", "succeeded",
	// "failed", "interrupted" or "cancelled".
	Status string `json:"status"`
	// Position is, for a queued message only, the number of queued
	// messages that run before it.
	Position *int `json:"position,omitempty"`
	// Reply is the agent's answer, once it succeeded; null before.
	Reply *string `json:"reply"`
	// TransactionID is the transaction the message recorded, or null.
	TransactionID *string `json:"transaction_id"`
	// Waiting is, for a waiting message only, the question its run
	// stopped to ask a person (see WaitingResponse): answer it at
	// …/answers/{name}.
	Waiting *request.Question `json:"waiting,omitempty"`
}

// messageLocation is where a message's status is read.
func messageLocation(sessionID, clientRequestID string) string {
	return "/api/sessions/" + url.PathEscape(sessionID) + "/messages/" + url.PathEscape(clientRequestID)
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
		s.fail(w, r, lease.ErrNotFound)
		return
	}
	ctx, cancel := context.WithTimeoutCause(r.Context(), cancelWait, errCancelWait)
	st, err := s.cfg.Runner.Cancel(ctx, sess.ID, id)
	cancel()
	if err != nil && errors.Is(err, errCancelWait) && st.State == request.StateProcessing {
		w.Header().Set("Location", messageLocation(sess.ID, id))
		httpapi.WriteJSON(w, http.StatusAccepted, MessageStatus{ClientRequestID: id, Status: string(st.State)})
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
	httpapi.WriteJSON(w, http.StatusOK, MessageStatus{ClientRequestID: id, Status: string(st.State)})
}

// errCancelWait is the cause of a cancel that waited cancelWait.
var errCancelWait = errors.New("api: the message is still stopping")

// alreadyFinal: a cancel of a message that finished in another state.
type alreadyFinal struct{ state request.State }

// Error says in which state.
func (e *alreadyFinal) Error() string {
	return fmt.Sprintf("the message already finished (%s); a cancel changes nothing", e.state)
}

// messageKeys reads the message of GET …/messages/{client_request_id}
// (httpapi.StatusConfig's Keys): the session must exist; an id that no
// message can have is not found.
func (s *Server) messageKeys(_ http.ResponseWriter, r *http.Request) (string, string, error) {
	sess, err := s.sessionOf(r)
	if err != nil {
		return "", "", err
	}
	id := r.PathValue("client_request_id")
	if id == "" || len(id) > schema.MaxClientRequestIDLen || !utf8.ValidString(id) {
		return "", "", lease.ErrNotFound
	}
	return sess.ID, id, nil
}

// writeStatus answers the status of one message (httpapi.StatusConfig's
// WriteStatus); "Prefer: wait=N" was honoured by the handler.
func (s *Server) writeStatus(w http.ResponseWriter, _ *http.Request, st request.Status) error {
	body := MessageStatus{ClientRequestID: st.ClientRequestID, Status: string(st.State)}
	switch st.State {
	case request.StateQueued:
		body.Position = &st.Position
	case request.StateWaiting:
		body.Waiting = st.Waiting
	case request.StateSucceeded:
		res, err := agent.ParseResult(st.Result)
		if err != nil {
			return err
		}
		body.Reply, body.TransactionID = &st.Reply, res.TransactionID
	}
	httpapi.WriteJSON(w, http.StatusOK, body)
	return nil
}

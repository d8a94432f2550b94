package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/agent"
	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
)

// WaitingResponse is the body of a 202 for a message whose run stopped to
// ask a person (request.Await): Status is "waiting", Waiting the open
// question — its name (the {name} to answer under), the question the
// agent asked (an agent.ApprovalQuestion) and its deadline, if it has
// one. Location is the message's status. Nothing is held while it waits.
type WaitingResponse struct {
	Status  string            `json:"status"`
	Waiting *request.Question `json:"waiting"`
}

// writeWaiting writes the 202 of a waiting message, with Location.
func (s *Server) writeWaiting(w http.ResponseWriter, r *http.Request, out request.Outcome) {
	if m, ok := r.Context().Value(messageKey{}).(*request.Message); ok && m.SessionKey != "" {
		w.Header().Set("Location", messageLocation(m.SessionKey, m.ClientRequestID))
	} else if sess, id := r.PathValue("id"), r.PathValue("client_request_id"); sess != "" && id != "" {
		w.Header().Set("Location", messageLocation(sess, id))
	}
	httpapi.WriteJSON(w, http.StatusAccepted, WaitingResponse{Status: string(request.StateWaiting), Waiting: out.Waiting})
}

// messageKey carries, in a message request's context, the message
// readMessage read, for the Location of a 202 waiting.
type messageKey struct{}

// answer answers the question a message waits for (POST
// …/messages/{client_request_id}/answers/{name}, request.Runner.Answer):
// the body is the answer, {"approved": true|false}. The message then runs
// on, and the call answers like a message: 200 with the reply, or 202
// with the next question when the run stops at a later wait. The same
// answer sent again (another device, a retry) gets the same outcome and
// runs nothing twice; another answer to a wait already answered, an
// answer under a name the message does not wait for, and one after the
// deadline are 409s (httpapi's problems for request's errors); an
// unknown message is 404.
func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	id, name := r.PathValue("client_request_id"), r.PathValue("name")
	if id == "" || len(id) > schema.MaxClientRequestIDLen || !utf8.ValidString(id) {
		s.fail(w, r, lease.ErrNotFound)
		return
	}
	if name == "" || len(name) > schema.MaxWaitNameLen || !utf8.ValidString(name) {
		s.fail(w, r, &badRequest{fmt.Sprintf("the answer's name must be 1 to %d bytes of UTF-8", schema.MaxWaitNameLen)})
		return
	}
	ans, err := decodeApproval(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, done, err := s.runContext(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer done()
	out, err := s.cfg.Runner.Answer(ctx, sess.ID, id, name, ans)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.writeAnswer(w, r, out); err != nil {
		s.fail(w, r, err)
	}
}

// decodeApproval reads an answer's body: exactly {"approved": true} or
// {"approved": false}. The agent reads the answer as an agent.Approval: one
// that does not fit would fail the message, so it is refused here.
func decodeApproval(w http.ResponseWriter, r *http.Request) (agent.Approval, error) {
	var in struct {
		Approved *bool `json:"approved"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return agent.Approval{}, &badRequest{fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes)}
		case errors.Is(err, io.EOF):
			return agent.Approval{}, &badRequest{`the body is empty; send {"approved": true} or {"approved": false}`}
		}
		return agent.Approval{}, &badRequest{`the answer must be {"approved": true} or {"approved": false}`}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return agent.Approval{}, &badRequest{"unexpected data after the JSON object"}
	}
	if in.Approved == nil {
		return agent.Approval{}, &badRequest{`"approved" is required: true or false`}
	}
	return agent.Approval{Approved: *in.Approved}, nil
}

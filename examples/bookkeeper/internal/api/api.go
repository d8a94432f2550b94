package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/agent"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/web"
	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// Input limits.
const (
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes = 64 << 10
	// MaxContentLen bounds a message's content, in characters.
	MaxContentLen = 2000
	// MaxClientRequestIDLen bounds a client request id, in bytes.
	MaxClientRequestIDLen = schema.MaxClientRequestIDLen
)

// Defaults of Config.
const (
	// DefaultMaxRetryAfter caps the Retry-After of a 409.
	DefaultMaxRetryAfter = 5 * time.Second
	// DefaultRunTimeout bounds one agent run.
	DefaultRunTimeout = 3 * time.Minute
	// DefaultMaxWait caps the wait of "Prefer: wait=N".
	DefaultMaxWait = 60 * time.Second
)

// ErrShuttingDown is the cause with which Close cancels running agents.
var ErrShuttingDown = errors.New("api: server shutting down")

// errRunTimeout is the cause of a run that exceeded RunTimeout.
var errRunTimeout = errors.New("api: run timed out")

// Config configures a Server.
type Config struct {
	// Store is the database. Required.
	Store *store.Store
	// Runner runs messages under rowlease's three-level lock. Required.
	Runner *request.Runner
	// Agent answers a message. Required.
	Agent *agent.Agent
	// MaxRetryAfter caps Retry-After; 0 means DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration
	// RunTimeout bounds one agent run; 0 means DefaultRunTimeout.
	RunTimeout time.Duration
	// MaxWait caps the wait a client asks for with "Prefer: wait=N"; 0
	// means DefaultMaxWait.
	MaxWait time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Server is the HTTP API. It is an http.Handler, safe for concurrent use.
type Server struct {
	cfg Config
	st  *store.Store
	log *slog.Logger
	mux *http.ServeMux

	// messages and status are rowlease's handlers of POST …/messages and
	// GET …/messages/{client_request_id} (package httpapi).
	messages, status http.Handler

	// work is the parent of every agent run; Close cancels it.
	work       context.Context
	cancelWork context.CancelCauseFunc

	mu      sync.Mutex
	active  int           // message handlers running
	closing bool          // Close was called: no new runs
	drained chan struct{} // closed when closing and active == 0
}

// New validates cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Runner == nil || cfg.Agent == nil {
		return nil, errors.New("api: Store, Runner and Agent are required")
	}
	if cfg.MaxRetryAfter <= 0 {
		cfg.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if cfg.RunTimeout <= 0 {
		cfg.RunTimeout = DefaultRunTimeout
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, st: cfg.Store, log: cfg.Logger, mux: http.NewServeMux(), drained: make(chan struct{})}
	s.work, s.cancelWork = context.WithCancelCause(context.Background())
	var err error
	s.messages, err = httpapi.MessageHandler(httpapi.MessageConfig{
		Runner:      cfg.Runner,
		Agent:       cfg.Agent.Handle,
		Message:     s.readMessage,
		Location:    func(m request.Message) string { return messageLocation(m.SessionKey, m.ClientRequestID) },
		MaxWait:     cfg.MaxWait,
		RunContext:  s.runContext,
		WriteAnswer: s.writeAnswer,
		WriteWaiting: func(w http.ResponseWriter, r *http.Request, out request.Outcome) error {
			s.writeWaiting(w, r, out)
			return nil
		},
		Fail: s.fail,
	})
	if err != nil {
		return nil, err
	}
	s.status, err = httpapi.StatusHandler(httpapi.StatusConfig{
		Runner:      cfg.Runner,
		Keys:        s.messageKeys,
		MaxWait:     cfg.MaxWait,
		WriteStatus: s.writeStatus,
		Fail:        s.fail,
	})
	if err != nil {
		return nil, err
	}
	notFound := func(w http.ResponseWriter, r *http.Request) {
		httpapi.Write(w, r, httpapi.NewProblem(http.StatusNotFound, ProblemNotFound, "Not found", "no such endpoint"))
	}
	page := web.Handler(http.HandlerFunc(notFound)).ServeHTTP
	routes := []struct {
		path    string
		methods map[string]http.HandlerFunc
	}{
		{"/api/sessions", map[string]http.HandlerFunc{http.MethodPost: s.createSession}},
		{"/api/sessions/{id}", map[string]http.HandlerFunc{http.MethodGet: s.getSession}},
		{"/api/sessions/{id}/messages", map[string]http.HandlerFunc{http.MethodPost: s.postMessage, http.MethodGet: s.listMessages}},
		{"/api/sessions/{id}/messages/{client_request_id}", map[string]http.HandlerFunc{http.MethodGet: s.status.ServeHTTP, http.MethodDelete: s.cancelMessage}},
		{"/api/sessions/{id}/messages/{client_request_id}/answers/{name}", map[string]http.HandlerFunc{http.MethodPost: s.answer}},
		{"/api/sessions/{id}/transactions", map[string]http.HandlerFunc{http.MethodGet: s.listTransactions}},
		{"/healthz", map[string]http.HandlerFunc{http.MethodGet: s.healthz}},
		{"/{$}", map[string]http.HandlerFunc{http.MethodGet: page}},           // the chat page (package web)
		{"/assets/{name}", map[string]http.HandlerFunc{http.MethodGet: page}}, // its scripts, styles, icon
	}
	for _, rt := range routes {
		var allow []string
		for m, h := range rt.methods {
			s.mux.HandleFunc(m+" "+rt.path, h)
			allow = append(allow, m)
			if m == http.MethodGet {
				allow = append(allow, http.MethodHead)
			}
		}
		// Other methods: a problem+json 405 rather than the mux's plain text.
		slices.Sort(allow)
		allowed := strings.Join(allow, ", ")
		s.mux.HandleFunc(rt.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allowed)
			httpapi.Write(w, r, httpapi.NewProblem(http.StatusMethodNotAllowed, ProblemMethodNotAllowed, "Method not allowed",
				fmt.Sprintf("%s is not allowed here; allowed: %s", r.Method, allowed)))
		})
	}
	s.mux.HandleFunc("/", notFound)
	return s, nil
}

// ServeHTTP routes a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	s.mux.ServeHTTP(rw, r)
	s.log.Info("http", "method", r.Method, "path", r.URL.Path, "status", rw.status, "took", time.Since(start).Round(time.Millisecond))
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader records the status and sends it.
func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Close cancels every running agent run (with cause ErrShuttingDown) and
// refuses new ones with 503. The runs release their leases (bounded by
// the Runner's ReleaseTimeout) and their handlers answer 503; Wait waits
// for them. Call it when a graceful drain ran out of time. It is safe to
// call more than once.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return
	}
	s.closing = true
	s.cancelWork(ErrShuttingDown)
	if s.active == 0 {
		close(s.drained)
	}
}

// Wait waits, after Close, until every message handler has returned, or
// until ctx is done.
func (s *Server) Wait(ctx context.Context) error {
	select {
	case <-s.drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.active++
	return true
}

func (s *Server) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.closing && s.active == 0 {
		close(s.drained)
	}
}

// runContext is the context of one agent run (httpapi.MessageConfig's
// RunContext): not cancelled when the client goes away (WithoutCancel),
// but cancelled by Close and bounded by RunTimeout. After Close it refuses
// new runs with ErrShuttingDown.
func (s *Server) runContext(r *http.Request) (context.Context, func(), error) {
	if !s.begin() {
		return nil, nil, ErrShuttingDown
	}
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	stop := context.AfterFunc(s.work, func() { cancel(context.Cause(s.work)) })
	tctx, tcancel := context.WithTimeoutCause(ctx, s.cfg.RunTimeout, errRunTimeout)
	return tctx, func() {
		tcancel()
		stop()
		cancel(nil)
		s.end()
	}, nil
}

// sessionJSON is a session as the API shows it.
type sessionJSON struct {
	ID        string    `json:"id"`
	LedgerID  string    `json:"ledger_id"`
	CreatedAt time.Time `json:"created_at"`
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	sess, err := s.st.CreateSession(r.Context(), s.cfg.Runner.Sessions())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/sessions/"+sess.ID)
	httpapi.WriteJSON(w, http.StatusCreated, sessionJSON{ID: sess.ID, LedgerID: sess.LedgerID, CreatedAt: sess.CreatedAt})
}

// session reads the {id} session, answering 404 when it does not exist.
func (s *Server) session(w http.ResponseWriter, r *http.Request) (store.Session, bool) {
	sess, err := s.sessionOf(r)
	if err != nil {
		s.fail(w, r, err)
		return store.Session{}, false
	}
	return sess, true
}

// sessionOf reads the {id} session; one that does not exist is an error
// that fail answers with 404.
func (s *Server) sessionOf(r *http.Request) (store.Session, error) {
	id := r.PathValue("id")
	if id == "" || len(id) > schema.MaxSessionKeyLen || !utf8.ValidString(id) {
		return store.Session{}, &session.NotFoundError{Key: id}
	}
	return s.st.GetSession(r.Context(), s.st.DB, id)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	if sess, ok := s.session(w, r); ok {
		httpapi.WriteJSON(w, http.StatusOK, sessionJSON{ID: sess.ID, LedgerID: sess.LedgerID, CreatedAt: sess.CreatedAt})
	}
}

// MessageRequest is the body of POST /api/sessions/{id}/messages.
type MessageRequest struct {
	// Content is the user's message, 1 to MaxContentLen characters.
	Content string `json:"content"`
	// ClientRequestID is the client's idempotency key for this message,
	// unique per session, at most MaxClientRequestIDLen bytes.
	ClientRequestID string `json:"client_request_id"`
	// OnBusy says what to do when the session is answering another
	// message: "reject" (409, the default), "queue" (202, run later) or
	// "interrupt" (stop it, run this one).
	OnBusy string `json:"on_busy,omitempty"`
}

// MessageResponse is the answer to a message.
type MessageResponse struct {
	// Reply is the agent's answer.
	Reply string `json:"reply"`
	// TransactionID is the transaction the message recorded, or null.
	TransactionID *string `json:"transaction_id"`
	// Replayed: the stored reply of an earlier run, nothing was run.
	Replayed bool `json:"replayed"`
	// Resumed: the answer comes from a run that took over the work of a
	// crashed, failed or abandoned run of the same message (agent.Result).
	Resumed bool `json:"resumed"`
}

// badRequest is a 400 with a detail for the client.
type badRequest struct{ detail string }

// Error returns the detail shown to the client.
func (e *badRequest) Error() string { return e.detail }

func decodeMessage(w http.ResponseWriter, r *http.Request) (MessageRequest, error) {
	var in MessageRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		var tooBig *http.MaxBytesError
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &tooBig):
			return in, &badRequest{fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes)}
		case errors.Is(err, io.EOF):
			return in, &badRequest{"the body is empty; send a JSON object"}
		case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
			return in, &badRequest{"the body is not valid JSON"}
		case errors.As(err, &typ):
			if typ.Field == "" {
				return in, &badRequest{"the body must be a JSON object"}
			}
			return in, &badRequest{fmt.Sprintf("field %q must be a %s", typ.Field, "string")}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return in, &badRequest{"unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")}
		}
		return in, &badRequest{"the body is not a valid message: " + err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return in, &badRequest{fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes)}
		}
		return in, &badRequest{"unexpected data after the JSON object"}
	}
	switch {
	case strings.TrimSpace(in.Content) == "":
		return in, &badRequest{`"content" is required`}
	case utf8.RuneCountInString(in.Content) > MaxContentLen:
		return in, &badRequest{fmt.Sprintf(`"content" is longer than %d characters`, MaxContentLen)}
	case in.ClientRequestID == "":
		return in, &badRequest{`"client_request_id" is required`}
	case len(in.ClientRequestID) > MaxClientRequestIDLen:
		return in, &badRequest{fmt.Sprintf(`"client_request_id" is longer than %d bytes`, MaxClientRequestIDLen)}
	case strings.IndexFunc(in.ClientRequestID, unicode.IsControl) >= 0 || strings.TrimSpace(in.ClientRequestID) != in.ClientRequestID:
		return in, &badRequest{`"client_request_id" has control characters or surrounding spaces`}
	}
	if _, err := request.ParsePolicy(in.OnBusy); err != nil {
		return in, &badRequest{`"on_busy" must be "reject", "queue" or "interrupt"`}
	}
	return in, nil
}

// readMessage reads the message of POST /api/sessions/{id}/messages
// (httpapi.MessageConfig's Message): the session must exist, and the body
// be a valid MessageRequest.
func (s *Server) readMessage(w http.ResponseWriter, r *http.Request) (request.Message, error) {
	sess, err := s.sessionOf(r)
	if err != nil {
		return request.Message{}, err
	}
	in, err := decodeMessage(w, r)
	if err != nil {
		return request.Message{}, err
	}
	onBusy, _ := request.ParsePolicy(in.OnBusy) // checked by decodeMessage
	m := request.Message{SessionKey: sess.ID, ClientRequestID: in.ClientRequestID, Content: in.Content, OnBusy: onBusy}
	if held, ok := r.Context().Value(messageKey{}).(*request.Message); ok {
		*held = m
	}
	return m, nil
}

// postMessage is POST /api/sessions/{id}/messages: rowlease's handler,
// with a place in the request's context where readMessage leaves the
// message it read (for the Location of a 202 waiting).
func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) {
	s.messages.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), messageKey{}, &request.Message{})))
}

// writeAnswer answers a message with its reply and the transaction it
// recorded (httpapi.MessageConfig's WriteAnswer); a message whose run
// stopped to ask a person is a 202 with the question (writeWaiting).
func (s *Server) writeAnswer(w http.ResponseWriter, r *http.Request, out request.Outcome) error {
	if out.Waiting != nil {
		s.writeWaiting(w, r, out)
		return nil
	}
	res, err := agent.ParseResult(out.Result)
	if err != nil {
		return fmt.Errorf("api: stored result: %w", err)
	}
	httpapi.WriteJSON(w, http.StatusOK, MessageResponse{Reply: out.Reply, TransactionID: res.TransactionID,
		Replayed: out.Replayed, Resumed: res.Resumed})
	return nil
}

// MessageJSON is a chat message as the API shows it.
type MessageJSON struct {
	Seq             int64     `json:"seq"`               // position in the session, from 1
	Role            string    `json:"role"`              // "user" or "assistant"
	Content         string    `json:"content"`           // the text
	ClientRequestID string    `json:"client_request_id"` // the message it belongs to
	CreatedAt       time.Time `json:"created_at"`        // when it was stored
}

func (s *Server) listMessages(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	ms, err := s.st.Messages(r.Context(), s.st.DB, sess.ID, 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := struct {
		Messages []MessageJSON `json:"messages"`
	}{Messages: make([]MessageJSON, 0, len(ms))}
	for _, m := range ms {
		out.Messages = append(out.Messages, MessageJSON{Seq: m.Seq, Role: m.Role, Content: m.Content,
			ClientRequestID: m.ClientRequestID, CreatedAt: m.CreatedAt})
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// TransactionJSON is a ledger transaction as the API shows it.
type TransactionJSON struct {
	ID              string    `json:"id"`                // transaction id (UUID)
	Type            string    `json:"type"`              // "income" or "expense"
	Amount          string    `json:"amount"`            // decimal with two places, "35.00"
	Category        string    `json:"category"`          // Chinese category name
	CategoryEN      string    `json:"category_en"`       // English category name
	Note            string    `json:"note"`              // free text, usually the user's words
	OccurDate       string    `json:"occur_date"`        // YYYY-MM-DD
	ClientRequestID string    `json:"client_request_id"` // the message that recorded it
	CreatedAt       time.Time `json:"created_at"`        // when it was written
}

// maxListedTransactions bounds GET …/transactions.
const maxListedTransactions = 500

func (s *Server) listTransactions(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	ts, err := s.st.Transactions(r.Context(), s.st.DB, store.TransactionFilter{LedgerID: sess.LedgerID, Limit: maxListedTransactions})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := struct {
		Transactions []TransactionJSON `json:"transactions"`
		TotalIncome  string            `json:"total_income"`
		TotalExpense string            `json:"total_expense"`
	}{Transactions: make([]TransactionJSON, 0, len(ts))}
	var income, expense int64
	for _, t := range ts {
		if t.Type == store.TypeIncome {
			income += t.AmountCents
		} else {
			expense += t.AmountCents
		}
		out.Transactions = append(out.Transactions, TransactionJSON{ID: t.ID, Type: t.Type, Amount: t.Amount(),
			Category: t.Category, CategoryEN: t.CategoryEN, Note: t.Note, OccurDate: t.OccurDate,
			ClientRequestID: t.ClientRequestID, CreatedAt: t.CreatedAt})
	}
	out.TotalIncome, out.TotalExpense = store.FormatCents(income), store.FormatCents(expense)
	httpapi.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if err := httpapi.Ping(r.Context(), s.st.DB, 2*time.Second); err != nil {
		s.fail(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "dialect": s.st.Dialect.String()})
}

// fail answers an error: the example's own first (shutdown, run
// timeout, a failed model, a missing session row), then whatever
// httpapi.ProblemFor says for rowlease's errors and an unreachable
// database. Retry-After is capped by MaxRetryAfter.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	p := httpapi.ProblemFor(err)
	var bad *badRequest
	switch {
	case errors.As(err, &bad):
		p = httpapi.NewProblem(http.StatusBadRequest, ProblemInvalidRequest, "Invalid request", bad.Error())
	case errors.Is(err, ErrShuttingDown):
		p = httpapi.NewProblem(http.StatusServiceUnavailable, ProblemShuttingDown, "Shutting down",
			"the server is shutting down; retry with the same client_request_id (the work done so far is kept)")
		p.RetryAfter = time.Second
	case errors.Is(err, errRunTimeout):
		p = httpapi.NewProblem(http.StatusGatewayTimeout, ProblemTimeout, "Timeout",
			"the agent took too long; retry with the same client_request_id to resume it")
	case errors.Is(err, store.ErrNotFound):
		p = httpapi.ProblemFor(&session.NotFoundError{})
	case errors.As(err, new(*alreadyFinal)):
		p = httpapi.NewProblem(http.StatusConflict, ProblemAlreadyFinal, "Already finished", err.Error())
	case errors.Is(err, lease.ErrNotFound) && !errors.As(err, new(*session.NotFoundError)):
		p = httpapi.NewProblem(http.StatusNotFound, ProblemNotFound, "Not found", "this session has no message with this client_request_id")
	case p.Type == ProblemBase+ProblemAgentFailed && errors.Is(err, agent.ErrModel):
		p = httpapi.NewProblem(http.StatusBadGateway, ProblemModelFailed, "Model failed",
			"the language model failed; retry with the same client_request_id")
	}
	p.RetryAfter = min(p.RetryAfter, s.cfg.MaxRetryAfter)
	switch p.Type {
	case ProblemBase + ProblemUnavailable:
		s.log.Warn("database unreachable", "path", r.URL.Path, "err", err)
	case ProblemBase + ProblemModelFailed:
		s.log.Warn("model failed", "path", r.URL.Path, "err", err)
	case ProblemBase + ProblemAgentFailed:
		s.log.Error("agent failed", "path", r.URL.Path, "err", err)
	case ProblemBase + ProblemInternal:
		s.log.Error("internal error", "path", r.URL.Path, "err", err)
	}
	httpapi.Write(w, r, p)
}

package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rowlease/rowlease/toolexec"
)

// Header names.
const (
	// KeyHeader carries the idempotency key of a request.
	KeyHeader = "Idempotency-Key"
	// ReplayedHeader, "true" on an answer, says the receiver answered a
	// key it had seen before with its first answer.
	ReplayedHeader = "Idempotent-Replayed"
)

// Limits.
const (
	// MaxKeyLen bounds an idempotency key, in bytes.
	MaxKeyLen = 255
	// MaxBodyBytes bounds a notification body and an answer read back.
	MaxBodyBytes = 64 << 10
	// DefaultTimeout bounds one Send.
	DefaultTimeout = 10 * time.Second
)

// EventBooked is the event of a Notification about a booked transaction.
const EventBooked = "transaction.booked"

// Notification is the body posted when a transaction is booked.
type Notification struct {
	Event         string `json:"event"`          // EventBooked
	TransactionID string `json:"transaction_id"` // the ledger row's id
	Type          string `json:"type"`           // "income" or "expense"
	Amount        string `json:"amount"`         // decimal with two places, "35.00"
	Category      string `json:"category"`       // category id, such as "food"
	OccurDate     string `json:"occur_date"`     // YYYY-MM-DD
	SessionID     string `json:"session_id"`     // the conversation
	RequestID     string `json:"request_id"`     // the message (rowlease request) that booked it
}

// Delivery is the result of a performed notification, as recorded on the
// tool execution.
type Delivery struct {
	// Status is the receiver's HTTP status (2xx).
	Status int `json:"status"`
	// Receipt is the "receipt" field of the receiver's JSON answer, if any.
	Receipt string `json:"receipt,omitempty"`
	// Replayed: the receiver had seen the key and answered with its first
	// answer (Idempotent-Replayed: true).
	Replayed bool `json:"replayed,omitempty"`
}

// StatusError is an answer other than 2xx. Wrapped with
// toolexec.NotPerformed when it is a definite refusal.
type StatusError struct {
	Status int
	// Body is the start of the answer's body, for logs and the model.
	Body string
}

// Error describes the answer.
func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("webhook: answered %d", e.Status)
	}
	return fmt.Sprintf("webhook: answered %d: %s", e.Status, e.Body)
}

// Sender posts notifications to one URL. It is safe for concurrent use.
type Sender struct {
	url    string
	client *http.Client
}

// NewSender validates the URL (http or https, with a host) and returns a
// Sender whose every Send is bounded by timeout (0 means DefaultTimeout).
func NewSender(rawURL string, timeout time.Duration) (*Sender, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("webhook: URL %q: want http://host[:port]/path or https://…", rawURL)
	}
	if timeout < 0 {
		return nil, fmt.Errorf("webhook: negative timeout %s", timeout)
	}
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return &Sender{url: u.String(), client: &http.Client{
		Timeout: timeout,
		// A redirect is an answer: the receiver did not perform the
		// effect where it was asked to.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// URL is the URL notifications are posted to.
func (s *Sender) URL() string { return s.url }

// Send posts body with Idempotency-Key: key and returns the Delivery as
// JSON. A definite refusal is wrapped with toolexec.NotPerformed; every
// other error leaves the outcome unknown (see the package documentation).
func (s *Sender) Send(ctx context.Context, key string, body []byte) (json.RawMessage, error) {
	if key == "" || len(key) > MaxKeyLen {
		return nil, toolexec.NotPerformed(fmt.Errorf("webhook: idempotency key empty or longer than %d bytes", MaxKeyLen))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, toolexec.NotPerformed(fmt.Errorf("webhook: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(KeyHeader, key)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes))
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		// The receiver performed it; a body cut short does not change that.
		d := Delivery{Status: code, Replayed: strings.EqualFold(resp.Header.Get(ReplayedHeader), "true")}
		if err == nil {
			var ans struct {
				Receipt string `json:"receipt"`
			}
			if json.Unmarshal(data, &ans) == nil {
				d.Receipt = ans.Receipt
			}
		}
		return json.Marshal(d)
	case code == http.StatusConflict:
		// In progress under this key: it may still be performed.
		return nil, &StatusError{Status: code, Body: snippet(data)}
	case code >= 300 && code < 500:
		return nil, toolexec.NotPerformed(&StatusError{Status: code, Body: snippet(data)})
	}
	return nil, &StatusError{Status: code, Body: snippet(data)}
}

// snippet is the start of an answer's body, on one line.
func snippet(b []byte) string {
	const n = 200
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > n {
		s = s[:n]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}

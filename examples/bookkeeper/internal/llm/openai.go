package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of OpenAIConfig.
const (
	// DefaultOpenAIBaseURL is the base URL used when OpenAIConfig.BaseURL
	// is empty.
	DefaultOpenAIBaseURL = "https://api.openai.com/v1"
	// DefaultOpenAITimeout is the per-attempt timeout used when
	// OpenAIConfig.Timeout is zero.
	DefaultOpenAITimeout = 60 * time.Second
	// DefaultOpenAIMaxRetries is the number of retries used when
	// OpenAIConfig.MaxRetries is zero.
	DefaultOpenAIMaxRetries = 2
	// DefaultOpenAIBackoffBase is the first retry delay used when
	// OpenAIConfig.BackoffBase is zero.
	DefaultOpenAIBackoffBase = 500 * time.Millisecond
	// DefaultOpenAIMaxBackoff bounds retry delays (including Retry-After)
	// when OpenAIConfig.MaxBackoff is zero.
	DefaultOpenAIMaxBackoff = 30 * time.Second
)

// maxResponseBytes bounds how much of a response body is read.
const maxResponseBytes = 8 << 20

// OpenAIConfig configures an OpenAIClient.
type OpenAIConfig struct {
	// BaseURL is the API root; "/chat/completions" is appended. Empty
	// means DefaultOpenAIBaseURL. Any OpenAI-compatible server works.
	BaseURL string
	// Model is the model name, e.g. "gpt-4o-mini". Required.
	Model string
	// APIKey is sent as "Authorization: Bearer <key>" when non-empty. It
	// never appears in errors.
	APIKey string
	// HTTPClient sends the requests. Nil means a client whose Timeout is
	// the per-attempt Timeout.
	HTTPClient *http.Client
	// Timeout bounds each attempt (request and reading the response).
	// Zero means DefaultOpenAITimeout.
	Timeout time.Duration
	// MaxRetries is how many times a failed attempt is retried (network
	// errors, timeouts, 429 and 5xx only). Zero means
	// DefaultOpenAIMaxRetries; a negative value disables retries.
	MaxRetries int
	// BackoffBase is the delay before the first retry; it doubles for each
	// further retry. Zero means DefaultOpenAIBackoffBase.
	BackoffBase time.Duration
	// MaxBackoff caps every retry delay, including one asked for by a
	// Retry-After header. Zero means DefaultOpenAIMaxBackoff.
	MaxBackoff time.Duration
}

// OpenAIClient is a Model backed by an OpenAI-compatible chat-completions
// endpoint. It is safe for concurrent use.
type OpenAIClient struct {
	endpoint    string
	model       string
	apiKey      string
	http        *http.Client
	timeout     time.Duration
	maxRetries  int
	backoffBase time.Duration
	maxBackoff  time.Duration
}

var _ Model = (*OpenAIClient)(nil)

// ErrBadResponse is wrapped by the errors returned for responses that
// cannot be understood (malformed JSON, no choices).
var ErrBadResponse = errors.New("llm: malformed chat completion response")

// APIError is an error response (HTTP status >= 400) from the API.
type APIError struct {
	// StatusCode is the HTTP status code.
	StatusCode int
	// Type is the error type reported by the API, e.g.
	// "invalid_request_error", if any.
	Type string
	// Code is the error code reported by the API, e.g.
	// "context_length_exceeded", if any.
	Code string
	// Message is the error message from the API, or the start of the
	// response body when it was not a JSON error. The API key is redacted.
	Message string
}

// Error implements error.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "llm: chat completion API error: status %d", e.StatusCode)
	if e.Type != "" {
		fmt.Fprintf(&b, " (%s)", e.Type)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " [%s]", e.Code)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Retryable reports whether the request may succeed if sent again
// (429 Too Many Requests and 5xx server errors).
func (e *APIError) Retryable() bool {
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}

// NewOpenAIClient validates cfg, fills in defaults and returns a client.
func NewOpenAIClient(cfg OpenAIConfig) (*OpenAIClient, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("llm: OpenAIConfig.Model is required")
	}
	base := strings.TrimSpace(cfg.BaseURL)
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("llm: OpenAIConfig.BaseURL %q is not an http(s) URL", base)
	}
	if cfg.Timeout < 0 || cfg.BackoffBase < 0 || cfg.MaxBackoff < 0 {
		return nil, errors.New("llm: OpenAIConfig durations must not be negative")
	}
	if strings.ContainsAny(cfg.APIKey, "\r\n") {
		return nil, errors.New("llm: OpenAIConfig.APIKey contains a line break")
	}
	c := &OpenAIClient{
		endpoint:    strings.TrimRight(base, "/") + "/chat/completions",
		model:       cfg.Model,
		apiKey:      cfg.APIKey,
		http:        cfg.HTTPClient,
		timeout:     cfg.Timeout,
		maxRetries:  cfg.MaxRetries,
		backoffBase: cfg.BackoffBase,
		maxBackoff:  cfg.MaxBackoff,
	}
	if c.timeout == 0 {
		c.timeout = DefaultOpenAITimeout
	}
	switch {
	case c.maxRetries == 0:
		c.maxRetries = DefaultOpenAIMaxRetries
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	if c.backoffBase == 0 {
		c.backoffBase = DefaultOpenAIBackoffBase
	}
	if c.maxBackoff == 0 {
		c.maxBackoff = DefaultOpenAIMaxBackoff
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: c.timeout}
	}
	return c, nil
}

// chatRequest is the body POSTed to /chat/completions.
type chatRequest struct {
	Model      string    `json:"model"`
	Messages   []Message `json:"messages"`
	Tools      []Tool    `json:"tools,omitempty"`
	ToolChoice string    `json:"tool_choice,omitempty"`
}

// wireMessage is a response message, decoded leniently: content may be a
// string, null or an array of text parts, and tool call arguments may be a
// string or a JSON object.
type wireMessage struct {
	Role      Role            `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

type chatResponse struct {
	Choices []struct {
		Message      wireMessage `json:"message"`
		FinishReason string      `json:"finish_reason"`
	} `json:"choices"`
	Error *apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

// Complete sends the conversation and tools to the chat-completions
// endpoint and returns choices[0].message.
//
// Network errors, per-attempt timeouts, 429 and 5xx responses are retried
// up to MaxRetries times with exponential back-off (BackoffBase doubling,
// capped by MaxBackoff); a Retry-After header replaces the computed delay,
// still capped by MaxBackoff. Other 4xx responses are returned at once as
// *APIError. When ctx is done Complete stops and returns an error
// wrapping ctx.Err().
func (c *OpenAIClient) Complete(ctx context.Context, req Request) (Response, error) {
	body := chatRequest{Model: c.model, Messages: req.Messages, Tools: req.Tools}
	if body.Messages == nil {
		body.Messages = []Message{}
	}
	if len(req.Tools) > 0 {
		body.ToolChoice = "auto"
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return Response{}, fmt.Errorf("llm: encoding chat completion request: %w", err)
	}
	attempts := c.maxRetries + 1
	var lastErr error
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			if err := sleepCtx(ctx, c.retryDelay(attempt, lastErr)); err != nil {
				return Response{}, fmt.Errorf("llm: chat completion cancelled while waiting to retry (last error: %v): %w", lastErr, err)
			}
		}
		resp, retryable, err := c.attempt(ctx, payload)
		if err == nil {
			return resp, nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return Response{}, fmt.Errorf("llm: chat completion: %w", ctxErr)
		}
		lastErr = err
		if !retryable {
			return Response{}, err
		}
	}
	if attempts == 1 {
		return Response{}, lastErr
	}
	return Response{}, fmt.Errorf("llm: chat completion failed after %d attempts: %w", attempts, lastErr)
}

// retryAfterError carries the delay a 429/5xx response asked for.
type retryAfterError struct {
	*APIError
	after time.Duration
}

// Unwrap returns the underlying *APIError.
func (e *retryAfterError) Unwrap() error { return e.APIError }

// retryDelay is the wait before attempt number attempt (1 = first retry).
func (c *OpenAIClient) retryDelay(attempt int, lastErr error) time.Duration {
	var ra *retryAfterError
	if errors.As(lastErr, &ra) {
		return min(ra.after, c.maxBackoff)
	}
	d := c.backoffBase
	for i := 1; i < attempt && d < c.maxBackoff; i++ {
		d *= 2
	}
	return min(d, c.maxBackoff)
}

// attempt performs one HTTP round trip. retryable reports whether a
// failure may be retried.
func (c *OpenAIClient) attempt(ctx context.Context, payload []byte) (resp Response, retryable bool, err error) {
	actx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	httpReq, err := http.NewRequestWithContext(actx, http.MethodPost, c.endpoint, bytes.NewReader(payload))
	if err != nil {
		return Response{}, false, fmt.Errorf("llm: building request: %w", err)
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "application/json")
	if c.apiKey != "" {
		httpReq.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	httpResp, err := c.http.Do(httpReq)
	if err != nil {
		return Response{}, true, c.wrapRedacted("llm: sending chat completion request", err)
	}
	defer httpResp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(httpResp.Body, maxResponseBytes))
	if err != nil {
		return Response{}, true, c.wrapRedacted("llm: reading chat completion response", err)
	}
	if httpResp.StatusCode >= 400 {
		apiErr := c.apiError(httpResp.StatusCode, data)
		if !apiErr.Retryable() {
			return Response{}, false, apiErr
		}
		if after, ok := parseRetryAfter(httpResp.Header.Get("Retry-After"), time.Now()); ok {
			return Response{}, true, &retryAfterError{APIError: apiErr, after: after}
		}
		return Response{}, true, apiErr
	}
	if httpResp.StatusCode < 200 || httpResp.StatusCode > 299 {
		return Response{}, false, fmt.Errorf("%w: unexpected HTTP status %d", ErrBadResponse, httpResp.StatusCode)
	}
	resp, err = c.decode(httpResp.StatusCode, data)
	return resp, false, err
}

// decode parses a successful response body.
func (c *OpenAIClient) decode(status int, data []byte) (Response, error) {
	var cr chatResponse
	if err := json.Unmarshal(data, &cr); err != nil {
		return Response{}, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	if cr.Error != nil && cr.Error.Message != "" {
		return Response{}, c.apiErrorFrom(status, cr.Error)
	}
	if len(cr.Choices) == 0 {
		return Response{}, fmt.Errorf("%w: no choices", ErrBadResponse)
	}
	wm := cr.Choices[0].Message
	msg := Message{Role: wm.Role}
	if msg.Role == "" {
		msg.Role = RoleAssistant
	}
	content, err := decodeContent(wm.Content)
	if err != nil {
		return Response{}, fmt.Errorf("%w: message content: %v", ErrBadResponse, err)
	}
	msg.Content = content
	for _, tc := range wm.ToolCalls {
		args, err := decodeArguments(tc.Function.Arguments)
		if err != nil {
			return Response{}, fmt.Errorf("%w: tool call %q arguments: %v", ErrBadResponse, tc.ID, err)
		}
		typ := tc.Type
		if typ == "" {
			typ = ToolCallTypeFunction
		}
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{
			ID:       tc.ID,
			Type:     typ,
			Function: FunctionCall{Name: tc.Function.Name, Arguments: args},
		})
	}
	return Response{Message: msg}, nil
}

func decodeContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func decodeArguments(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "{}", nil
	case raw[0] == '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	return string(raw), nil // already a JSON object
}

// apiError builds an APIError from an error response body.
func (c *OpenAIClient) apiError(status int, data []byte) *APIError {
	var body struct {
		Error *apiErrorBody `json:"error"`
	}
	if err := json.Unmarshal(data, &body); err == nil && body.Error != nil {
		return c.apiErrorFrom(status, body.Error)
	}
	msg := strings.TrimSpace(string(data))
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &APIError{StatusCode: status, Message: c.redact(truncate(msg, 300))}
}

func (c *OpenAIClient) apiErrorFrom(status int, b *apiErrorBody) *APIError {
	code := strings.Trim(string(bytes.TrimSpace(b.Code)), `"`)
	if code == "null" {
		code = ""
	}
	return &APIError{
		StatusCode: status,
		Type:       b.Type,
		Code:       code,
		Message:    c.redact(truncate(b.Message, 1000)),
	}
}

// redact removes the API key from s.
func (c *OpenAIClient) redact(s string) string {
	if c.apiKey == "" {
		return s
	}
	return strings.ReplaceAll(s, c.apiKey, "[REDACTED]")
}

// redactedError wraps a transport error; its message has the API key
// removed while errors.Is/As still see the cause.
type redactedError struct {
	msg string
	err error
}

// Error returns the redacted message.
func (e *redactedError) Error() string { return e.msg }

// Unwrap returns the original error.
func (e *redactedError) Unwrap() error { return e.err }

func (c *OpenAIClient) wrapRedacted(prefix string, err error) error {
	return &redactedError{msg: prefix + ": " + c.redact(err.Error()), err: err}
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an
// HTTP-date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs < 0 || secs != secs {
			return 0, false
		}
		if secs > 24*3600 {
			secs = 24 * 3600
		}
		return time.Duration(secs * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// sleepCtx waits for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

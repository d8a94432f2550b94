package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
)

// Stage is a point in the receiver's handling of one request, for Hook.
type Stage int

// Stages, in order.
const (
	// Arrived: a new key, marked in progress; the effect is not performed.
	Arrived Stage = iota + 1
	// Performed: the effect is recorded; the answer is not written yet.
	Performed
	// Answered: the answer is written and flushed.
	Answered
)

func (s Stage) String() string {
	switch s {
	case Arrived:
		return "arrived"
	case Performed:
		return "performed"
	case Answered:
		return "answered"
	}
	return fmt.Sprintf("Stage(%d)", int(s))
}

// Effect is one notification the receiver performed.
type Effect struct {
	Seq          int          `json:"seq"`     // 1, 2, … in the order performed
	Key          string       `json:"key"`     // its idempotency key
	Receipt      string       `json:"receipt"` // the receipt answered
	Notification Notification `json:"notification"`
	At           time.Time    `json:"at"`
}

// Stats counts what the receiver was asked and did.
type Stats struct {
	Requests  int `json:"requests"`  // POSTs received
	Effects   int `json:"effects"`   // effects performed (one per key at most)
	Replays   int `json:"replays"`   // a seen key answered with its first answer
	Conflicts int `json:"conflicts"` // 409: the key was still in progress
	Mismatch  int `json:"mismatch"`  // 422: a seen key with another body
	Invalid   int `json:"invalid"`   // 400: no key, bad body
	Abandoned int `json:"abandoned"` // the sender went away before the effect: not performed
}

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	// Delay is how long the receiver works on a new key before performing
	// it (it can be changed later with SetDelay).
	Delay time.Duration
	// Hook, when set, is called at each stage of a request with a new key,
	// in the request's goroutine: it may block (to hold the request) and
	// may do anything to the sender. An error at Arrived abandons the
	// request without performing it (answered 503).
	Hook func(stage Stage, key string) error
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Receiver is a webhook receiver, in memory, that performs each
// idempotency key's effect at most once (see the package documentation).
// It is safe for concurrent use.
type Receiver struct {
	cfg   ReceiverConfig
	log   *slog.Logger
	delay atomic.Int64

	mu      sync.Mutex
	keys    map[string]*keyState
	effects []Effect
	stats   Stats
}

type keyState struct {
	body   [32]byte // SHA-256 of the body first sent with the key
	done   bool     // the answer below is final
	status int
	answer []byte
}

// NewReceiver returns an empty Receiver.
func NewReceiver(cfg ReceiverConfig) *Receiver {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Receiver{cfg: cfg, log: cfg.Logger, keys: map[string]*keyState{}}
	r.delay.Store(int64(cfg.Delay))
	return r
}

// SetDelay changes how long the receiver works on a new key.
func (r *Receiver) SetDelay(d time.Duration) { r.delay.Store(int64(max(d, 0))) }

// Effects returns the effects performed so far, in order.
func (r *Receiver) Effects() []Effect {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Effect(nil), r.effects...)
}

// Stats returns the counts so far.
func (r *Receiver) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Seen reports what the receiver did with key: whether it has seen it,
// performed its effect, and written its answer.
func (r *Receiver) Seen(key string) (seen, performed, answered bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ks, ok := r.keys[key]
	if !ok {
		return false, false, false
	}
	return true, ks.done || ks.status != 0, ks.done
}

// Busy is the number of keys being processed now (neither performed and
// answered nor abandoned).
func (r *Receiver) Busy() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ks := range r.keys {
		if !ks.done {
			n++
		}
	}
	return n
}

// ServeHTTP handles the receiver's routes.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch {
	case req.URL.Path == "/healthz" && req.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	case req.URL.Path == "/effects" && req.Method == http.MethodGet:
		r.mu.Lock()
		out := struct {
			Effects []Effect `json:"effects"`
			Stats   Stats    `json:"stats"`
		}{append([]Effect{}, r.effects...), r.stats}
		r.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	case req.Method == http.MethodPost && req.URL.Path != "/effects" && req.URL.Path != "/healthz":
		r.receive(w, req)
	default:
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "POST a notification; GET /effects lists them")
	}
}

// receive handles one notification.
func (r *Receiver) receive(w http.ResponseWriter, req *http.Request) {
	key := req.Header.Get(KeyHeader)
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxBodyBytes))
	var n Notification
	switch {
	case err != nil:
		r.count(func(s *Stats) { s.Invalid++ })
		writeError(w, http.StatusBadRequest, "the body could not be read or is larger than 64 KiB")
		return
	case key == "" || len(key) > MaxKeyLen || strings.IndexFunc(key, unicode.IsControl) >= 0:
		r.count(func(s *Stats) { s.Invalid++ })
		writeError(w, http.StatusBadRequest, fmt.Sprintf("the %s header is required (1 to %d bytes, no control characters)", KeyHeader, MaxKeyLen))
		return
	case json.Unmarshal(body, &n) != nil || n.TransactionID == "":
		r.count(func(s *Stats) { s.Invalid++ })
		writeError(w, http.StatusBadRequest, "the body must be a JSON notification with a transaction_id")
		return
	}
	sum := sha256.Sum256(body)

	r.mu.Lock()
	r.stats.Requests++
	if ks, ok := r.keys[key]; ok {
		switch {
		case ks.body != sum:
			r.stats.Mismatch++
			r.mu.Unlock()
			writeError(w, http.StatusUnprocessableEntity, "this Idempotency-Key was used with another body")
		case !ks.done:
			r.stats.Conflicts++
			r.mu.Unlock()
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusConflict, "a request with this Idempotency-Key is still being processed")
		default:
			r.stats.Replays++
			status, answer := ks.status, ks.answer
			r.mu.Unlock()
			r.log.Info("webhook: key seen before: first answer again", "key", key)
			w.Header().Set(ReplayedHeader, "true")
			writeRaw(w, status, answer)
		}
		return
	}
	ks := &keyState{body: sum}
	r.keys[key] = ks
	r.mu.Unlock()

	// The work before the effect: the sender may die meanwhile.
	if err := r.hook(Arrived, key); err != nil || !r.wait(req.Context()) {
		r.abandon(key, ks)
		writeError(w, http.StatusServiceUnavailable, "not performed; retry with the same Idempotency-Key")
		return
	}

	r.mu.Lock()
	seq := len(r.effects) + 1
	receipt := fmt.Sprintf("r-%06d", seq)
	answer, _ := json.Marshal(map[string]string{"receipt": receipt, "transaction_id": n.TransactionID})
	r.effects = append(r.effects, Effect{Seq: seq, Key: key, Receipt: receipt, Notification: n, At: time.Now().UTC()})
	r.stats.Effects++
	ks.status, ks.answer = http.StatusOK, answer
	r.mu.Unlock()
	r.log.Info("webhook: effect performed", "seq", seq, "receipt", receipt, "key", key,
		"transaction", n.TransactionID, "amount", n.Amount, "type", n.Type)

	hookErr := r.hook(Performed, key)
	r.mu.Lock()
	ks.done = true // from now on the key is answered with this answer
	r.mu.Unlock()
	if hookErr != nil {
		writeError(w, http.StatusInternalServerError, "performed, but the answer failed")
	} else {
		writeRaw(w, http.StatusOK, answer)
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	_ = r.hook(Answered, key)
}

// wait works for the configured delay; false when the sender went away
// first (or had already gone).
func (r *Receiver) wait(ctx context.Context) bool {
	if d := time.Duration(r.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return ctx.Err() == nil
}

// abandon forgets a key whose effect was not performed, so that a retry
// with it performs it.
func (r *Receiver) abandon(key string, ks *keyState) {
	r.mu.Lock()
	if r.keys[key] == ks {
		delete(r.keys, key)
	}
	r.stats.Abandoned++
	r.mu.Unlock()
	r.log.Info("webhook: sender gone before the effect: not performed", "key", key)
}

func (r *Receiver) hook(s Stage, key string) error {
	if r.cfg.Hook == nil {
		return nil
	}
	return r.cfg.Hook(s, key)
}

func (r *Receiver) count(f func(*Stats)) {
	r.mu.Lock()
	f(&r.stats)
	r.mu.Unlock()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding failed"}`)
	}
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// ErrAbandon, returned by a Hook at Arrived, abandons the request.
var ErrAbandon = errors.New("webhook: abandoned by the hook")

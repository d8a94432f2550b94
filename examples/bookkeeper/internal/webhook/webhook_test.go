package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/webhook"
	"github.com/rowlease/rowlease/toolexec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func body(tx string) []byte {
	b, _ := json.Marshal(webhook.Notification{Event: webhook.EventBooked, TransactionID: tx, Type: "expense", Amount: "35.00",
		Category: "food", OccurDate: "2024-05-01", SessionID: "s", RequestID: "r-" + tx})
	return b
}

func newServer(t *testing.T, cfg webhook.ReceiverConfig) (*webhook.Receiver, *httptest.Server) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	r := webhook.NewReceiver(cfg)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

func sender(t *testing.T, url string, timeout time.Duration) *webhook.Sender {
	t.Helper()
	s, err := webhook.NewSender(url, timeout)
	require.NoError(t, err)
	return s
}

func delivery(t *testing.T, raw json.RawMessage) webhook.Delivery {
	t.Helper()
	var d webhook.Delivery
	require.NoError(t, json.Unmarshal(raw, &d))
	return d
}

// One key, sent three times (as a retry after a crash would): one effect,
// the first answer each time, the later ones marked replayed.
func TestOneEffectPerKey(t *testing.T) {
	r, srv := newServer(t, webhook.ReceiverConfig{})
	s := sender(t, srv.URL+"/hooks/booked", 0)
	ctx := context.Background()
	var got []webhook.Delivery
	for range 3 {
		out, err := s.Send(ctx, "key-1", body("t1"))
		require.NoError(t, err)
		got = append(got, delivery(t, out))
	}
	assert.Equal(t, webhook.Delivery{Status: 200, Receipt: "r-000001"}, got[0])
	assert.Equal(t, webhook.Delivery{Status: 200, Receipt: "r-000001", Replayed: true}, got[1])
	assert.Equal(t, got[1], got[2])

	out, err := s.Send(ctx, "key-2", body("t2"))
	require.NoError(t, err)
	assert.Equal(t, "r-000002", delivery(t, out).Receipt)

	effects := r.Effects()
	require.Len(t, effects, 2)
	assert.Equal(t, "key-1", effects[0].Key)
	assert.Equal(t, "t1", effects[0].Notification.TransactionID)
	assert.Equal(t, webhook.Stats{Requests: 4, Effects: 2, Replays: 2}, r.Stats())

	resp, err := http.Get(srv.URL + "/effects")
	require.NoError(t, err)
	defer resp.Body.Close()
	var list struct {
		Effects []webhook.Effect `json:"effects"`
		Stats   webhook.Stats    `json:"stats"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	assert.Len(t, list.Effects, 2)
	assert.Equal(t, 2, list.Stats.Effects)
}

// Refusals are NotPerformed; 409 (the key in progress), 5xx, a timeout
// and a dead server leave the outcome unknown (a plain error).
func TestSenderSortsAnswers(t *testing.T) {
	r, srv := newServer(t, webhook.ReceiverConfig{})
	s := sender(t, srv.URL, 0)
	ctx := context.Background()

	// 422: the key reused with another body.
	_, err := s.Send(ctx, "k", body("t1"))
	require.NoError(t, err)
	_, err = s.Send(ctx, "k", body("t2"))
	require.ErrorIs(t, err, toolexec.ErrNotPerformed)
	var se *webhook.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusUnprocessableEntity, se.Status)

	// 400: not a notification.
	_, err = s.Send(ctx, "k2", []byte(`{"hello":1}`))
	require.ErrorIs(t, err, toolexec.ErrNotPerformed)
	// An empty key is refused before sending.
	_, err = s.Send(ctx, "", body("t3"))
	require.ErrorIs(t, err, toolexec.ErrNotPerformed)
	assert.Equal(t, 1, r.Stats().Effects)

	answer := func(status int) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if status == http.StatusFound {
				w.Header().Set("Location", "/elsewhere")
			}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, "no\nthanks")
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	for _, tc := range []struct {
		status      int
		notPerfomed bool
	}{{409, false}, {500, false}, {503, false}, {302, true}, {404, true}, {429, true}} {
		_, err := sender(t, answer(tc.status).URL, 0).Send(ctx, "k", body("t"))
		require.Error(t, err, tc.status)
		assert.Equal(t, tc.notPerfomed, errors.Is(err, toolexec.ErrNotPerformed), tc.status)
		require.ErrorAs(t, err, &se, tc.status)
		assert.Equal(t, tc.status, se.Status)
		assert.Contains(t, err.Error(), "no thanks")
	}

	// Nobody listening.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, err = sender(t, "http://"+addr, 0).Send(ctx, "k", body("t"))
	require.Error(t, err)
	assert.NotErrorIs(t, err, toolexec.ErrNotPerformed)

	// Too slow for the sender's timeout: unknown, and the receiver,
	// seeing its sender gone before the effect, does not perform it.
	slowR, slow := newServer(t, webhook.ReceiverConfig{Delay: time.Minute})
	_, err = sender(t, slow.URL, 50*time.Millisecond).Send(ctx, "k", body("t"))
	require.Error(t, err)
	assert.NotErrorIs(t, err, toolexec.ErrNotPerformed)
	waitFor(t, func() bool { return slowR.Stats().Abandoned == 1 })
	assert.Zero(t, slowR.Stats().Effects)
}

func TestNewSenderValidates(t *testing.T) {
	for _, u := range []string{"", "ftp://x", "http://", "localhost:9090", "://"} {
		_, err := webhook.NewSender(u, 0)
		assert.Error(t, err, u)
	}
	_, err := webhook.NewSender("http://x", -time.Second)
	assert.Error(t, err)
	s, err := webhook.NewSender("https://hooks.example/booked", 0)
	require.NoError(t, err)
	assert.Equal(t, "https://hooks.example/booked", s.URL())
}

// A second request with a key still in progress gets 409 (unknown to the
// sender), and the first one's effect happens once.
func TestKeyInProgress(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	r, srv := newServer(t, webhook.ReceiverConfig{Hook: func(stage webhook.Stage, key string) error {
		if stage == webhook.Arrived {
			close(arrived)
			<-release
		}
		return nil
	}})
	s := sender(t, srv.URL, 0)
	first := make(chan error, 1)
	go func() {
		_, err := s.Send(context.Background(), "k", body("t"))
		first <- err
	}()
	<-arrived
	_, err := s.Send(context.Background(), "k", body("t"))
	var se *webhook.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusConflict, se.Status)
	assert.NotErrorIs(t, err, toolexec.ErrNotPerformed)
	assert.Equal(t, 1, r.Busy())
	close(release)
	require.NoError(t, <-first)
	assert.Zero(t, r.Busy())
	assert.Equal(t, webhook.Stats{Requests: 2, Effects: 1, Conflicts: 1}, r.Stats())
}

// A hook that abandons at Arrived: nothing performed, and the key is free
// for a retry, which performs it.
func TestAbandonedKeyCanBeRetried(t *testing.T) {
	var mu sync.Mutex
	abandon := true
	var stages []string
	r, srv := newServer(t, webhook.ReceiverConfig{Hook: func(stage webhook.Stage, key string) error {
		mu.Lock()
		defer mu.Unlock()
		stages = append(stages, stage.String())
		if stage == webhook.Arrived && abandon {
			abandon = false
			return webhook.ErrAbandon
		}
		return nil
	}})
	s := sender(t, srv.URL, 0)
	_, err := s.Send(context.Background(), "k", body("t"))
	var se *webhook.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusServiceUnavailable, se.Status, "unknown to the sender")
	seen, performed, _ := r.Seen("k")
	assert.False(t, seen || performed)
	out, err := s.Send(context.Background(), "k", body("t"))
	require.NoError(t, err)
	assert.False(t, delivery(t, out).Replayed)
	seen, performed, answered := r.Seen("k")
	assert.True(t, seen && performed && answered)
	assert.Equal(t, webhook.Stats{Requests: 2, Effects: 1, Abandoned: 1}, r.Stats())
	mu.Lock()
	assert.Equal(t, []string{"arrived", "arrived", "performed", "answered"}, stages)
	mu.Unlock()
}

func TestReceiverRefusesBadRequests(t *testing.T) {
	r, srv := newServer(t, webhook.ReceiverConfig{})
	post := func(key, b string) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(b))
		require.NoError(t, err)
		if key != "" {
			req.Header.Set(webhook.KeyHeader, key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, 400, post("", string(body("t"))))
	assert.Equal(t, 400, post(strings.Repeat("k", webhook.MaxKeyLen+1), string(body("t"))))
	assert.Equal(t, 400, post("k", "not json"))
	assert.Equal(t, 400, post("k", `{"transaction_id":""}`))
	assert.Equal(t, 400, post("k", strings.Repeat(" ", webhook.MaxBodyBytes+1)))
	resp, err := http.Get(srv.URL + "/anything")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, webhook.Stats{Invalid: 5}, r.Stats())
	assert.Empty(t, r.Effects())
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out")
		time.Sleep(5 * time.Millisecond)
	}
}

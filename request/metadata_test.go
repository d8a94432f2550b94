package request

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// TestMessageMetadata: a message's metadata is stored with its request
// (also when it is queued), handed to the agent (also to the run that
// starts the queued message), shown by Status, and part of the
// fingerprint: the same object in another order is the same message,
// other metadata is ErrFingerprintMismatch, and a message without
// metadata keeps the fingerprint it had. Metadata over Config.MaxMetadata,
// or that is not one JSON object, is refused before any SQL.
func TestMessageMetadata(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		var mu sync.Mutex
		seen := map[string]string{} // client request id → the metadata its run got
		agent := func(ctx context.Context, run *Run) (Answer, error) {
			mu.Lock()
			seen[run.ClientRequestID()] = string(run.Metadata())
			mu.Unlock()
			return Answer{Reply: "ok"}, nil
		}
		r := e.newRunner(t, func(c *Config) { c.Agent, c.MaxMetadata = agent, 256 })
		meta := json.RawMessage(`{"user":"u-1","attachments":["file-9"],"model":{"temperature":0.2}}`)
		msg := Message{SessionKey: "s", ClientRequestID: "c1", Content: "hello", Metadata: meta}
		_, err := r.Handle(ctx, msg, nil)
		require.NoError(t, err)
		assert.JSONEq(t, string(meta), seen["c1"], "the agent got it")
		st, err := r.Status(ctx, "s", "c1")
		require.NoError(t, err)
		assert.JSONEq(t, string(meta), string(st.Metadata), "Status shows it")

		// The same object, members in another order and other spaces: a
		// replay. Other metadata, or none: another message.
		same := msg
		same.Metadata = json.RawMessage(`{ "model": {"temperature": 0.2}, "attachments": ["file-9"], "user": "u-1" }`)
		out, err := r.Handle(ctx, same, nil)
		require.NoError(t, err)
		assert.True(t, out.Replayed)
		other := msg
		other.Metadata = json.RawMessage(`{"user":"u-2","attachments":["file-9"],"model":{"temperature":0.2}}`)
		_, err = r.Handle(ctx, other, nil)
		assert.ErrorIs(t, err, ErrFingerprintMismatch)
		none := msg
		none.Metadata = nil
		_, err = r.Handle(ctx, none, nil)
		assert.ErrorIs(t, err, ErrFingerprintMismatch)

		// Without metadata the fingerprint is the content's SHA-256, as
		// before: rows stored earlier still match their resends.
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c2", Content: "plain"}, nil)
		require.NoError(t, err)
		var fp string
		var stored *string
		require.NoError(t, db.QueryRowContext(ctx, db.Rebind("SELECT fingerprint, metadata FROM rowlease_request WHERE client_request_id = ?"), "c2").Scan(&fp, &stored))
		sum := sha256.Sum256([]byte("plain"))
		assert.Equal(t, hex.EncodeToString(sum[:]), fp)
		assert.Nil(t, stored, "no metadata: NULL")
		st, err = r.Status(ctx, "s", "c2")
		require.NoError(t, err)
		assert.Nil(t, st.Metadata)

		// A queued message keeps its metadata, and the run that starts it
		// from the queue gets it.
		b := newBlocker(&recorder{})
		blocked := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "q", ClientRequestID: "running", Content: "x"}, b.agent)
			blocked <- err
		}()
		<-b.started
		qmeta := json.RawMessage(`{"user":"u-3"}`)
		out, err = r.Handle(ctx, Message{SessionKey: "q", ClientRequestID: "queued", Content: "y", Metadata: qmeta, OnBusy: Queue}, nil)
		require.NoError(t, err)
		require.True(t, out.Queued)
		st, err = r.Status(ctx, "q", "queued")
		require.NoError(t, err)
		assert.Equal(t, StateQueued, st.State)
		assert.JSONEq(t, string(qmeta), string(st.Metadata))
		close(b.release)
		require.NoError(t, <-blocked)
		st, err = r.Wait(ctx, "q", "queued")
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State, st.Error)
		mu.Lock()
		assert.JSONEq(t, string(qmeta), seen["queued"], "the queued run got it")
		mu.Unlock()

		// Refused before any SQL.
		rows := requestRows(t, e)
		big := json.RawMessage(`{"note":"` + strings.Repeat("x", 300) + `"}`)
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c3", Content: "x", Metadata: big}, nil)
		var tooBig *MetadataTooLargeError
		require.ErrorAs(t, err, &tooBig)
		assert.Equal(t, MetadataTooLargeError{Size: len(big), Limit: 256}, *tooBig)
		assert.ErrorAs(t, err, new(*MetadataTooLargeError))
		assert.ErrorIs(t, err, lease.ErrInvalid)
		for _, bad := range []string{`{"a":`, `["a"]`, `"text"`, `{"a":1} {}`, `{"a":1,"a":2}`} {
			_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c3", Content: "x", Metadata: json.RawMessage(bad)}, nil)
			var ve *engine.ValidationError
			require.ErrorAs(t, err, &ve, bad)
			assert.Equal(t, "metadata", ve.Field, bad)
		}
		assert.Equal(t, rows, requestRows(t, e), "nothing written")
	})
}

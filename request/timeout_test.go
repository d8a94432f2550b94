package request

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// Item: Handle's own waits that time out say which wait it was and what
// to do, and still match context.DeadlineExceeded. On SQLite another
// connection holds the write lock when the agent has answered: the final
// mark waits for it past Config.ReleaseTimeout, with a background context.
func TestFinalMarkTimeoutNamesTheWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "timeout.db")
	db, err := sqlx.Open("sqlite", testdb.SQLiteDSN(path))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	// Another process's writer on the same file.
	other, err := sqlx.Open("sqlite", testdb.SQLiteDSN(path))
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	ctx := context.Background()
	require.NoError(t, schema.Apply(ctx, db, lease.SQLite))
	r, err := New(Config{DB: db, Dialect: lease.SQLite, TTL: 30 * time.Second, ReleaseTimeout: 200 * time.Millisecond,
		Session: sessionConfigAutoCreate()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })

	var hold *sqlx.Tx
	t.Cleanup(func() {
		if hold != nil {
			_ = hold.Rollback()
		}
	})
	_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, func(ctx context.Context, run *Run) (Answer, error) {
		var err error
		// BEGIN IMMEDIATE: the write lock, kept after the run's context ends.
		hold, err = other.BeginTxx(context.Background(), nil)
		if err != nil {
			return Answer{}, err
		}
		return Answer{Reply: "done"}, nil
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var te *engine.TimeoutError
	require.ErrorAs(t, err, &te, "%v", err)
	assert.Equal(t, "request.Config.ReleaseTimeout", te.Setting)
	assert.Equal(t, 200*time.Millisecond, te.Limit)
	msg := err.Error()
	t.Log(msg)
	assert.Contains(t, msg, "final mark")
	assert.Contains(t, msg, "ReleaseTimeout")
	assert.Contains(t, msg, "same client request id", "what to do")
	assert.False(t, errors.Is(err, ErrAgentFailed))

	// The advice holds: once the lock is free, the resend is answered
	// (the run's lease is still live, so 409 in flight, never a second
	// run at once).
	require.NoError(t, hold.Rollback())
	hold = nil
	_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, func(ctx context.Context, run *Run) (Answer, error) {
		return Answer{Reply: "again"}, nil
	})
	assert.ErrorIs(t, err, ErrInFlight)
}

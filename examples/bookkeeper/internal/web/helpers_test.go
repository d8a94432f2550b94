package web_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/internal/testdb"
	"github.com/rowlease/rowlease/lease"
)

// TestMain fails the run if a goroutine is left behind.
func TestMain(m *testing.M) { testdb.Main(m) }

// testLatency is the rule model's delay per round: a message takes two
// rounds, long enough for a second device to find it running.
const testLatency = time.Second

// bookkeeper serves the bookkeeper on db in-process, with the rule model
// at testLatency per round.
func bookkeeper(t *testing.T, db *sqlx.DB) (*httptest.Server, *store.Store) {
	t.Helper()
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	st := store.New(db.DB, d)
	svc, err := service.New(context.Background(), st, service.Config{LLMLatency: testLatency,
		LeaseTTL: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ts := httptest.NewServer(svc.API)
	t.Cleanup(func() {
		svc.API.Close()
		ts.Close()
	})
	return ts, st
}

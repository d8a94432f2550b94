package heartbeat_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/lease"
)

// TestOneTTL (issue 8, item 14): the TTL a lease is renewed for is the
// grant's own (ForLease takes it from the grant); a lease whose TTL is
// not the supervisor's Config.TTL is refused before any SQL: the work is
// cancelled at once with a *LostError whose reason is ReasonInvalid.
func TestOneTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
	cfg := heartbeat.Config{Interval: 50 * time.Millisecond, TTL: ttl}
	cases := []struct {
		name     string
		grantTTL time.Duration // the TTL the lease is acquired for
		refused  bool
	}{
		{"the grant's TTL is Config.TTL", ttl, false},
		{"the grant disagrees with Config.TTL", 2 * ttl, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T, e conformance.Env) {
				ctx := ctxT(t)
				g, err := e.Lease.Acquire(ctx, e.DB, "k", "worker", tc.grantTTL)
				require.NoError(t, err)
				var c countdb.Counter
				lr := heartbeat.ForLease("request", e.Lease, c.Wrap(e.DB), g)
				s, work, rec := start(t, cfg, lr)
				if !tc.refused {
					rec.wait(t, "a renewal", is(heartbeat.EventRenewed, "request"))
					require.NoError(t, work.Err())
					assert.Equal(t, tc.grantTTL, lr.Grant().TTL)
					assert.True(t, lr.Grant().Deadline.After(g.Deadline), "the renewed grant is read from the renewer")
					return
				}
				waitDone(t, work)
				le := lostError(t, context.Cause(work))
				assert.Equal(t, heartbeat.ReasonInvalid, le.Reason)
				assert.ErrorIs(t, le, lease.ErrInvalid)
				var ve *engine.ValidationError
				require.ErrorAs(t, le, &ve)
				assert.Equal(t, "ttl", ve.Field)
				assert.Same(t, le, lostError(t, s.Lost()))
				assert.Zero(t, c.Count(), "no SQL")
			})
		})
	}
}

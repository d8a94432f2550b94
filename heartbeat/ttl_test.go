package heartbeat_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/conformance"
	"github.com/rowlease/rowlease/internal/countdb"
	"github.com/rowlease/rowlease/lease"
)

// TestOneTTL (issue 8, item 14): the TTL a lease is renewed for is the
// grant's own. ForLease with ttl zero takes it from the grant; a ttl that
// disagrees with the grant's, or a lease whose TTL is not the
// supervisor's Config.TTL, is refused before any SQL: the work is
// cancelled at once with a *LostError whose reason is ReasonInvalid.
func TestOneTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
	cfg := heartbeat.Config{Interval: 50 * time.Millisecond, TTL: ttl}
	cases := []struct {
		name     string
		grantTTL time.Duration // the TTL the lease is acquired for
		given    time.Duration // ForLease's ttl
		refused  bool
	}{
		{"zero means the grant's", ttl, 0, false},
		{"the same", ttl, ttl, false},
		{"ForLease disagrees with the grant", ttl, 2 * ttl, true},
		{"the grant disagrees with Config.TTL", 2 * ttl, 2 * ttl, true},
		{"zero, and the grant disagrees with Config.TTL", 2 * ttl, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T, e conformance.Env) {
				ctx := ctxT(t)
				g, err := e.Lease.Acquire(ctx, e.DB, "k", "worker", tc.grantTTL)
				require.NoError(t, err)
				var c countdb.Counter
				lr := heartbeat.ForLease("request", e.Lease, c.Wrap(e.DB), g, tc.given)
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
				var ve *lease.ValidationError
				require.ErrorAs(t, le, &ve)
				assert.Equal(t, "ttl", ve.Field)
				assert.Same(t, le, lostError(t, s.Lost()))
				assert.Zero(t, c.Count(), "no SQL")
			})
		})
	}
}

// TestForLeaseRenewRefusesDisagreeingTTL: used without a supervisor, a
// LeaseRenewer whose ttl disagrees with its grant's refuses to renew.
func TestForLeaseRenewRefusesDisagreeingTTL(t *testing.T) {
	eachDialect(t, func(t *testing.T, e conformance.Env) {
		ctx := ctxT(t)
		g, err := e.Lease.Acquire(ctx, e.DB, "k", "worker", time.Second)
		require.NoError(t, err)
		var c countdb.Counter
		_, err = heartbeat.ForLease("request", e.Lease, c.Wrap(e.DB), g, 2*time.Second).Renew(ctx)
		assert.ErrorIs(t, err, lease.ErrInvalid)
		assert.Zero(t, c.Count())
	})
}

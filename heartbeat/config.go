package heartbeat

import (
	"log/slog"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// Config configures a Supervisor.
type Config struct {
	// Interval is the time between renewals of a lease. Required: above
	// zero and at most TTL/3, so that two renewals can fail before the
	// trust deadline.
	Interval time.Duration
	// TTL is the TTL the leases are renewed for (lease.MinTTL to
	// lease.MaxTTL). Required; it bounds Interval. Add refuses a
	// LeaseRenewer whose TTL (its grant's) is another: the work context is
	// then cancelled at once with a *LostError, ReasonInvalid. (The
	// supervisor itself goes by the deadlines the Renewers report.)
	TTL time.Duration
	// Clock is the local clock the supervisor reads. It must be the clock
	// the supervised leases compute their trust deadlines with
	// (lease.Options.Clock), or the supervisor compares instants of two
	// clocks. Nil means time.Now, as for a lease. It must carry a
	// monotonic reading, as time.Now does. Timers still wait real
	// durations: the differences between this clock's readings.
	Clock lease.Clock
	// Logger receives renewals (Debug), retries (Warn) and losses (Error).
	// Nil means slog.Default(), as everywhere in rowlease. Tokens are never
	// logged.
	Logger *slog.Logger
	// OnEvent, when set, is called from the supervisor goroutine on every
	// renewal, retry and loss, for tests and metrics. It must return
	// quickly and must not call Stop.
	OnEvent func(Event)
	// Batcher, when set, renews the *LeaseRenewer leases (ForLease) of this
	// Supervisor together with those of every other Supervisor that uses
	// it, one statement per table per round (see Batcher); the Supervisor
	// renews other Renewers itself and keeps every other duty. Its
	// Interval must not exceed Interval. Stop and remove take the leases
	// back from the Batcher at once without waiting for a round in flight
	// (its result for them is ignored), as for a renewal of their own.
	Batcher *Batcher
}

// Validate reports a Config that New would reject, as an error
// matching lease.ErrInvalid.
func (c Config) Validate() error {
	if err := engine.ValidateTTL(c.TTL); err != nil {
		return err
	}
	switch {
	case c.Interval <= 0:
		return &engine.ValidationError{Package: "heartbeat", Field: "interval", Reason: "must be positive"}
	case c.Interval > c.TTL/3:
		return &engine.ValidationError{Package: "heartbeat", Field: "interval", Reason: "above TTL/3 (" + (c.TTL / 3).String() + ")"}
	case c.Batcher != nil && c.Batcher.Interval() > c.Interval:
		return &engine.ValidationError{Package: "heartbeat", Field: "batcher", Reason: "its interval " + c.Batcher.Interval().String() + " is above the supervisor's " + c.Interval.String()}
	}
	return nil
}

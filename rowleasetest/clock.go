package rowleasetest

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Clock is a lease.Clock that a test can move forward: it reads
// time.Now() plus an offset, which Advance increases. Its readings carry
// the monotonic clock (as lease.Clock requires) and it runs at the rate
// of real time between advances. The zero value reads real time. It is
// safe for concurrent use.
//
// Give it to the leases (lease.Options.Clock; for a Runner,
// request.Config.Lease.Clock or WithClock, which the heartbeat reads too).
// What moving it changes, and what it does not:
//
//   - It moves the local trust deadlines: a grant's Deadline is the clock's
//     reading at the send time + TTL − safety margin, and Grant.Trusted,
//     the heartbeat's due renewals and its deadline check all compare with
//     this clock. Advanced past a trust deadline, the supervisor records
//     the loss (heartbeat.ReasonDeadline) and cancels the work; Handle then
//     returns request.ErrTakenOver.
//   - It does not move the database clock, which alone decides expiry: a
//     lease held in the database stays held for its TTL of real time,
//     however far the Clock is advanced, and another holder still gets
//     lease.ErrHeld. To test a takeover, use a short TTL and let it pass
//     (Crash leaves a run's leases to expire, as a crash would).
//   - It does not make timers fire sooner. The heartbeat waits on real
//     timers set before the advance, so it sees the new time at its next
//     wake-up: within one heartbeat interval of real time (request's
//     default is TTL/3 = 10 s; set a short TTL in a test that advances past
//     a deadline). Wait for the work context to be done, not a duration.
type Clock struct {
	offset atomic.Int64 // nanoseconds ahead of time.Now
}

// Now is time.Now() plus the total advanced so far.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Advance moves the clock forward by d. A negative d panics: a clock that
// goes back would make a deadline already passed trusted again.
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("rowleasetest: Clock.Advance(%v): negative duration", d))
	}
	c.offset.Add(int64(d))
}

// Offset is the total advanced so far: how far the clock is ahead of
// real time.
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

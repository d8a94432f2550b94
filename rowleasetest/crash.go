package rowleasetest

import (
	"github.com/rowlease/rowlease/internal/crash"
	"github.com/rowlease/rowlease/request"
)

// Crash makes run behave as if its process had died at this point: the
// heartbeat stops, and Handle returns without writing or releasing
// anything, so the run's session, request and tool leases stay held until
// their TTL expires and another run (a resend, or a Started Runner's
// dispatcher) takes the request over. Call it from the agent; the agent
// should return soon after (what it writes afterwards is refused once
// its leases are lost). It exists for tests only: production code has no
// way to abandon a run.
func Crash(run *request.Run) {
	if run == nil {
		return
	}
	crash.Fire(run)
}

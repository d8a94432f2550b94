// Package crash lets rowleasetest simulate a crashed process without
// putting the simulation on request's production API: package request
// sets Abandon when it is initialised, and rowleasetest.Crash calls it.
package crash

// Abandon stops a *request.Run's heartbeat and makes its Handle return
// without writing or releasing anything, as if the process had died. It
// is set by package request (whose *Run it takes, as any, since this
// package cannot import request).
var Abandon func(run any)

package toolexec

import "github.com/rowlease/rowlease/internal/engine"

// releaseTimeout describes the clean-up write after a call failed
// (afterFailure, giveBack): marking it error or giving its lease back,
// bounded by ExecOptions.ReleaseTimeout whatever the caller's context.
func releaseTimeout(o ExecOptions) engine.TimeoutError {
	return engine.TimeoutError{
		Wait:  "toolexec: recording the failed tool call (marking it error, or giving its lease back)",
		Limit: o.ReleaseTimeout, Setting: "toolexec.ExecOptions.ReleaseTimeout, which request.Config.ReleaseTimeout sets",
		Advice: "the call stays held until its lease expires (its TTL): a retry before then finds it busy (lease.ErrHeld), after it runs the call again. " +
			"Raise ReleaseTimeout if the database is often this slow",
	}
}

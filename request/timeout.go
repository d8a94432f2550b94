package request

import "github.com/rowlease/rowlease/internal/engine"

// markTimeout describes the final mark's wait (mark), bounded by
// Config.ReleaseTimeout whatever the caller's context.
func (r *Runner) markTimeout() engine.TimeoutError {
	return engine.TimeoutError{
		Wait:  "request: the final mark of the request (its answer or failure, and the session's release)",
		Limit: r.cfg.ReleaseTimeout, Setting: "request.Config.ReleaseTimeout",
		Advice: "the outcome may not be stored: resend the message with the same client request id; it gets the stored outcome, " +
			"or 409 request-in-flight until the run's lease expires (Config.TTL) and then runs again, reusing its committed tool calls. " +
			"If the database is often this slow (on SQLite, many writers queued for its one write lock), raise ReleaseTimeout",
	}
}

// readTimeout describes one read of Wait, bounded by Config.ReleaseTimeout.
func (r *Runner) readTimeout() engine.TimeoutError {
	return engine.TimeoutError{
		Wait:  "request: Wait's read of the request's status",
		Limit: r.cfg.ReleaseTimeout, Setting: "request.Config.ReleaseTimeout",
		Advice: "nothing changed; call Wait (or Status) again, and raise ReleaseTimeout if the database is often this slow",
	}
}

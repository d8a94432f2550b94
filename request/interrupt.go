package request

import (
	"context"
	"time"

	"github.com/rowlease/rowlease/heartbeat"
)

// interruptWatch renews the request's lease, as the LeaseRenewer it
// embeds does, and after each renewal reads the request's interrupted_by
// column: once another message has asked the request to stop, it cancels
// the run's work context with an *InterruptedError. The read is one more
// statement per heartbeat interval; the run therefore learns of an
// interrupt within one interval. A failed read is ignored (the next
// renewal reads again); a lost lease is reported as the LeaseRenewer
// reports it.
type interruptWatch struct {
	*heartbeat.LeaseRenewer[string]
	r      *Runner
	run    *Run
	cancel context.CancelCauseFunc
}

// Renew renews the request's lease, then reads whether it was asked to
// stop.
func (w *interruptWatch) Renew(ctx context.Context) (time.Time, error) {
	d, err := w.LeaseRenewer.Renew(ctx)
	if err != nil {
		return d, err
	}
	var by string
	if err := w.run.flowDB().QueryRowContext(ctx, w.r.q.flagReadQ, w.run.id).Scan(&by); err == nil && by != "" {
		w.cancel(&InterruptedError{By: by})
	}
	return d, nil
}

// settleInterrupted marks interrupted a processing request that was asked
// to stop and whose run is gone (its lease free or expired): one
// statement, which changes nothing while the run is alive. It reports
// whether it marked the request.
func (r *Runner) settleInterrupted(ctx context.Context, sessionKey, id string) (bool, error) {
	res, err := r.db.ExecContext(ctx, r.q.settleOneQ, sessionKey, id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

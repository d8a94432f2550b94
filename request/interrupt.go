package request

import (
	"context"
	"sync"
	"time"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/lease"
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
	if err := w.run.flowDB().QueryRowContext(ctx, w.r.sql.flagRead, w.run.id).Scan(&by); err == nil && by != "" {
		w.cancel(&InterruptedError{By: by})
	}
	return d, nil
}

// watching are the runs of this Runner whose interrupts the Batcher's
// round reads (checkInterrupts), by request id.
type watching struct {
	mu   sync.Mutex
	runs map[string]*watchedRun
}

// watchedRun is one registration of watchInterrupts: a run's own entry,
// told apart from a later run's of the same request by its address.
type watchedRun struct{ cancel context.CancelCauseFunc }

// watchInterrupts registers a run for checkInterrupts; the returned func
// unregisters it. A later run of the same request in this process (it took
// the request over once this run's leases lapsed) replaces the
// registration, and this run's stop then leaves the later one in place.
func (r *Runner) watchInterrupts(id string, cancel context.CancelCauseFunc) (stop func()) {
	w := &watchedRun{cancel: cancel}
	r.watch.mu.Lock()
	if r.watch.runs == nil {
		r.watch.runs = map[string]*watchedRun{}
	}
	r.watch.runs[id] = w
	r.watch.mu.Unlock()
	return func() {
		r.watch.mu.Lock()
		if r.watch.runs[id] == w {
			delete(r.watch.runs, id)
		}
		r.watch.mu.Unlock()
	}
}

// checkInterrupts runs after each round of the Runner's Batcher: one read
// finds every run of this process that another message asked to stop, and
// cancels its work context with an *InterruptedError — within one
// heartbeat interval, at one statement per interval for all the runs (the
// per-run check of interruptWatch would cost one per run). It reads on db,
// the Batcher's kept connection, so that it does not wait for one behind
// the runs' transactions (r.db when the Batcher has none).
func (r *Runner) checkInterrupts(ctx context.Context, db lease.DB) {
	r.watch.mu.Lock()
	n := len(r.watch.runs)
	r.watch.mu.Unlock()
	if n == 0 {
		return
	}
	if db == nil {
		db = r.db
	}
	rows, err := db.QueryContext(ctx, r.sql.flagsRead)
	if err != nil {
		r.log.Warn("rowlease: reading interrupt requests failed; retried next round", "err", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, by string
		if rows.Scan(&id, &by) != nil {
			continue
		}
		r.watch.mu.Lock()
		w := r.watch.runs[id]
		r.watch.mu.Unlock()
		if w != nil && by != "" {
			w.cancel(&InterruptedError{By: by})
		}
	}
}

// settleInterrupted marks interrupted a processing request that was asked
// to stop and whose run is gone (its lease free or expired): one
// statement, which changes nothing while the run is alive. It reports
// whether it marked the request.
func (r *Runner) settleInterrupted(ctx context.Context, sessionKey, id string) (bool, error) {
	n, err := r.exec(ctx, r.sql.settleOne, sessionKey, id)
	return n == 1, err
}

package request

import (
	"context"
	"fmt"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
)

// Defaults of RetentionConfig.
const (
	DefaultSweepBatch = 100
	// DefaultSweepInterval is the longest default interval between two
	// sweeps (see RetentionConfig.Interval).
	DefaultSweepInterval = time.Hour
)

// RetentionConfig configures the sweeper that Start runs. The zero value
// runs no sweeper: finished requests are kept.
type RetentionConfig struct {
	// After is the retention: a request that finished (succeeded, failed
	// or interrupted) at least After ago, by the database clock, is
	// swept. 0 means no sweeper.
	After time.Duration
	// Interval is the time between two sweeps (jittered); 0 means
	// After/10, at least a second and at most DefaultSweepInterval.
	Interval time.Duration
	// Batch bounds the requests swept in one transaction; 0 means
	// DefaultSweepBatch.
	Batch int
}

func (c *RetentionConfig) fill() error {
	if c.After < 0 {
		return invalid("retention", "negative")
	}
	if c.Batch == 0 {
		c.Batch = DefaultSweepBatch
	}
	if c.Batch < 1 || c.Batch > 10000 {
		return invalid("sweep batch", "not between 1 and 10000")
	}
	if c.Interval == 0 {
		c.Interval = min(max(c.After/10, time.Second), DefaultSweepInterval)
	}
	if c.Interval < time.Millisecond {
		return invalid("sweep interval", "below 1ms")
	}
	return nil
}

// Sweep turns the requests that finished (succeeded, failed, were
// interrupted or cancelled) at least olderThan ago, by the database clock, into
// tombstones and deletes their tool executions and recorded steps, in batches of
// RetentionConfig.Batch requests, one short transaction each, until none
// is left. It returns how many it swept.
//
// A tombstone is the request's row with status expired and its reply,
// result, error and message emptied, and its rows in the step table
// deleted: it keeps the session key, the client
// request id, the fingerprint and the generation, so a resend of the id
// gets ErrExpired and never runs again (a fingerprint that differs still
// gets ErrFingerprintMismatch). Tombstones are kept; delete rows with
// status 'expired' yourself only if a resend of their ids may then run as
// new messages.
//
// Sweep never touches a queued or processing request, nor a request whose
// lease is held; the statement that makes a tombstone checks the status
// and the age again, so a failed request resent meanwhile (and running
// again) is skipped. Tool executions of a swept request are deleted,
// except those in status started (an external effect whose outcome was
// never recorded: reconcile them yourself) and those whose lease is live.
func (r *Runner) Sweep(ctx context.Context, olderThan time.Duration) (int, error) {
	if olderThan < 0 {
		return 0, invalid("retention", "negative")
	}
	total := 0
	for {
		n, more, err := r.sweepBatch(ctx, olderThan)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

// sweepBatch sweeps one batch; more reports a full batch (there may be
// more to sweep).
func (r *Runner) sweepBatch(ctx context.Context, olderThan time.Duration) (n int, more bool, err error) {
	batch := r.cfg.Retention.Batch
	micros := olderThan.Microseconds()
	rows, err := r.db.QueryContext(ctx, r.sql.sweepIDs, micros, batch)
	if err != nil {
		return 0, false, fmt.Errorf("request: reading requests to sweep: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			_ = rows.Close()
			return 0, false, err
		}
		ids = append(ids, id)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return 0, false, err
	}
	if len(ids) == 0 {
		return 0, false, nil
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	args := make([]any, 0, len(ids)+1)
	for _, id := range ids {
		args = append(args, id)
	}
	args = append(args, micros)
	res, err := tx.ExecContext(ctx, r.sweepStatement(engine.TableOf(r.req), len(ids)), args...)
	if err != nil {
		return 0, false, fmt.Errorf("request: sweeping requests: %w", err)
	}
	swept, err := res.RowsAffected()
	if err != nil {
		return 0, false, err
	}
	if _, err = r.tools.DeleteExpired(ctx, tx, engine.TableOf(r.req), ids); err != nil {
		return 0, false, fmt.Errorf("request: deleting swept tool executions: %w", err)
	}
	stepArgs := append(append(make([]any, 0, 2*len(ids)), args[:len(ids)]...), args[:len(ids)]...)
	if _, err = tx.ExecContext(ctx, r.sql.sweepSteps(len(ids)), stepArgs...); err != nil {
		return 0, false, fmt.Errorf("request: deleting swept steps: %w", err)
	}
	if err = tx.Commit(); err != nil {
		return 0, false, err
	}
	return int(swept), len(ids) == batch, nil
}

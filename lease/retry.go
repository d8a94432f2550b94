package lease

import (
	"context"
	"math/rand/v2"
	"time"
)

// MaxAttempts bounds the runs of one lease statement that a database
// rolled back as a deadlock or serialization victim, or — on a
// multi-primary cluster (Galera) — as a certification failure (MySQL error
// 1213, PostgreSQL 40001 or 40P01). Such a statement took no effect, so on
// a pool, where it ran in autocommit, running it again is safe. Inside a
// transaction (a *sql.Tx, a *sql.Conn, a FlowDB routing into one) the whole
// transaction was rolled back, and the error is returned at once.
const MaxAttempts = 4

// Backoff waits before attempt+1 of an operation that failed transiently:
// a jittered delay that doubles from 5ms (between half and one and a half
// times it). It reports false, at once, when ctx ends first.
func Backoff(ctx context.Context, attempt int) bool {
	d := (5 * time.Millisecond) << min(attempt-1, 10)
	d = d/2 + time.Duration(rand.Int64N(int64(d)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

package lease

import (
	"context"

	"github.com/rowlease/rowlease/internal/retry"
)

// MaxAttempts bounds the runs of one lease statement that a database
// rolled back as a deadlock or serialization victim, or — on a
// multi-primary cluster (Galera) — as a certification failure (MySQL error
// 1213, PostgreSQL 40001 or 40P01). Such a statement took no effect, so on
// a pool, where it ran in autocommit, running it again is safe. Inside a
// transaction (a *sql.Tx, a *sql.Conn, a FlowDB routing into one) the whole
// transaction was rolled back, and the error is returned at once.
//
// Deprecated: the bound belongs to rowlease's internal retry package,
// which every package of the module uses; this constant will be removed.
const MaxAttempts = retry.MaxAttempts

// Backoff waits before attempt+1 of an operation that failed transiently:
// a jittered delay that doubles from 5ms (between half and one and a half
// times it). It reports false, at once, when ctx ends first.
//
// Deprecated: the back-off belongs to rowlease's internal retry package,
// which every package of the module uses; this function will be removed.
// Decide what to run again with IsRetryable and IsTransient, and wait as
// your program waits elsewhere.
func Backoff(ctx context.Context, attempt int) bool { return retry.Backoff(ctx, attempt) }

package toolexec

import (
	"fmt"

	"github.com/rowlease/rowlease/internal/engine"
)

// OutsideTxError is a side effect on SQLite that returned SQLite's busy
// error while its own transaction held the write lock (ExecOptions.Flow
// set, as request.Run sets it): a write through another connection (the
// pool) than Exec.Tx, which could only wait for the busy timeout and
// fail. Nothing committed, the call is not marked failed and is left
// free; running it again fails the same way. It is none of lease's kinds:
// the tool's bug (500 in httpapi). Fix the tool: write through x.Tx.
//
// It does not unwrap to the database's error, so that lease.IsTransient
// and lease.IsUnavailable are false of it: that error says "busy, try
// again", which is not true here.
type OutsideTxError struct {
	Tool string
	// Err is the busy error the side effect returned, for logs.
	Err error
}

// Error describes the failure and the fix; it never contains a token.
func (e *OutsideTxError) Error() string {
	return fmt.Sprintf("tool %s: the side effect wrote through another connection while its own transaction held SQLite's write lock: write through x.Tx; nothing committed: %v", e.Tool, e.Err)
}

// outsideTx returns an *OutsideTxError when ferr, a side effect's error,
// is SQLite's busy and the side effect's transaction holds the write lock:
// routed into by the flow (engine.FlowDB.InTx, true only on SQLite while a
// fenced transaction that took the write lock is open). Inside that
// transaction x.Tx never waits for the lock, so the busy error came from
// another connection. Otherwise it returns nil.
func outsideTx(tool string, o ExecOptions, ferr error) error {
	if o.Flow == nil || !engine.IsRetryable(ferr) || !o.Flow.InTx() {
		return nil
	}
	// On SQLite IsRetryable is SQLITE_BUSY and its extended codes.
	return &OutsideTxError{Tool: tool, Err: ferr}
}

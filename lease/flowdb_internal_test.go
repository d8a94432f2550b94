package lease

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"
)

// A renewal routed into a flow's transaction that ended meanwhile is
// refused by database/sql before it runs (sql.ErrTxDone); the FlowDB then
// sends it to the pool instead of failing it.
func TestFlowDBFallsBackToThePoolWhenTheTransactionEnded(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "f.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (n INTEGER)"); err != nil {
		t.Fatal(err)
	}
	f := NewFlowDB(db, SQLite)
	for _, end := range []func(*sql.Tx) error{(*sql.Tx).Commit, (*sql.Tx).Rollback} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ft := f.enter(tx)
		if _, err := f.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
			t.Fatalf("inside the transaction: %v", err)
		}
		if err := end(tx); err != nil {
			t.Fatal(err)
		}
		// Still entered: the statement is routed to the ended transaction.
		if _, err := f.ExecContext(ctx, "INSERT INTO t VALUES (2)"); err != nil {
			t.Fatalf("exec after the end: %v", err)
		}
		var n int
		if err := f.QueryRowContext(ctx, "SELECT COUNT(*) FROM t WHERE n = 2").Scan(&n); err != nil {
			t.Fatalf("query row after the end: %v", err)
		}
		rows, err := f.QueryContext(ctx, "SELECT n FROM t")
		if err != nil {
			t.Fatalf("query after the end: %v", err)
		}
		rows.Close()
		ft.finish()
	}
	var ones, twos int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t WHERE n = 1").Scan(&ones); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t WHERE n = 2").Scan(&twos); err != nil {
		t.Fatal(err)
	}
	if ones != 1 || twos != 2 {
		t.Fatalf("rows: %d ones (want 1: the committed one), %d twos (want 2: both on the pool)", ones, twos)
	}
}

package engine

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // registers "sqlite3" (cgo)
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

// A renewer routed into a flow's transaction hears how it ended: after
// the commit, or — when it rolls back, here because its context ended —
// while the transaction still holds the write lock, so that nobody can
// take the lease over before the flow knows its renewal is gone. Whatever
// the DSN's transaction mode, the transaction holds the lock from its
// start, before anything is routed into it.
func TestFlowRouteHearsTheEndBeforeTheLockIsFree(t *testing.T) {
	for name, c := range map[string]struct{ driver, query, noWait string }{
		"modernc/deferred":  {"sqlite", "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)", "?_pragma=busy_timeout(0)"},
		"modernc/immediate": {"sqlite", "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate", "?_pragma=busy_timeout(0)"},
		"mattn/deferred":    {"sqlite3", "?_busy_timeout=10000&_journal_mode=WAL", "?_busy_timeout=0"},
		"mattn/immediate":   {"sqlite3", "?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate", "?_busy_timeout=0"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "r.db")
			db, err := sql.Open(c.driver, "file:"+path+c.query)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			// Another writer, which never waits for the lock (the same
			// driver: two SQLite libraries in one process do not see each
			// other's locks).
			other, err := sql.Open(c.driver, "file:"+path+c.noWait)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if _, err := db.ExecContext(ctx, "CREATE TABLE t (k TEXT PRIMARY KEY, holder TEXT, token TEXT, expires_at INTEGER, generation INTEGER NOT NULL DEFAULT 0)"); err != nil {
				t.Fatal(err)
			}
			l, err := New[string](SQLite, MustTable("t", Columns{Key: "k", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation"}), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := l.Ensure(ctx, db, "a", CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			g, err := l.Acquire(ctx, db, "a", "h", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			otherWrites := func() error {
				_, err := other.ExecContext(ctx, "UPDATE t SET holder = holder WHERE k = 'none'")
				return err
			}
			f := NewFlowDB(db, SQLite)

			for _, commit := range []bool{true, false} {
				tctx, cancel := context.WithCancel(ctx)
				type ending struct {
					committed bool
					lockHeld  bool
				}
				ends := make(chan ending, 1)
				err := RunFenced(tctx, db, FencedTx{Fences: []Fence{l.Fence("a", g)}, Flow: f}, func(tx *sql.Tx) error {
					if err := otherWrites(); !IsTransient(err) {
						t.Errorf("commit=%v: another writer inside the transaction: %v, want SQLITE_BUSY", commit, err)
					}
					rt := f.Route()
					if rt.Tx() == nil {
						t.Fatalf("commit=%v: not routed into the open transaction", commit)
					}
					if _, err := l.Renew(ctx, rt.DB(), g, time.Minute); err != nil {
						t.Fatal(err)
					}
					rt.OnEnd(func(committed bool) { ends <- ending{committed, IsTransient(otherWrites())} }, nil)
					rt.Done()
					if !commit {
						cancel()
						<-tctx.Done()
						return tctx.Err()
					}
					return nil
				})
				cancel()
				got := <-ends
				if commit {
					if err != nil || !got.committed || got.lockHeld {
						t.Fatalf("commit: err %v, heard committed=%v, lock still held=%v", err, got.committed, got.lockHeld)
					}
				} else {
					if !errors.Is(err, context.Canceled) || got.committed || !got.lockHeld {
						t.Fatalf("rollback: err %v, heard committed=%v, lock still held=%v (want the end heard while it is)", err, got.committed, got.lockHeld)
					}
				}
				if f.Route().Tx() != nil {
					t.Fatal("still routed after the end")
				}
			}
		})
	}
}

package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/rowlease/rowlease/lease"
)

// Example leases a row of a SQLite table: two workers compete for one job,
// the winner renews and releases, and the other takes over with the next
// fencing generation.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "lease-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// The settings the package doc asks for on SQLite: a busy timeout,
	// WAL, and transactions that take the write lock at BEGIN. (Without
	// the first two, the first operation logs a warning.)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "jobs.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	// The lease columns live in the application's own table. On SQLite the
	// expiry is an integer: microseconds since the Unix epoch.
	_, err = db.ExecContext(ctx, `CREATE TABLE job (
		name       TEXT PRIMARY KEY,
		owner      TEXT,
		token      TEXT,
		expires_at INTEGER,
		generation INTEGER NOT NULL DEFAULT 0)`)
	if err != nil {
		log.Fatal(err)
	}
	table, err := lease.NewTable("job", lease.Columns{
		Key: "name", Holder: "owner", Token: "token", ExpiresAt: "expires_at", Generation: "generation",
	})
	if err != nil {
		log.Fatal(err)
	}
	jobs, err := lease.New[string](lease.SQLite, table, lease.Options{})
	if err != nil {
		log.Fatal(err)
	}

	// Make sure the row exists, free.
	if err := jobs.Ensure(ctx, db, "nightly-report", lease.CreateOptions{}); err != nil {
		log.Fatal(err)
	}

	g, err := jobs.Acquire(ctx, db, "nightly-report", "worker-1", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-1 holds generation", g.Generation)
	fmt.Println("the token prints as", g.Token)

	_, err = jobs.Acquire(ctx, db, "nightly-report", "worker-2", 30*time.Second)
	fmt.Println("worker-2 gets ErrHeld:", errors.Is(err, lease.ErrHeld))
	var conflict *lease.ConflictError
	if errors.As(err, &conflict) {
		fmt.Println("held by", conflict.Holder, "at generation", conflict.Generation)
	}

	// Renew before the trust deadline; the generation stays.
	g, err = jobs.Renew(ctx, db, g, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("renewed, generation", g.Generation, "trusted:", g.Trusted(time.Now()))

	if err := jobs.Release(ctx, db, g); err != nil {
		log.Fatal(err)
	}
	g2, err := jobs.Acquire(ctx, db, "nightly-report", "worker-2", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-2 holds generation", g2.Generation)

	// worker-1's old grant no longer matches: it must stop.
	_, err = jobs.Renew(ctx, db, g, 30*time.Second)
	fmt.Println("worker-1 renew gets ErrLost:", errors.Is(err, lease.ErrLost))

	// Output:
	// worker-1 holds generation 1
	// the token prints as [redacted]
	// worker-2 gets ErrHeld: true
	// held by worker-1 at generation 1
	// renewed, generation 1 trusted: true
	// worker-2 holds generation 2
	// worker-1 renew gets ErrLost: true
}

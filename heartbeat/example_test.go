package heartbeat_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// ExampleHold keeps a lease on a row of the application's own table for
// the whole of a job, in one call: acquire (waiting while another worker
// holds it), renew every Interval, cancel the job's context on loss,
// release at the end.
func ExampleHold() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "hold-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "jobs.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE job (
		name TEXT PRIMARY KEY, owner TEXT, token TEXT, expires_at INTEGER, generation INTEGER NOT NULL DEFAULT 0)`); err != nil {
		log.Fatal(err)
	}
	jobs, err := lease.New[string](lease.SQLite, engine.MustTable("job", lease.Columns{
		Key: "name", Holder: "owner", Token: "token", ExpiresAt: "expires_at", Generation: "generation",
	}), lease.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if err := jobs.Ensure(ctx, db, "nightly-report", lease.CreateOptions{}); err != nil {
		log.Fatal(err)
	}

	err = heartbeat.Hold(ctx, jobs, db, "nightly-report", "worker-1", heartbeat.HoldOptions{
		TTL:  3 * time.Second,                                      // renewed every second
		Wait: &lease.WaitOptions{MaxDelay: 500 * time.Millisecond}, // wait while someone else holds it
	}, func(ctx context.Context, g lease.Grant[string]) error {
		// ctx is cancelled as soon as the lease is lost: stop then.
		fmt.Println("working with fencing generation", g.Generation)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	st, err := jobs.Inspect(ctx, db, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held after the job:", st.Held)
	// Output:
	// working with fencing generation 1
	// held after the job: false
}

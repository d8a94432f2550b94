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

// Example_ownTable puts leases on an application's existing jobs table
// with an integer key: lock columns are added to it, its status column
// becomes the lease's state. A worker claims a queued job (another worker
// takes the next one), writes its side effect under the lease's fence, and
// marks the job done — releasing the lease in the same statement.
func Example_ownTable() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jobs-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	for _, stmt := range []string{
		// The application's table, with rows already in it.
		`CREATE TABLE jobs (
			id     INTEGER PRIMARY KEY,
			kind   TEXT NOT NULL,
			status TEXT NOT NULL DEFAULT 'queued',
			result TEXT)`,
		`INSERT INTO jobs (id, kind) VALUES (1, 'invoice'), (2, 'report'), (3, 'invoice')`,
		`CREATE TABLE invoice (job_id INTEGER NOT NULL, total TEXT NOT NULL)`,
		// The lock columns (MySQL: lock_expires_at DATETIME(6); PostgreSQL:
		// timestamptz; SQLite: INTEGER microseconds since the epoch).
		`ALTER TABLE jobs ADD COLUMN locked_by TEXT`,
		`ALTER TABLE jobs ADD COLUMN lock_token TEXT`,
		`ALTER TABLE jobs ADD COLUMN lock_expires_at INTEGER`,
		`ALTER TABLE jobs ADD COLUMN lock_generation INTEGER NOT NULL DEFAULT 0`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			log.Fatal(err)
		}
	}
	table, err := lease.NewTable("jobs", lease.Columns{
		Key: "id", Holder: "locked_by", Token: "lock_token", ExpiresAt: "lock_expires_at",
		Generation: "lock_generation", State: "status",
	})
	if err != nil {
		log.Fatal(err)
	}
	jobs, err := lease.New[int64](lease.SQLite, table, lease.Options{})
	if err != nil {
		log.Fatal(err)
	}

	// Claim job 1 only while it is queued, and mark it running in the same
	// statement.
	claim := lease.AcquireOptions{InStates: []string{"queued"}, SetState: "running"}
	g, err := jobs.AcquireWith(ctx, db, 1, "worker-1", 30*time.Second, claim)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-1 claimed job", g.Key, "generation", g.Generation)

	// The state is checked before the holder: a running job is not
	// claimable, whoever holds it.
	// ErrState says so; Inspect reads the state it is in.
	refused := func(err error) {
		if errors.Is(err, lease.ErrState) {
			st, err := jobs.Inspect(ctx, db, 1)
			if err != nil {
				log.Fatal(err)
			}
			fmt.Println("worker-2 on job 1: refused, state", st.State)
		}
	}
	_, err = jobs.AcquireWith(ctx, db, 1, "worker-2", 30*time.Second, claim)
	refused(err)
	// Any other job is free for it.
	g2, err := jobs.AcquireWith(ctx, db, 3, "worker-2", 30*time.Second, claim)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-2 claimed job", g2.Key)

	// The side effect commits only if worker-1 still holds job 1.
	err = lease.RunFenced(ctx, db, []lease.Fence{jobs.Fence("job", g)}, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO invoice (job_id, total) VALUES (?, '35.00')", g.Key)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	// Done, with its result, and the lease released: one statement.
	if _, err := jobs.Transition(ctx, db, g, lease.ChangeOptions{
		From: []string{"running"}, To: "done", Set: []lease.Assignment{lease.Set("result", "invoice 35.00")},
	}); err != nil {
		log.Fatal(err)
	}

	// A done job is free, but no longer claimable.
	_, err = jobs.AcquireWith(ctx, db, 1, "worker-2", 30*time.Second, claim)
	refused(err)

	rows, err := db.QueryContext(ctx, "SELECT id, status, COALESCE(result, '-'), COALESCE(locked_by, '-'), lock_generation FROM jobs ORDER BY id")
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, gen int64
		var status, result, owner string
		if err := rows.Scan(&id, &status, &result, &owner, &gen); err != nil {
			log.Fatal(err)
		}
		fmt.Println(id, status, result, owner, gen)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// worker-1 claimed job 1 generation 1
	// worker-2 on job 1: refused, state running
	// worker-2 claimed job 3
	// worker-2 on job 1: refused, state done
	// 1 done invoice 35.00 - 1
	// 2 queued - - 0
	// 3 running - worker-2 1
}

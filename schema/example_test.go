package schema_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the embedded SQLite driver, registered as "sqlite"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// Apply creates the lock tables on a new SQLite file; a second call
// changes nothing.
func ExampleApply() {
	dir, err := os.MkdirTemp("", "rowlease-schema")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", schema.SQLiteDSN(filepath.Join(dir, "app.db")))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	ctx := context.Background()
	if err := schema.Apply(ctx, db, lease.SQLite); err != nil {
		log.Fatal(err)
	}
	if err := schema.Apply(ctx, db, lease.SQLite); err != nil { // idempotent
		log.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, "SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'rowlease_%' ORDER BY name")
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			log.Fatal(err)
		}
		fmt.Println(name)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// rowlease_request
	// rowlease_session
	// rowlease_step
	// rowlease_tool_execution
}

// LeaseColumnsDDL adds the lease columns to a table of your own.
func ExampleLeaseColumnsDDL() {
	jobs := engine.MustTable("jobs", lease.Columns{Key: "id", Holder: "lock_holder", Token: "lock_token",
		ExpiresAt: "lock_expires_at", Generation: "lock_generation"})
	stmts, err := schema.LeaseColumnsDDL(lease.Postgres, jobs)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range stmts {
		fmt.Println(s) // run each with db.ExecContext, once
	}
	// Output:
	// ALTER TABLE "jobs" ADD COLUMN "lock_holder" VARCHAR(191) NULL, ADD COLUMN "lock_token" VARCHAR(36) NULL, ADD COLUMN "lock_expires_at" TIMESTAMPTZ NULL, ADD COLUMN "lock_generation" BIGINT NOT NULL DEFAULT 0
}

// Package conformance holds the lease conformance suite: one set of tests
// that runs unchanged on every dialect. Each test gets its own isolated
// database from testdb, so the suite runs in parallel.
package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/rowlease/rowlease/internal/engine"
)

// ItemTable is the name of the table the suite leases.
const ItemTable = "lease_item"

// ItemColumns are its lease columns.
var ItemColumns = engine.Columns{
	Key: "item_key", Holder: "holder", Token: "token", ExpiresAt: "expires_at",
	Generation: "generation", State: "state", UpdatedAt: "updated_at",
}

// ItemDDL is the suite's table in each dialect: the lease columns plus a
// state, a free-text note and an updated_at stamp.
var ItemDDL = map[engine.Dialect]string{
	engine.MySQL: "CREATE TABLE lease_item (item_key VARCHAR(191) NOT NULL PRIMARY KEY, holder VARCHAR(191) NULL, " +
		"token CHAR(36) NULL, expires_at DATETIME(6) NULL, generation BIGINT NOT NULL DEFAULT 0, " +
		"state VARCHAR(16) NOT NULL DEFAULT 'processing', note VARCHAR(255) NULL, updated_at DATETIME(6) NULL) " +
		"ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
	engine.Postgres: "CREATE TABLE lease_item (item_key VARCHAR(191) NOT NULL PRIMARY KEY, holder VARCHAR(191) NULL, " +
		"token CHAR(36) NULL, expires_at TIMESTAMPTZ NULL, generation BIGINT NOT NULL DEFAULT 0, " +
		"state VARCHAR(16) NOT NULL DEFAULT 'processing', note VARCHAR(255) NULL, updated_at TIMESTAMPTZ NULL)",
	engine.SQLite: "CREATE TABLE lease_item (item_key TEXT NOT NULL PRIMARY KEY, holder TEXT NULL, " +
		"token TEXT NULL, expires_at INTEGER NULL, generation INTEGER NOT NULL DEFAULT 0, " +
		"state TEXT NOT NULL DEFAULT 'processing', note TEXT NULL, updated_at INTEGER NULL)",
}

// Env is one test's database, dialect and lease on the item table.
type Env struct {
	DB      *sqlx.DB
	Dialect engine.Dialect
	Lease   *engine.Lease[string]
}

// Setup creates the item table on db and returns the test's environment.
func Setup(t testing.TB, db *sqlx.DB, opts engine.Options) Env {
	t.Helper()
	d, err := engine.DetectDialect(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, ItemDDL[d]); err != nil {
		t.Fatalf("create %s: %v", ItemTable, err)
	}
	l, err := engine.New[string](d, engine.MustTable(ItemTable, ItemColumns), opts)
	if err != nil {
		t.Fatal(err)
	}
	return Env{DB: db, Dialect: d, Lease: l}
}

// Row is a raw read of one item row.
type Row struct {
	Holder     *string `db:"holder"`
	Token      *string `db:"token"`
	Generation int64   `db:"generation"`
	State      string  `db:"state"`
	Note       *string `db:"note"`
	Expires    *string `db:"expires"`
}

// ReadRow reads the raw row, for before/after comparisons.
func (e Env) ReadRow(t testing.TB, key string) Row {
	t.Helper()
	return e.ReadRowOf(t, ItemTable, key)
}

// ReadRowOf is ReadRow on another table made like the item table (see
// ItemLike).
func (e Env) ReadRowOf(t testing.TB, table, key string) Row {
	t.Helper()
	var r Row
	q := e.DB.Rebind("SELECT holder, token, generation, state, note, CAST(expires_at AS CHAR(40)) AS expires FROM " + table + " WHERE item_key = ?")
	if e.Dialect == engine.Postgres {
		q = e.DB.Rebind("SELECT holder, token, generation, state, note, CAST(expires_at AS TEXT) AS expires FROM " + table + " WHERE item_key = ?")
	}
	if err := e.DB.Get(&r, q, key); err != nil {
		t.Fatalf("read row %q: %v", key, err)
	}
	return r
}

// Insert adds a free row.
func (e Env) Insert(t testing.TB, key string) {
	t.Helper()
	if err := e.Lease.Ensure(context.Background(), e.DB, key, engine.CreateOptions{}); err != nil {
		t.Fatalf("ensure %q: %v", key, err)
	}
}

// WaitFree polls the database clock until key's lease is no longer held,
// failing after limit. It waits on the database's own judgement of expiry,
// not on a local sleep of the TTL.
func (e Env) WaitFree(t testing.TB, key string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		st, err := e.Lease.Inspect(context.Background(), e.DB, key)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease on %q still held after %s (remaining %s)", key, limit, st.Remaining)
		}
		wait := st.Remaining
		if wait > 5*time.Millisecond {
			wait = 5 * time.Millisecond
		}
		timer := time.NewTimer(wait + time.Millisecond)
		<-timer.C
	}
}

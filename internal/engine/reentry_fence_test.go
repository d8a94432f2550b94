package engine_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestFenceRefusesStaleGenerationOfReusedToken: a holder's token is
// granted again after someone else held the lease in between (a reentry
// that finds the row free is a new grant, generation+1, under the same
// token). A copy of the holder's first grant — say, in a side effect that
// started before the takeover — must not pass the fence: a takeover
// happened since its generation. Found by harness/chaos (porcupine: a
// fenced write with generation 8 committed while the row was at 10).
func TestFenceRefusesStaleGenerationOfReusedToken(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		d, err := engine.DetectDialect(db)
		if err != nil {
			t.Fatal(err)
		}
		ts := "INTEGER"
		switch d {
		case engine.MySQL:
			ts = "DATETIME(6)"
		case engine.Postgres:
			ts = "TIMESTAMPTZ"
		}
		for _, q := range []string{
			"CREATE TABLE rf (k VARCHAR(64) NOT NULL PRIMARY KEY, holder VARCHAR(191) NULL, token VARCHAR(36) NULL, expires_at " + ts + " NULL, generation BIGINT NOT NULL DEFAULT 0)",
			"CREATE TABLE rf_effect (id INTEGER NOT NULL PRIMARY KEY)",
			"INSERT INTO rf (k) VALUES ('k')",
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		l, err := engine.New[string](d, engine.MustTable("rf", engine.Columns{Key: "k", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation"}), engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		a1, err := l.Acquire(ctx, db, "k", "a", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		past := map[engine.Dialect]string{engine.MySQL: "'2000-01-01 00:00:00'", engine.Postgres: "TIMESTAMPTZ '2000-01-01 00:00:00+00'", engine.SQLite: "946684800000000"}[d]
		if _, err := db.ExecContext(ctx, "UPDATE rf SET expires_at = "+past); err != nil { // a's lease expires
			t.Fatal(err)
		}
		b, err := l.Acquire(ctx, db, "k", "b", time.Hour) // b takes it over
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx, db, b); err != nil {
			t.Fatal(err)
		}
		a3, err := l.AcquireWith(ctx, db, "k", "a", time.Hour, engine.AcquireOptions{Token: a1.Token}) // a re-enters: a new grant
		if err != nil {
			t.Fatal(err)
		}
		if a3.Generation != a1.Generation+2 {
			t.Fatalf("generation after the re-entry: %d, want %d", a3.Generation, a1.Generation+2)
		}
		err = engine.WithFences(ctx, db, []engine.Fence{l.Fence("lease", a1)}, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO rf_effect (id) VALUES (1)")
			return err
		})
		if !errors.Is(err, engine.ErrLost) {
			t.Fatalf("a fenced write with the grant of generation %d, after b's generation %d: %v, want lost", a1.Generation, b.Generation, err)
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM rf_effect").Scan(&n); err != nil || n != 0 {
			t.Fatalf("the stale write committed (%d rows, %v)", n, err)
		}
		// The current grant still passes.
		if err := engine.WithFences(ctx, db, []engine.Fence{l.Fence("lease", a3)}, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO rf_effect (id) VALUES (2)")
			return err
		}); err != nil {
			t.Fatalf("the current grant: %v", err)
		}
	})
}

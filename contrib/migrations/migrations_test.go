package migrations_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/pressly/goose/v3"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// TestMain fails the run if a tool leaves a goroutine behind.
func TestMain(m *testing.M) { testdb.Main(m) }

// eachDialect runs fn on a fresh database of every dialect. On MySQL the
// pool has multiStatements=true, which golang-migrate needs (goose does
// not, and does not mind).
func eachDialect(t *testing.T, fn func(t *testing.T, d lease.Dialect, db *sql.DB)) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			db := testdb.OpenWith(t, d, func(driver, dsn string) (*sql.DB, error) {
				if d == lease.MySQL {
					cfg, err := gomysql.ParseDSN(dsn)
					if err != nil {
						return nil, err
					}
					cfg.MultiStatements = true
					dsn = cfg.FormatDSN()
				}
				return sql.Open(driver, dsn)
			})
			fn(t, d, db.DB)
		})
	}
}

var lockTables = []string{schema.SessionTable, schema.RequestTable, schema.ToolExecutionTable, schema.StepTable}

// tablesExist reports, for each lock table, whether it can be read.
func tablesExist(t *testing.T, db *sql.DB) []bool {
	t.Helper()
	var out []bool
	for _, table := range lockTables {
		var n int
		out = append(out, db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+table).Scan(&n) == nil)
	}
	return out
}

// runMessage runs one message whose agent calls a tool outside the
// database: its execution is recorded as 'started' first, which the
// CHECK of migration 2 allows and that of migration 1 refuses.
func runMessage(t *testing.T, db *sql.DB) {
	t.Helper()
	tools := toolexec.NewRegistry()
	if err := tools.RegisterExternal("notify", func(context.Context, toolexec.External) (json.RawMessage, error) {
		return json.RawMessage(`{"sent":true}`), nil
	}, toolexec.ExternalOptions{}); err != nil {
		t.Fatal(err)
	}
	runner, err := request.New(request.Config{DB: db, Tools: tools, Session: session.Config{AutoCreate: true}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := runner.Handle(t.Context(), request.Message{SessionKey: "s", ClientRequestID: "m", Content: "hi"},
		func(ctx context.Context, run *request.Run) (request.Answer, error) {
			res, err := run.CallTool(ctx, "notify", json.RawMessage(`{}`))
			if err != nil {
				return request.Answer{}, err
			}
			return request.Answer{Reply: string(res.Output)}, nil
		})
	if err != nil {
		t.Fatalf("a message on the migrated tables: %v", err)
	}
	if out.Reply != `{"sent":true}` {
		t.Fatalf("reply %q", out.Reply)
	}
}

func allEqual(got []bool, want bool) bool {
	for _, g := range got {
		if g != want {
			return false
		}
	}
	return true
}

// TestGoose applies goose's migrations up, uses the tables, and takes
// them down again, on every dialect.
func TestGoose(t *testing.T) {
	dialects := map[lease.Dialect]goose.Dialect{
		lease.SQLite: goose.DialectSQLite3, lease.MySQL: goose.DialectMySQL, lease.Postgres: goose.DialectPostgres,
	}
	eachDialect(t, func(t *testing.T, d lease.Dialect, db *sql.DB) {
		ctx := t.Context()
		fsys, err := schema.Migrations(d, "goose")
		if err != nil {
			t.Fatal(err)
		}
		p, err := goose.NewProvider(dialects[d], db, fsys)
		if err != nil {
			t.Fatal(err)
		}
		sources := p.ListSources()
		if len(sources) < 2 {
			t.Fatalf("%d goose migrations", len(sources))
		}
		results, err := p.Up(ctx)
		if err != nil {
			t.Fatalf("up: %v", err)
		}
		if len(results) != len(sources) {
			t.Errorf("up applied %d of %d migrations", len(results), len(sources))
		}
		v, err := p.GetDBVersion(ctx)
		if err != nil || v != sources[len(sources)-1].Version {
			t.Fatalf("version %d, %v; want %d", v, err, sources[len(sources)-1].Version)
		}
		if got := tablesExist(t, db); !allEqual(got, true) {
			t.Fatalf("after up, tables %v exist: %v", lockTables, got)
		}
		runMessage(t, db)

		if _, err := p.DownTo(ctx, 0); err != nil {
			t.Fatalf("down: %v", err)
		}
		if got := tablesExist(t, db); !allEqual(got, false) {
			t.Fatalf("after down, tables %v exist: %v", lockTables, got)
		}
		if _, err := p.Up(ctx); err != nil {
			t.Fatalf("up again: %v", err)
		}
	})
}

// TestGolangMigrate applies golang-migrate's migrations up, uses the
// tables, and takes them down again, on every dialect, with each
// dialect's golang-migrate database driver.
func TestGolangMigrate(t *testing.T) {
	eachDialect(t, func(t *testing.T, d lease.Dialect, db *sql.DB) {
		fsys, err := schema.Migrations(d, "golang-migrate")
		if err != nil {
			t.Fatal(err)
		}
		src, err := iofs.New(fsys, ".")
		if err != nil {
			t.Fatal(err)
		}
		var drv database.Driver
		switch d {
		case lease.SQLite:
			drv, err = migratesqlite.WithInstance(db, &migratesqlite.Config{})
		case lease.MySQL:
			drv, err = migratemysql.WithInstance(db, &migratemysql.Config{})
		case lease.Postgres:
			drv, err = migratepgx.WithInstance(db, &migratepgx.Config{})
		}
		if err != nil {
			t.Fatal(err)
		}
		m, err := migrate.NewWithInstance("iofs", src, d.String(), drv)
		if err != nil {
			t.Fatal(err)
		}
		// The MySQL and PostgreSQL drivers keep a connection of their own
		// until Close, which also closes db (before the test database is
		// dropped; closing db twice is harmless).
		defer func() {
			if srcErr, dbErr := m.Close(); srcErr != nil || dbErr != nil {
				t.Errorf("close: %v, %v", srcErr, dbErr)
			}
		}()
		if err := m.Up(); err != nil {
			t.Fatalf("up: %v", err)
		}
		v, dirty, err := m.Version()
		if err != nil || dirty || v != lastUp(fsys) {
			t.Fatalf("version %d (dirty %v), %v; want %d", v, dirty, err, lastUp(fsys))
		}
		if got := tablesExist(t, db); !allEqual(got, true) {
			t.Fatalf("after up, tables %v exist: %v", lockTables, got)
		}
		runMessage(t, db)

		if err := m.Down(); err != nil {
			t.Fatalf("down: %v", err)
		}
		if got := tablesExist(t, db); !allEqual(got, false) {
			t.Fatalf("after down, tables %v exist: %v", lockTables, got)
		}
		if err := m.Up(); err != nil {
			t.Fatalf("up again: %v", err)
		}
		if err := m.Up(); !errors.Is(err, migrate.ErrNoChange) {
			t.Fatalf("a second up: %v, want ErrNoChange", err)
		}
	})
}

// TestPureGoSQLite: the module uses golang-migrate's pure-Go SQLite
// driver (database/sqlite, on modernc.org/sqlite), never its cgo one
// (database/sqlite3). (mattn/go-sqlite3 itself is linked into the tests by
// internal/testkit/testdb, which also runs the library on that driver.)
func TestPureGoSQLite(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "-test", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := string(out)
	if !strings.Contains(deps, "github.com/golang-migrate/migrate/v4/database/sqlite\n") ||
		!strings.Contains(deps, "modernc.org/sqlite\n") {
		t.Fatalf("expected golang-migrate's database/sqlite and modernc.org/sqlite; the listing looks wrong:\n%s", deps)
	}
	for _, banned := range []string{"github.com/golang-migrate/migrate/v4/database/sqlite3\n"} {
		if strings.Contains(deps, banned) {
			t.Errorf("links %s", banned)
		}
	}
}

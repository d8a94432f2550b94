package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/sqlite" // registers "sqlite://" (modernc.org/sqlite, pure Go)
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// pragmas are what rowlease needs of a SQLite connection: WAL, a busy
// timeout, and BEGIN IMMEDIATE.
const pragmas = "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate"

// Example_goose applies the lock tables with goose, from the files
// schema.Migrations hands out, and runs a message on them.
func Example_goose() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "goose-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+pragmas)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	fsys, err := schema.Migrations(lease.SQLite, "goose")
	if err != nil {
		log.Fatal(err)
	}
	provider, err := goose.NewProvider(goose.DialectSQLite3, db, fsys)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := provider.Up(ctx); err != nil {
		log.Fatal(err)
	}
	version, err := provider.GetDBVersion(ctx)
	if err != nil {
		log.Fatal(err)
	}
	sources := provider.ListSources()
	fmt.Println("goose at the last migration:", version == sources[len(sources)-1].Version)

	fmt.Println("reply:", handleOne(ctx, db))
	// Output:
	// goose at the last migration: true
	// reply: booked
}

// Example_golangMigrate applies the lock tables with golang-migrate, from
// the files schema.Migrations hands out (source/iofs) into a SQLite
// database (database/sqlite: pure Go), and runs a message on them.
func Example_golangMigrate() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "migrate-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "app.db")

	fsys, err := schema.Migrations(lease.SQLite, "golang-migrate")
	if err != nil {
		log.Fatal(err)
	}
	src, err := iofs.New(fsys, ".")
	if err != nil {
		log.Fatal(err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, "sqlite://"+path+pragmas)
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		log.Fatal(err)
	}
	version, dirty, err := m.Version()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("golang-migrate at the last migration:", version == lastUp(fsys), "dirty:", dirty)
	if srcErr, dbErr := m.Close(); srcErr != nil || dbErr != nil {
		log.Fatal(srcErr, dbErr)
	}

	// The application's own pool.
	db, err := sql.Open("sqlite", "file:"+path+pragmas)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	fmt.Println("reply:", handleOne(ctx, db))
	// Output:
	// golang-migrate at the last migration: true dirty: false
	// reply: booked
}

// lastUp is the highest version among golang-migrate's up files.
func lastUp(fsys fs.FS) uint {
	files, err := fs.Glob(fsys, "*.up.sql")
	if err != nil {
		log.Fatal(err)
	}
	var last uint
	for _, f := range files {
		var v uint
		if _, err := fmt.Sscanf(f, "%d_", &v); err == nil && v > last {
			last = v
		}
	}
	return last
}

// handleOne runs one message through the three-level lock on the
// migrated tables.
func handleOne(ctx context.Context, db *sql.DB) string {
	runner, err := request.New(request.Config{DB: db, Session: session.Config{AutoCreate: true}})
	if err != nil {
		log.Fatal(err)
	}
	out, err := runner.Handle(ctx, request.Message{SessionKey: "chat-1", ClientRequestID: "m-1", Content: "lunch 35"},
		func(context.Context, *request.Run) (request.Answer, error) {
			return request.Answer{Reply: "booked"}, nil
		})
	if err != nil {
		log.Fatal(err)
	}
	return out.Reply
}

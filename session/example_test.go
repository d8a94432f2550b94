package session_test

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
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// openExampleDB opens a SQLite file in a new temporary directory, as
// rowlease needs it: WAL, a busy timeout, BEGIN IMMEDIATE.
func openExampleDB() (*sql.DB, func()) {
	dir, err := os.MkdirTemp("", "session-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "chat.db")+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// Example takes the session lock of one conversation in the shipped
// table: a second request of the same session is refused at once with the
// holder's name, the holder keeps the lock alive and gives it back, and
// its old grant can then free nothing.
func Example() {
	ctx := context.Background()
	db, done := openExampleDB()
	defer done()
	if err := schema.Apply(ctx, db, lease.SQLite); err != nil {
		log.Fatal(err)
	}
	sessions, err := session.New(session.Config{Dialect: lease.SQLite, AutoCreate: true})
	if err != nil {
		log.Fatal(err)
	}

	g, err := sessions.Acquire(ctx, db, "chat-42", "request-1", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("request-1 runs in chat-42, generation", g.Generation)

	_, err = sessions.Acquire(ctx, db, "chat-42", "request-2", 30*time.Second)
	var conflict *lease.ConflictError
	if errors.As(err, new(*session.BusyError)) && errors.As(err, &conflict) {
		fmt.Println("request-2: session busy with", conflict.Holder) // HTTP 409
	}

	// The heartbeat's renewal (package heartbeat does it on a timer).
	if g, err = sessions.Touch(ctx, db, g, 30*time.Second); err != nil {
		log.Fatal(err)
	}
	if err := sessions.Release(ctx, db, g); err != nil {
		log.Fatal(err)
	}

	g2, err := sessions.Acquire(ctx, db, "chat-42", "request-2", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("request-2 runs, generation", g2.Generation)

	// request-1's grant is spent: its release cannot free request-2's lock.
	err = sessions.Release(ctx, db, g)
	fmt.Println("stale release is ErrLost:", errors.Is(err, lease.ErrLost))
	st, err := sessions.Inspect(ctx, db, "chat-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held by", st.Holder)
	// Output:
	// request-1 runs in chat-42, generation 1
	// request-2: session busy with request-1
	// request-2 runs, generation 2
	// stale release is ErrLost: true
	// held by request-2
}

// Example_userTable puts the session lock on lock columns added to the
// application's own session table (the article's chat_session). Rows are
// the application's: AutoCreate stays off, and a session without a row is
// ErrNotFound (HTTP 404).
func Example_userTable() {
	ctx := context.Background()
	db, done := openExampleDB()
	defer done()
	for _, stmt := range []string{
		`CREATE TABLE chat_session (id TEXT PRIMARY KEY, title TEXT NOT NULL)`,
		`INSERT INTO chat_session (id, title) VALUES ('chat-42', 'Groceries')`,
		// The lock columns. On SQLite the expiry is an INTEGER of
		// microseconds since the epoch; DATETIME(6) on MySQL, timestamptz on
		// PostgreSQL.
		`ALTER TABLE chat_session ADD COLUMN current_request_id TEXT`,
		`ALTER TABLE chat_session ADD COLUMN lock_token TEXT`,
		`ALTER TABLE chat_session ADD COLUMN lock_expires_at INTEGER`,
		`ALTER TABLE chat_session ADD COLUMN lock_generation INTEGER NOT NULL DEFAULT 0`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			log.Fatal(err)
		}
	}
	sessions, err := session.New(session.Config{
		Dialect: lease.SQLite,
		Table:   "chat_session",
		Columns: lease.Columns{
			Key: "id", Holder: "current_request_id", Token: "lock_token",
			ExpiresAt: "lock_expires_at", Generation: "lock_generation",
		},
	})
	if err != nil {
		log.Fatal(err)
	}

	_, err = sessions.Acquire(ctx, db, "chat-7", "request-1", 30*time.Second)
	fmt.Println("no such session:", errors.As(err, new(*session.NotFoundError)))

	g, err := sessions.Acquire(ctx, db, "chat-42", "request-1", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	var title, current string
	if err := db.QueryRowContext(ctx, "SELECT title, current_request_id FROM chat_session WHERE id = 'chat-42'").Scan(&title, &current); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s runs, generation %d\n", title, current, g.Generation)
	if err := sessions.Release(ctx, db, g); err != nil {
		log.Fatal(err)
	}
	// Output:
	// no such session: true
	// Groceries: request-1 runs, generation 1
}

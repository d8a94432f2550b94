package engine_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
)

// ExampleJoint finishes a piece of work held at two levels — a
// conversation and one of its messages — with one call: the message is
// marked done with its reply, and the conversation is released. On
// PostgreSQL that is one statement, on MySQL one when both grants hold;
// this example runs on SQLite, where it is one statement per write. Each
// write succeeds or is lost on its own.
func ExampleJoint() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "lease-joint")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "chat.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	for _, ddl := range []string{
		`CREATE TABLE conversation (id TEXT PRIMARY KEY, holder TEXT, token TEXT, expires_at INTEGER, generation INTEGER NOT NULL DEFAULT 0)`,
		`CREATE TABLE message (id TEXT PRIMARY KEY, holder TEXT, token TEXT, expires_at INTEGER, generation INTEGER NOT NULL DEFAULT 0,
			status TEXT NOT NULL DEFAULT 'processing', reply TEXT)`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			log.Fatal(err)
		}
	}
	cols := engine.Columns{Key: "id", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation"}
	conversations, err := engine.New[string](engine.SQLite, engine.MustTable("conversation", cols), engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	cols.State = "status"
	messages, err := engine.New[string](engine.SQLite, engine.MustTable("message", cols), engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	hold := func(l *engine.Lease[string], key string) engine.Grant[string] {
		if err := l.Ensure(ctx, db, key, engine.CreateOptions{}); err != nil {
			log.Fatal(err)
		}
		g, err := l.Acquire(ctx, db, key, "worker-1", 30*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		return g
	}
	conv, msg := hold(conversations, "c1"), hold(messages, "m1")

	// Pass the writes in the lock order: the conversation, then the message.
	errs := engine.Joint(ctx, db,
		engine.ReleaseOp(conversations, conv),
		engine.TransitionOp(messages, msg, engine.ChangeOptions{
			From: []string{"processing"}, To: "done", Set: []engine.Assignment{engine.Set("reply", "hello")},
		}),
	)
	fmt.Println("released:", errs[0] == nil, "marked done:", errs[1] == nil)

	// A second message whose grant was lost meanwhile: its mark is lost,
	// and the conversation is released all the same.
	conv, msg = hold(conversations, "c1"), hold(messages, "m2")
	if err := messages.Release(ctx, db, msg); err != nil {
		log.Fatal(err)
	}
	errs = engine.Joint(ctx, db, engine.ReleaseOp(conversations, conv), engine.TransitionOp(messages, msg, engine.ChangeOptions{To: "done"}))
	fmt.Println("released:", errs[0] == nil, "mark lost:", errors.Is(errs[1], engine.ErrLost))

	var status, reply string
	if err := db.QueryRowContext(ctx, "SELECT status, reply FROM message WHERE id = 'm1'").Scan(&status, &reply); err != nil {
		log.Fatal(err)
	}
	fmt.Println("m1:", status, reply)

	// Output:
	// released: true marked done: true
	// released: true mark lost: true
	// m1: done hello
}

// Quickstart: one message through rowlease's three-level lock, on an
// embedded SQLite file.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the embedded SQLite driver, registered as "sqlite"

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
)

func main() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "rowlease-quickstart")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// WAL, a busy timeout and BEGIN IMMEDIATE: what rowlease needs on SQLite.
	db, err := sql.Open("sqlite", schema.SQLiteDSN(filepath.Join(dir, "app.db")))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// The lock tables: rowlease_session, rowlease_request, rowlease_tool_execution.
	if err := schema.Apply(ctx, db, lease.SQLite); err != nil {
		log.Fatal(err)
	}

	runner, err := request.New(request.Config{DB: db, Dialect: lease.SQLite})
	if err != nil {
		log.Fatal(err)
	}
	defer runner.Close(ctx) // stops its background work and closes its statements

	// One user message: session "chat-1", the client's request id "msg-1".
	msg := request.Message{SessionKey: "chat-1", ClientRequestID: "msg-1", Content: "lunch 12"}
	agent := func(ctx context.Context, run *request.Run) (request.Answer, error) {
		// Call the model and tools here, under the session and request leases.
		return request.Answer{Reply: "booked: lunch 12"}, nil
	}
	out, err := runner.Handle(ctx, msg, agent)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Reply)

	// The client resends (a retry, a second device): the stored reply, nothing runs.
	out, err = runner.Handle(ctx, msg, agent)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (replayed: %t)\n", out.Reply, out.Replayed)

	st, err := runner.Status(ctx, "chat-1", "msg-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.State)
}

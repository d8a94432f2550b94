package request_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// Example_flow runs one chat message through the three-level lock on
// SQLite: the agent books a transaction through a tool and replies; the
// client's retry of the same message replays the stored reply without
// running anything; and the same client request id with other content is
// refused.
func Example_flow() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "rowlease-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "chat.db")+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	// The lock tables, and the application's own ledger.
	if err := schema.Apply(ctx, db, lease.SQLite); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (amount TEXT NOT NULL, memo TEXT NOT NULL)"); err != nil {
		log.Fatal(err)
	}

	// A tool writes in x.Tx: its write commits only together with the
	// mark that the call is done, and only while the flow holds its locks.
	tools := toolexec.NewRegistry()
	err = tools.Register("create_transaction", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		var args struct {
			Amount json.Number `json:"amount"`
			Memo   string      `json:"memo"`
		}
		if err := json.Unmarshal(x.Canonical, &args); err != nil {
			return nil, err
		}
		_, err := x.Tx.ExecContext(ctx, "INSERT INTO ledger (amount, memo) VALUES (?, ?)", args.Amount.String(), args.Memo)
		return json.RawMessage(`{"booked":true}`), err
	})
	if err != nil {
		log.Fatal(err)
	}
	runner, err := request.New(request.Config{DB: db, Tools: tools, Session: session.Config{AutoCreate: true}})
	if err != nil {
		log.Fatal(err)
	}

	agentRuns := 0
	agent := func(ctx context.Context, run *request.Run) (request.Answer, error) {
		agentRuns++
		// A model round decided to call the tool…
		res, err := run.CallTool(ctx, "create_transaction", json.RawMessage(`{"amount":35,"memo":"lunch"}`))
		if err != nil {
			return request.Answer{}, err
		}
		// …and the next one replies.
		return request.Answer{Reply: "Booked 35 for lunch.", Result: res.Output}, nil
	}
	msg := request.Message{SessionKey: "chat-42", ClientRequestID: "msg-1", Content: "lunch 35"}

	out, err := runner.Handle(ctx, msg, agent)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("first:  %q replayed=%v attempt=%d result=%s\n", out.Reply, out.Replayed, out.Attempt, out.Result)

	// The client did not see the answer and sends the same message again.
	again, err := runner.Handle(ctx, msg, agent)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("retry:  %q replayed=%v same request=%v\n", again.Reply, again.Replayed, again.RequestID == out.RequestID)

	// The same client request id with other content is a client bug (422).
	msg.Content = "dinner 80"
	_, err = runner.Handle(ctx, msg, agent)
	fmt.Println("reused id, other content:", errors.Is(err, request.ErrFingerprintMismatch))

	var rows int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ledger").Scan(&rows); err != nil {
		log.Fatal(err)
	}
	fmt.Println("agent runs:", agentRuns, "ledger rows:", rows)

	// Output:
	// first:  "Booked 35 for lunch." replayed=false attempt=1 result={"booked":true}
	// retry:  "Booked 35 for lunch." replayed=true same request=true
	// reused id, other content: true
	// agent runs: 1 ledger rows: 1
}

// Example_queue queues a message behind the one its session is running:
// Handle returns at once with its position, the run that frees the
// session starts it, and Wait returns its stored outcome.
func Example_queue() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "rowlease-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "chat.db")+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := schema.Apply(ctx, db, lease.SQLite); err != nil {
		log.Fatal(err)
	}

	// Config.Agent runs the messages the Runner starts from the queue.
	echo := func(ctx context.Context, run *request.Run) (request.Answer, error) {
		return request.Answer{Reply: "you said: " + run.Content()}, nil
	}
	runner, err := request.New(request.Config{DB: db, Agent: echo, Session: session.Config{AutoCreate: true}})
	if err != nil {
		log.Fatal(err)
	}
	defer runner.Close(ctx) // joins the runs it started

	first := request.Message{SessionKey: "chat-7", ClientRequestID: "msg-1", Content: "hello"}
	_, err = runner.Handle(ctx, first, func(ctx context.Context, run *request.Run) (request.Answer, error) {
		// While this message runs, the user sends another one.
		second := request.Message{SessionKey: "chat-7", ClientRequestID: "msg-2", Content: "and another thing",
			OnBusy: request.Queue}
		out, err := runner.Handle(ctx, second, nil)
		if err != nil {
			return request.Answer{}, err
		}
		fmt.Printf("msg-2 queued=%v position=%d\n", out.Queued, out.Position)
		return request.Answer{Reply: "hi"}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	st, err := runner.Wait(ctx, "chat-7", "msg-2")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("msg-2 %s: %q\n", st.State, st.Reply)

	// Output:
	// msg-2 queued=true position=0
	// msg-2 succeeded: "you said: and another thing"
}

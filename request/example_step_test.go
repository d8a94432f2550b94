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

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// ExampleStep records a model round as a step. The first run books what
// the model decided, then fails before its reply; the resend replays the
// recorded decision without asking the model again — which would have
// worded the memo otherwise, a new tool call — so the booking is not
// repeated.
func ExampleStep() {
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
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (amount TEXT NOT NULL, memo TEXT NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	tools := toolexec.NewRegistry()
	err = tools.Register("create_transaction", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		_, err := x.Tx.ExecContext(ctx, "INSERT INTO ledger (amount, memo) VALUES (json_extract(?, '$.amount'), json_extract(?, '$.memo'))",
			string(x.Canonical), string(x.Canonical))
		return json.RawMessage(`{"booked":true}`), err
	})
	if err != nil {
		log.Fatal(err)
	}
	runner, err := request.New(request.Config{DB: db, Tools: tools, Session: session.Config{AutoCreate: true}})
	if err != nil {
		log.Fatal(err)
	}
	defer runner.Close(context.Background())

	// The model: asked again, it words the memo otherwise.
	type decision struct {
		Amount int    `json:"amount"`
		Memo   string `json:"memo"`
	}
	asked := 0
	askModel := func(context.Context) (decision, error) {
		asked++
		return decision{Amount: 35, Memo: fmt.Sprintf("lunch (wording %d)", asked)}, nil
	}
	failReply := true
	agent := func(ctx context.Context, run *request.Run) (request.Answer, error) {
		d, err := request.Step(ctx, run, "model-1", askModel)
		if err != nil {
			return request.Answer{}, err
		}
		args, _ := json.Marshal(d)
		if _, err := run.CallTool(ctx, "create_transaction", args); err != nil {
			return request.Answer{}, err
		}
		if failReply {
			return request.Answer{}, errors.New("the model service went away before the reply")
		}
		return request.Answer{Reply: "booked: " + d.Memo}, nil
	}
	msg := request.Message{SessionKey: "s", ClientRequestID: "m-1", Content: "lunch 35"}
	_, err = runner.Handle(ctx, msg, agent)
	fmt.Println("first run failed:", errors.Is(err, request.ErrAgentFailed))

	failReply = false
	out, err := runner.Handle(ctx, msg, agent) // the client's resend
	if err != nil {
		log.Fatal(err)
	}
	var rows int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ledger").Scan(&rows); err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Reply)
	fmt.Println("model asked:", asked, "ledger rows:", rows)
	// Output:
	// first run failed: true
	// booked: lunch (wording 1)
	// model asked: 1 ledger rows: 1
}

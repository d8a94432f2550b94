package rowleasetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/rowleasetest"
	"github.com/rowlease/rowlease/toolexec"
)

// exampleT stands in for the *testing.T a test function gets, so that the
// Examples run as examples. In your tests, pass t.
type exampleT struct {
	ctx      context.Context
	cancel   context.CancelFunc
	cleanups []func()
}

func newExampleT() *exampleT {
	ctx, cancel := context.WithCancel(context.Background())
	return &exampleT{ctx: ctx, cancel: cancel}
}

func (e *exampleT) Helper()                  {}
func (e *exampleT) Cleanup(f func())         { e.cleanups = append(e.cleanups, f) }
func (e *exampleT) Context() context.Context { return e.ctx }
func (e *exampleT) Logf(string, ...any)      {}
func (e *exampleT) Fatalf(format string, args ...any) {
	log.Fatalf(format, args...)
}

func (e *exampleT) TempDir() string {
	dir, err := os.MkdirTemp("", "rowleasetest-example")
	if err != nil {
		log.Fatal(err)
	}
	e.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// finish does what testing does when a test ends.
func (e *exampleT) finish() {
	e.cancel()
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// ExampleHandle tests an agent in a few lines: it runs under a real
// request.Run on a throwaway SQLite database, its tool call goes through
// toolexec, and the database shows what it did.
func ExampleHandle() {
	t := newExampleT() // in a test: func TestLunch(t *testing.T)
	defer t.finish()

	// The agent under test books the amount through a tool, then replies.
	agent := func(ctx context.Context, run *request.Run) (request.Answer, error) {
		res, err := run.CallTool(ctx, "book", json.RawMessage(`{"amount":35}`))
		if err != nil {
			return request.Answer{}, err
		}
		return request.Answer{Reply: "booked " + string(res.Output)}, nil
	}

	db := rowleasetest.NewDB(t) // the lock tables are there; add your own
	if _, err := db.Exec("CREATE TABLE ledger (request_id TEXT, amount INTEGER)"); err != nil {
		t.Fatalf("%v", err)
	}
	res := rowleasetest.Handle(t, agent,
		rowleasetest.WithDB(db),
		rowleasetest.WithTool("book", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
			_, err := x.Tx.ExecContext(ctx, "INSERT INTO ledger VALUES (?, 35)", x.Call.RequestID)
			return json.RawMessage(`{"amount":35}`), err
		}),
		rowleasetest.WithMessage(request.Message{Content: "lunch 35"}))
	fmt.Println(res.Outcome.Reply, res.Err)

	// The client sends the message again: the stored reply, nothing runs.
	again, err := res.Runner.Handle(t.Context(), res.Message, agent)
	fmt.Println("replayed:", again.Replayed, err)

	var rows int
	if err := db.QueryRow("SELECT COUNT(*) FROM ledger").Scan(&rows); err != nil {
		t.Fatalf("%v", err)
	}
	fmt.Println("ledger rows:", rows)
	// Output:
	// booked {"amount":35} <nil>
	// replayed: true <nil>
	// ledger rows: 1
}

// ExampleClock tests what an agent does when its run loses its leases: the
// agent moves the local clock past the trust deadline (as a model call
// that takes longer than the TTL would), the heartbeat cancels its context
// at its next wake-up (real time, at most TTL/3), and Handle reports the
// loss. The database clock did not move: the leases were not taken over
// but given back, so the message can run again at once.
func ExampleClock() {
	t := newExampleT()
	defer t.finish()

	clk := &rowleasetest.Clock{}
	res := rowleasetest.Handle(t, func(ctx context.Context, run *request.Run) (request.Answer, error) {
		clk.Advance(time.Minute)
		<-ctx.Done() // cancelled, with a *heartbeat.LostError as its cause
		return request.Answer{}, context.Cause(ctx)
	},
		rowleasetest.WithClock(clk),
		rowleasetest.WithConfig(func(c *request.Config) { c.TTL = 3 * time.Second }))

	fmt.Println("taken over:", errors.Is(res.Err, request.ErrTakenOver))
	var lost *heartbeat.LostError
	if errors.As(res.Err, &lost) {
		fmt.Println(lost.Lease, "lease lost:", lost.Reason)
	}

	again, err := res.Runner.Handle(t.Context(), res.Message, func(context.Context, *request.Run) (request.Answer, error) {
		return request.Answer{Reply: "done"}, nil
	})
	fmt.Println(again.Reply, "resumed:", again.Resumed, err)
	// Output:
	// taken over: true
	// session lease lost: trust deadline passed with no successful renewal
	// done resumed: true <nil>
}

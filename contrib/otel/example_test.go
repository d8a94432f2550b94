package otel_test

import (
	"context"
	"database/sql"
	"fmt"

	rowleaseotel "github.com/rowlease/rowlease/contrib/otel"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/toolexec"
)

// newRunner wires the adapter as the core module's docs/observability.md
// shows it (internal/testkit/readme checks that its block is this
// function's body).
func newRunner(db *sql.DB, tools *toolexec.Registry) (*request.Runner, error) {
	obs, err := rowleaseotel.New(rowleaseotel.Options{}) // the global tracer and meter providers
	if err != nil {
		return nil, err
	}
	runner, err := request.New(request.Config{DB: db, Tools: tools, Observer: obs})
	return runner, err
}

// ExampleNew passes the Observer as request.Config.Observer: every level
// of the flow reports to it.
func ExampleNew() {
	var db *sql.DB // the application's pool; nil here, so New refuses it
	runner, err := newRunner(db, toolexec.NewRegistry())
	if err != nil {
		fmt.Println("no runner:", err != nil)
		return
	}
	defer runner.Close(context.Background())
	// Output: no runner: true
}

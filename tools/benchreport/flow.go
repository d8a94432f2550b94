package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// lockPathPoint is the latency of one new request through the whole flow
// (two model rounds that do nothing, one tool call whose side effect is
// one insert), and its statements.
type lockPathPoint struct {
	Dialect    string
	Requests   int
	P50Micros  int64
	P90Micros  int64
	P99Micros  int64
	Statements float64 // per request, side effect included
}

func measureLockPath(ctx context.Context, d lease.Dialect, n int) (lockPathPoint, error) {
	c := &countdb.Counter{}
	db, done, err := fresh(ctx, d, c)
	if err != nil {
		return lockPathPoint{}, err
	}
	defer done()
	if err := schema.Apply(ctx, db, d); err != nil {
		return lockPathPoint{}, err
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger_entry (request_id VARCHAR(64) NOT NULL, amount VARCHAR(32) NOT NULL)"); err != nil {
		return lockPathPoint{}, err
	}
	insert := d.Rebind("INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)")
	tools := toolexec.NewRegistry()
	if err := tools.Register("write", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		_, err := x.Tx.ExecContext(ctx, insert, x.Call.RequestID, "35")
		return json.RawMessage(`{"ok":true}`), err
	}); err != nil {
		return lockPathPoint{}, err
	}
	r, err := request.New(request.Config{DB: db, Dialect: d, Tools: tools, Session: session.Config{AutoCreate: true}})
	if err != nil {
		return lockPathPoint{}, err
	}
	defer r.Close(context.Background())
	agent := func(ctx context.Context, run *request.Run) (request.Answer, error) {
		res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":35}`))
		if err != nil {
			return request.Answer{}, err
		}
		return request.Answer{Reply: "recorded", Result: res.Output}, nil
	}
	// Warm: the session row, prepared statements, connections.
	for i := range 20 {
		if _, err := r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: fmt.Sprintf("warm%d", i), Content: "x"}, agent); err != nil {
			return lockPathPoint{}, err
		}
	}
	c.Reset()
	lat := make([]int64, 0, n)
	for i := range n {
		t0 := time.Now()
		if _, err := r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: fmt.Sprintf("c%d", i), Content: "x"}, agent); err != nil {
			return lockPathPoint{}, err
		}
		lat = append(lat, time.Since(t0).Microseconds())
	}
	st := c.Stats()
	slices.Sort(lat)
	return lockPathPoint{Dialect: d.String(), Requests: n, P50Micros: quantile(lat, 0.5), P90Micros: quantile(lat, 0.9),
		P99Micros: quantile(lat, 0.99), Statements: float64(st.Statements) / float64(n)}, nil
}

package request

import (
	"context"
	"encoding/json"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/rowlease/rowlease/internal/testkit/proccpu"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// BenchmarkHandle sends new messages through Runner.Handle from 1 and 64
// sessions at once, each session one message after another: the flow of
// the end-to-end throughput report (tools/benchreport), an agent with no
// model latency whose one tool call writes one ledger row, on a Runner
// with the default configuration. ns/op is the wall time per message of
// the whole set of sessions; run it with -cpuprofile and -benchmem to see
// where the client's CPU and allocations go per message. It reports the
// process's CPU time per message (cpu-µs/op, where the platform tells it:
// the servers' CPU is not in it, SQLite's engine is) and the goroutines
// started per message (goroutines/op).
func BenchmarkHandle(b *testing.B) {
	for _, d := range testdb.Dialects() {
		for _, sessions := range []int{1, 64} {
			b.Run(d.String()+"/sessions="+strconv.Itoa(sessions), func(b *testing.B) {
				db := testdb.Open(b, d)
				if d != lease.SQLite {
					db.SetMaxOpenConns(80)
					db.SetMaxIdleConns(80)
				} else {
					db.SetMaxOpenConns(8)
				}
				benchHandle(b, db, d, sessions)
			})
		}
	}
}

func benchHandle(b *testing.B, db *sqlx.DB, d lease.Dialect, sessions int) {
	ctx := context.Background()
	if err := schema.Apply(ctx, db, d); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, ledgerDDL); err != nil {
		b.Fatal(err)
	}
	insert := d.Rebind("INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)")
	tools := toolexec.NewRegistry()
	if err := tools.Register("write", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		_, err := x.Tx.ExecContext(ctx, insert, x.Call.RequestID, "35")
		return json.RawMessage(`{"ok":true}`), err
	}); err != nil {
		b.Fatal(err)
	}
	r, err := New(Config{DB: db, Dialect: d, Tools: tools})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close(context.Background()) })
	agent := func(ctx context.Context, run *Run) (Answer, error) {
		res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":35}`))
		if err != nil {
			return Answer{}, err
		}
		return Answer{Reply: "recorded", Result: res.Output}, nil
	}
	var seq atomic.Int64
	send := func(s int) error {
		_, err := r.Handle(ctx, Message{SessionKey: "s" + strconv.Itoa(s), ClientRequestID: "c" + strconv.FormatInt(seq.Add(1), 10), Content: "x"}, agent)
		return err
	}
	// The sessions' rows, and the statements prepared once per pool.
	for s := range sessions {
		if err := send(s); err != nil {
			b.Fatal(err)
		}
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	var failed atomic.Pointer[error]
	b.ReportAllocs()
	sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(sample)
	g0, cpu0 := sample[0].Value.Uint64(), proccpu.Used()
	b.ResetTimer()
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := send(s); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu := proccpu.Used() - cpu0
	metrics.Read(sample)
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	b.ReportMetric(float64(sample[0].Value.Uint64()-g0)/float64(b.N), "goroutines/op")
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

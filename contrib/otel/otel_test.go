package otel_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	rowleaseotel "github.com/rowlease/rowlease/contrib/otel"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/rowleasetest"
	"github.com/rowlease/rowlease/toolexec"
)

// setup runs the whole flow on SQLite (rowleasetest) with the adapter on
// in-memory exporters.
func setup(t *testing.T) (*request.Runner, *tracetest.InMemoryExporter, *sdkmetric.ManualReader) {
	t.Helper()
	db := rowleasetest.NewDB(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (request_id TEXT, amount TEXT)"); err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(ctx); _ = mp.Shutdown(ctx) })
	obs, err := rowleaseotel.New(rowleaseotel.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := rowleasetest.NewRunner(t, rowleasetest.WithDB(db),
		rowleasetest.WithTool("book", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
			_, err := x.Tx.ExecContext(ctx, "INSERT INTO ledger VALUES (?, ?)", x.Call.RequestID, "35")
			return json.RawMessage(`{"ok":true}`), err
		}),
		rowleasetest.WithConfig(func(c *request.Config) { c.TTL, c.Observer = 5*time.Second, obs }))
	return r, spans, reader
}

func agent(ctx context.Context, run *request.Run) (request.Answer, error) {
	_, done := run.ModelRound(ctx, "rule") // the model call would run under the returned context
	done(nil)
	if _, err := run.CallTool(ctx, "book", json.RawMessage(`{"amount":35}`)); err != nil {
		return request.Answer{}, err
	}
	return request.Answer{Reply: "booked"}, nil
}

func TestSpansAndMetricsOfOneFlow(t *testing.T) {
	r, spans, reader := setup(t)
	ctx := context.Background()
	msg := request.Message{SessionKey: "s1", ClientRequestID: "c1", Content: "lunch 35"}
	if _, err := r.Handle(ctx, msg, agent); err != nil {
		t.Fatal(err)
	}
	if out, err := r.Handle(ctx, msg, agent); err != nil || !out.Replayed {
		t.Fatalf("replay: %+v, %v", out, err)
	}

	got := spans.GetSpans()
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range got {
		byName[s.Name] = append(byName[s.Name], s)
	}
	handles := byName[request.SpanHandle]
	if len(handles) != 2 {
		t.Fatalf("want 2 handle spans, got %d (%v)", len(handles), names(got))
	}
	first := handles[0]
	for _, name := range []string{request.SpanModelRound, toolexec.SpanTool, lease.SpanFencedTx} {
		if len(byName[name]) == 0 {
			t.Fatalf("no %s span in %v", name, names(got))
		}
	}
	tool := byName[toolexec.SpanTool][0]
	if tool.Parent.SpanID() != first.SpanContext.SpanID() {
		t.Error("the tool span is not a child of the handle span")
	}
	if fx := byName[lease.SpanFencedTx][0]; fx.Parent.SpanID() != tool.SpanContext.SpanID() {
		t.Error("the fenced transaction is not a child of the tool span")
	}
	var leaseOps int
	for _, s := range got {
		if strings.HasPrefix(s.Name, "rowlease.lease.") {
			leaseOps++
			if s.Parent.TraceID() != first.SpanContext.TraceID() && s.Parent.TraceID() != handles[1].SpanContext.TraceID() {
				t.Errorf("lease span %s outside the handle traces", s.Name)
			}
		}
	}
	if leaseOps == 0 {
		t.Errorf("no lease operation spans in %v", names(got))
	}
	if v, ok := attr(handles[1].Attributes, lease.AttrVerdict); !ok || v != request.VerdictReplayed {
		t.Errorf("the second handle's verdict = %q", v)
	}
	// No attribute anywhere carries a token (UUIDs of the flow's tokens
	// never reach the observer; request ids do).
	for _, s := range got {
		for _, a := range s.Attributes {
			if strings.Contains(string(a.Key), "token") {
				t.Errorf("span %s has attribute %s", s.Name, a.Key)
			}
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	hists := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sums[m.Name] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					hists[m.Name] += p.Count
				}
			}
		}
	}
	for name, want := range map[string]int64{rowleaseotel.MetricHandled: 2, rowleaseotel.MetricReplays: 1, rowleaseotel.MetricToolCalls: 1} {
		if sums[name] != want {
			t.Errorf("%s = %d, want %d (all: %v)", name, sums[name], want, sums)
		}
	}
	if sums[rowleaseotel.MetricLeaseOps] == 0 || hists[rowleaseotel.MetricLeaseDuration] == 0 || hists[rowleaseotel.MetricModelRounds] != 1 {
		t.Errorf("lease operations %d, durations %d, model rounds %d", sums[rowleaseotel.MetricLeaseOps],
			hists[rowleaseotel.MetricLeaseDuration], hists[rowleaseotel.MetricModelRounds])
	}
}

func TestConflictsAndLossesAreCounted(t *testing.T) {
	r, _, reader := setup(t)
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "a", Content: "x"},
			func(ctx context.Context, run *request.Run) (request.Answer, error) {
				close(started)
				<-release
				return request.Answer{Reply: "ok"}, nil
			})
		done <- err
	}()
	<-started
	_, err := r.Handle(ctx, request.Message{SessionKey: "s", ClientRequestID: "b", Content: "y"}, agent)
	if err == nil {
		t.Fatal("a second message on a busy session ran")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != rowleaseotel.MetricConflicts {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, _ := p.Attributes.Value("kind"); v.AsString() == "session_busy" && p.Value == 1 {
					return
				}
			}
		}
	}
	t.Error("no session_busy conflict counted")
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func attr(attrs []attribute.KeyValue, key string) (string, bool) {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value.AsString(), true
		}
	}
	return "", false
}

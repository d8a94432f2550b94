package otel

import (
	"context"
	"fmt"
	"time"

	otelglobal "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/toolexec"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/rowlease/rowlease/contrib/otel"

// Metric names.
const (
	MetricLeaseOps      = "rowlease.lease.operations"     // counter: op, verdict, table
	MetricLeaseDuration = "rowlease.lease.duration"       // histogram (s): op, verdict — renew latency is op=renew
	MetricLosses        = "rowlease.lease.losses"         // counter: reason, lease
	MetricRenewRetries  = "rowlease.heartbeat.retries"    // counter: lease
	MetricConflicts     = "rowlease.conflicts"            // counter: kind
	MetricHandled       = "rowlease.requests"             // counter: verdict (answered, replayed, resumed, conflict, failed…)
	MetricReplays       = "rowlease.replays"              // counter
	MetricToolCalls     = "rowlease.tool.executions"      // counter: tool, kind, verdict
	MetricModelRounds   = "rowlease.model_round.duration" // histogram (s)
)

// Options configure an Observer. Nil providers mean the global ones
// (otel.GetTracerProvider, otel.GetMeterProvider).
type Options struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// Observer is a lease.Observer that records spans and metrics with
// OpenTelemetry. It is safe for concurrent use.
type Observer struct {
	tracer trace.Tracer

	ops        metric.Int64Counter
	opDur      metric.Float64Histogram
	losses     metric.Int64Counter
	retries    metric.Int64Counter
	conflicts  metric.Int64Counter
	handled    metric.Int64Counter
	replays    metric.Int64Counter
	toolCalls  metric.Int64Counter
	modelRound metric.Float64Histogram
}

var _ lease.Observer = (*Observer)(nil)

// New returns an Observer; pass it as request.Config.Observer, or, for a
// package used alone, as the Observer of its lease.Options: lease.Options
// itself, toolexec.Config.Lease.Observer or session.Config.Lease.Observer.
func New(o Options) (*Observer, error) {
	tp, mp := o.TracerProvider, o.MeterProvider
	if tp == nil {
		tp = otelglobal.GetTracerProvider()
	}
	if mp == nil {
		mp = otelglobal.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	ob := &Observer{tracer: tp.Tracer(ScopeName)}
	var err error
	counter := func(dst *metric.Int64Counter, name, desc string) {
		if err == nil {
			*dst, err = m.Int64Counter(name, metric.WithDescription(desc))
		}
	}
	histogram := func(dst *metric.Float64Histogram, name, desc string) {
		if err == nil {
			*dst, err = m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"))
		}
	}
	counter(&ob.ops, MetricLeaseOps, "Lease operations by operation and verdict.")
	histogram(&ob.opDur, MetricLeaseDuration, "Duration of lease operations; op=renew is the renew latency.")
	counter(&ob.losses, MetricLosses, "Supervised leases lost, by reason.")
	counter(&ob.retries, MetricRenewRetries, "Renewals that failed transiently and were retried.")
	counter(&ob.conflicts, MetricConflicts, "Messages refused because a lock was held, by kind.")
	counter(&ob.handled, MetricHandled, "Messages handled, by verdict.")
	counter(&ob.replays, MetricReplays, "Messages answered from a stored reply, taking no lock.")
	counter(&ob.toolCalls, MetricToolCalls, "Tool executions by tool, kind and verdict.")
	histogram(&ob.modelRound, MetricModelRounds, "Duration of model rounds reported by agents.")
	if err != nil {
		return nil, fmt.Errorf("otel: %w", err)
	}
	return ob, nil
}

func kv(a lease.Attr) attribute.KeyValue {
	switch v := a.Value.(type) {
	case string:
		return attribute.String(a.Key, v)
	case int64:
		return attribute.Int64(a.Key, v)
	case int:
		return attribute.Int(a.Key, v)
	case bool:
		return attribute.Bool(a.Key, v)
	}
	return attribute.String(a.Key, fmt.Sprint(a.Value))
}

func kvs(attrs []lease.Attr) []attribute.KeyValue {
	out := make([]attribute.KeyValue, len(attrs))
	for i, a := range attrs {
		out[i] = kv(a)
	}
	return out
}

func find(attrs []lease.Attr, key string) (string, bool) {
	for _, a := range attrs {
		if a.Key == key {
			s, ok := a.Value.(string)
			return s, ok
		}
	}
	return "", false
}

// Start opens a span named s.Name as a child of ctx's span.
func (o *Observer) Start(ctx context.Context, s lease.Span) (context.Context, func(error, ...lease.Attr)) {
	begun := time.Now()
	ctx, span := o.tracer.Start(ctx, s.Name, trace.WithAttributes(kvs(s.Attrs)...))
	return ctx, func(err error, attrs ...lease.Attr) {
		span.SetAttributes(kvs(attrs)...)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		o.count(ctx, s, attrs, time.Since(begun))
		span.End()
	}
}

// count turns the end of a span into metrics.
func (o *Observer) count(ctx context.Context, s lease.Span, end []lease.Attr, d time.Duration) {
	verdict, _ := find(end, lease.AttrVerdict)
	switch s.Name {
	case request.SpanHandle:
		o.handled.Add(ctx, 1, metric.WithAttributes(attribute.String("verdict", verdict)))
		if verdict == "replayed" {
			o.replays.Add(ctx, 1)
		}
		if kind, ok := find(end, request.AttrConflict); ok {
			o.conflicts.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", kind)))
		}
	case toolexec.SpanTool:
		tool, _ := find(s.Attrs, toolexec.AttrTool)
		kind, _ := find(s.Attrs, toolexec.AttrToolKind)
		o.toolCalls.Add(ctx, 1, metric.WithAttributes(attribute.String("tool", tool), attribute.String("kind", kind),
			attribute.String("verdict", verdict)))
	case request.SpanModelRound:
		o.modelRound.Record(ctx, d.Seconds())
	}
}

// Op records a lease operation: a child span with the operation's own
// start and end, a count by verdict and its duration.
func (o *Observer) Op(ctx context.Context, op lease.Op) {
	attrs := []attribute.KeyValue{attribute.String("op", op.Name), attribute.String("verdict", op.Verdict), attribute.String(lease.AttrTable, op.Table)}
	o.ops.Add(ctx, 1, metric.WithAttributes(attrs...))
	o.opDur.Record(ctx, op.Duration.Seconds(), metric.WithAttributes(attrs[:2]...))
	_, span := o.tracer.Start(ctx, "rowlease.lease."+op.Name, trace.WithTimestamp(op.Start),
		trace.WithAttributes(append(attrs, attribute.Int64(lease.AttrGeneration, op.Generation))...))
	if op.Verdict == lease.VerdictError {
		span.SetStatus(codes.Error, op.Err.Error())
	}
	span.End(trace.WithTimestamp(op.Start.Add(op.Duration)))
}

// Event records an event on ctx's span, and the metrics it stands for.
func (o *Observer) Event(ctx context.Context, name string, attrs ...lease.Attr) {
	trace.SpanFromContext(ctx).AddEvent(name, trace.WithAttributes(kvs(attrs)...))
	which, _ := find(attrs, lease.AttrLease)
	switch name {
	case heartbeat.EventLeaseLost:
		reason, _ := find(attrs, heartbeat.AttrReason)
		o.losses.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", reason), attribute.String("lease", which)))
	case heartbeat.EventRenewRetry:
		o.retries.Add(ctx, 1, metric.WithAttributes(attribute.String("lease", which)))
	}
}

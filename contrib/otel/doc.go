// Package otel reports what rowlease does to OpenTelemetry: a
// span per message handled (request.Runner.Handle) with child spans for its
// lease operations, the model rounds its agent reports, its tool calls and
// their fenced transactions; and metrics — lease operations by verdict,
// their latency (renew latency is op=renew), losses by reason, heartbeat
// retries, conflicts by kind, replays, messages by verdict, tool
// executions by verdict, model-round durations.
//
// It lives in its own module, so the core's dependency list does not grow.
// Its package name is otel, like its folder; a program that also imports
// go.opentelemetry.io/otel names one of the two:
//
//	import rowleaseotel "github.com/rowlease/rowlease/contrib/otel"
//
//	obs, err := rowleaseotel.New(rowleaseotel.Options{}) // the global providers
//	runner, err := request.New(request.Config{DB: db, Observer: obs, ...})
//
// Guarantees: no attribute, span or metric carries a lease token (rowlease
// never hands one to an Observer). Session keys and request ids are
// attributes of spans, never of metrics, so metric cardinality stays
// bounded by the number of tools.
//
// It does not sample, export or configure providers: that is the
// application's OpenTelemetry setup. An instrument that cannot be created
// makes New fail; after that, recording never fails.
package otel

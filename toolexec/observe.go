package toolexec

import (
	"context"
	"database/sql"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// Names of what tool calls report to a lease.Observer. SpanTool, AttrTool
// and AttrToolKind keep the strings the lease package gave them before
// toolexec named them, so traces and dashboards keep working.
const (
	// SpanTool names the span of one tool call of a request (Execute or
	// ExecuteExternal, as request.Run.CallTool starts it), with AttrTool
	// and AttrToolKind.
	SpanTool = "rowlease.tool"
	// AttrTool is the attribute key of the tool's name.
	AttrTool = "rowlease.tool"
	// AttrToolKind is the attribute key of where a tool's effect happens:
	// "tx" (in the database, Execute) or "external" (ExecuteExternal).
	AttrToolKind = "rowlease.tool.kind"
	// AttrPhase is the attribute key of which of a call's fenced
	// transactions a lease.SpanFencedTx span is: "effect" (Execute's),
	// "intent" or "result" (ExecuteExternal's).
	AttrPhase = "rowlease.phase"
)

// runFenced is lease.RunFenced, reported to the Observer as a
// lease.SpanFencedTx span of the given phase (effect, intent, result).
func (s *Store) runFenced(ctx context.Context, db Beginner, tool, phase string, o engine.FencedTx, fn func(*sql.Tx) error) (err error) {
	if s.obs != nil {
		var end func(error, ...lease.Attr)
		ctx, end = s.obs.Start(ctx, lease.Span{Name: lease.SpanFencedTx, Attrs: []lease.Attr{
			{Key: AttrTool, Value: tool}, {Key: AttrPhase, Value: phase}}})
		defer func() { end(err, lease.Attr{Key: lease.AttrVerdict, Value: engine.VerdictOf(err, lease.VerdictOK)}) }()
	}
	return engine.RunFenced(ctx, db, o, fn)
}

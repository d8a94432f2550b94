package toolexec_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/toolexec"
)

// spans is a lease.Observer that keeps the spans started.
type spans struct {
	mu  sync.Mutex
	got []lease.Span
}

func (s *spans) Start(ctx context.Context, sp lease.Span) (context.Context, func(error, ...lease.Attr)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, sp)
	return ctx, func(error, ...lease.Attr) {}
}

func (*spans) Op(context.Context, lease.Op)                 {}
func (*spans) Event(context.Context, string, ...lease.Attr) {}
func (s *spans) fenced() (phases []string, tools []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.got {
		if sp.Name != lease.SpanFencedTx {
			continue
		}
		for _, a := range sp.Attrs {
			switch a.Key {
			case toolexec.AttrPhase:
				phases = append(phases, a.Value.(string))
			case toolexec.AttrTool:
				tools = append(tools, a.Value.(string))
			}
		}
	}
	return phases, tools
}

// TestFencedTransactionsReported: each fenced transaction of a call is a
// lease.SpanFencedTx span naming the tool and the phase: "effect" for
// Execute, "intent" then "result" for ExecuteExternal.
func TestFencedTransactionsReported(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		obs := &spans{}
		store, err := toolexec.New(toolexec.Config{Dialect: e.d, Lease: lease.Options{Observer: obs}})
		require.NoError(t, err)
		f := e.newFlow(t, "s1", ttl)

		_, err = store.Execute(ctx, db, f.call(`{"a":35}`), e.opts(f, ttl), e.ledger)
		require.NoError(t, err)
		_, err = store.ExecuteExternal(ctx, db, f.pay(`{"a":35}`), e.opts(f, ttl), toolexec.ExternalOptions{},
			func(context.Context, toolexec.External) (json.RawMessage, error) { return json.RawMessage(`{}`), nil })
		require.NoError(t, err)

		phases, tools := obs.fenced()
		assert.Equal(t, []string{"effect", "intent", "result"}, phases)
		assert.Equal(t, []string{"create_transaction", "pay", "pay"}, tools)
	})
}

// TestObserverNames: the names under which tool calls are reported are
// part of what traces and dashboards match on; they keep their strings.
func TestObserverNames(t *testing.T) {
	assert.Equal(t, "rowlease.tool", toolexec.SpanTool)
	assert.Equal(t, "rowlease.tool", toolexec.AttrTool)
	assert.Equal(t, "rowlease.tool.kind", toolexec.AttrToolKind)
	assert.Equal(t, "rowlease.phase", toolexec.AttrPhase)
}

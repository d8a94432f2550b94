package request

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
)

// spans records the spans an Observer is given: name, start attributes and
// end attributes.
type spans struct {
	mu  sync.Mutex
	got []recordedSpan
}

type recordedSpan struct {
	name       string
	start, end map[string]any
}

func (s *spans) Start(ctx context.Context, sp lease.Span) (context.Context, func(error, ...lease.Attr)) {
	rec := recordedSpan{name: sp.Name, start: attrMap(sp.Attrs)}
	return ctx, func(_ error, attrs ...lease.Attr) {
		rec.end = attrMap(attrs)
		s.mu.Lock()
		s.got = append(s.got, rec)
		s.mu.Unlock()
	}
}

func (s *spans) Op(context.Context, lease.Op)                 {}
func (s *spans) Event(context.Context, string, ...lease.Attr) {}

func (s *spans) named(name string) []recordedSpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []recordedSpan
	for _, sp := range s.got {
		if sp.name == name {
			out = append(out, sp)
		}
	}
	return out
}

func attrMap(attrs []lease.Attr) map[string]any {
	m := map[string]any{}
	for _, a := range attrs {
		m[a.Key] = a.Value
	}
	return m
}

// TestSpanNamesStay pins the names of request's spans and attribute keys,
// as traces and dashboards know them: a handled message is a
// "rowlease.handle" span with the session at its start and the request,
// verdict and conflict at its end; a model round is a
// "rowlease.model_round" span with the model.
func TestSpanNamesStay(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		obs := &spans{}
		r, err := New(Config{DB: db, TTL: 30 * time.Second, Tools: e.tools, Session: sessionConfigAutoCreate(), Observer: obs})
		require.NoError(t, err)
		ctx := bg(t)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
		out, err := r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
			_, done := run.ModelRound(ctx, "m-1")
			done(nil)
			return Answer{Reply: "ok"}, nil
		})
		require.NoError(t, err)
		msg.Content = "other"
		_, err = r.Handle(ctx, msg, func(context.Context, *Run) (Answer, error) { return Answer{}, nil })
		require.ErrorIs(t, err, ErrFingerprintMismatch)

		handles := obs.named("rowlease.handle")
		require.Len(t, handles, 2)
		assert.Equal(t, "s", handles[0].start["rowlease.session"])
		assert.Equal(t, out.RequestID, handles[0].end["rowlease.request"])
		assert.Equal(t, VerdictAnswered, handles[0].end["rowlease.verdict"])
		assert.Equal(t, VerdictConflict, handles[1].end["rowlease.verdict"])
		assert.Equal(t, "fingerprint_mismatch", handles[1].end["rowlease.conflict"])
		rounds := obs.named("rowlease.model_round")
		require.Len(t, rounds, 1)
		assert.Equal(t, "m-1", rounds[0].start["rowlease.model"])
		assert.Equal(t, []string{SpanHandle, SpanModelRound, AttrSession, AttrRequest, AttrConflict, AttrModel},
			[]string{"rowlease.handle", "rowlease.model_round", "rowlease.session", "rowlease.request", "rowlease.conflict", "rowlease.model"})
		require.NoError(t, r.Close(ctx))
	})
}

package request

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/toolexec"
)

// "abc" and "abc " are one id under MySQL's PAD SPACE collations and two
// on PostgreSQL and SQLite: ids and keys that end with a space, or hold a
// NUL, are refused on every dialect before any SQL.
func TestIDsWithTrailingSpaceOrNULRefused(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			e, c := countedEnv(t, d)
			ctx := context.Background()
			require.NoError(t, e.r.Sessions().Create(ctx, e.db, "s"))
			ran := false
			agent := func(context.Context, *Run) (Answer, error) { ran = true; return Answer{Reply: "x"}, nil }
			c.Reset()
			for _, m := range []Message{
				{SessionKey: "s", ClientRequestID: "abc ", Content: "x"},
				{SessionKey: "s ", ClientRequestID: "abc", Content: "x"},
				{SessionKey: "s", ClientRequestID: "a\x00b", Content: "x"},
				{SessionKey: "s", ClientRequestID: strings.Repeat("a", 192), Content: "x"},
			} {
				_, err := e.r.Handle(ctx, m, agent)
				assert.ErrorIs(t, err, lease.ErrInvalid, "%q/%q", m.SessionKey, m.ClientRequestID)
			}
			assert.False(t, ran)
			assert.Zero(t, c.Stats().Statements, "nothing sent")

			// A tool name ending with a space is refused the same way.
			_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "ok", Content: "x"},
				func(ctx context.Context, run *Run) (Answer, error) {
					_, err := run.r.tools.Execute(ctx, run.r.db, toolexec.Call{SessionKey: "s", RequestID: run.id, Tool: "write ", Arguments: json.RawMessage(`{}`)},
						toolexec.ExecOptions{Holder: run.holder, TTL: run.r.cfg.TTL, Fences: run.Fences()},
						func(context.Context, toolexec.Exec) (json.RawMessage, error) { t.Error("ran"); return nil, nil })
					assert.ErrorIs(t, err, lease.ErrInvalid)
					return Answer{Reply: "done"}, nil
				})
			require.NoError(t, err)
		})
	}
}

package request

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
)

// logBuffer is a slog destination that tests read while Runners write.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the logged lines that contain every one of parts.
func (b *logBuffer) lines(parts ...string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range strings.Split(b.buf.String(), "\n") {
		all := l != ""
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			n++
		}
	}
	return n
}

// agentLog records which agent ran which message.
type agentLog struct {
	mu   sync.Mutex
	runs []string // "agent:client request id:agent name of the run"
}

func (l *agentLog) add(agent string, run *Run) {
	l.mu.Lock()
	l.runs = append(l.runs, agent+":"+run.SessionKey()+"/"+run.ClientRequestID()+":"+run.Agent())
	l.mu.Unlock()
}

func (l *agentLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.runs...)
}

// TestAgentsResumeOnlyTheirOwn: two programs with different agents on the
// same tables. The runs of four messages that program A accepted for its
// agent "A" die; program B (a default agent and an agent "B") never runs
// them, neither from its dispatcher nor from its head of a session where
// it has a message queued behind one of them: it logs each once, with the
// request and the agent, and counts it. A Runner that has "A" resumes
// them with "A"; B's queued message then runs with B's agent, never with
// A's.
func TestAgentsResumeOnlyTheirOwn(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 600*time.Millisecond)
		ctx := bg(t)
		var ran agentLog
		write := func(ctx context.Context, run *Run) error {
			_, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":`+strings.TrimPrefix(run.SessionKey(), "s")+`}`))
			return err
		}
		agentsA := NewAgents()
		require.NoError(t, agentsA.Register("A", func(ctx context.Context, run *Run) (Answer, error) {
			ran.add("A", run)
			if err := write(ctx, run); err != nil {
				return Answer{}, err
			}
			run.abandon() // program A dies after the tool committed
			return Answer{}, errors.New("crashed")
		}))
		a := e.newRunner(t, func(c *Config) { c.Agents = agentsA })
		sessions := []string{"s1", "s2", "s3", "s4"}
		ids := map[string]string{}
		for _, s := range sessions {
			_, err := a.Handle(ctx, Message{SessionKey: s, ClientRequestID: "c", Content: "for A", Agent: "A"}, nil)
			require.ErrorIs(t, err, context.Canceled, "the run died")
			st, err := a.Status(ctx, s, "c")
			require.NoError(t, err)
			assert.Equal(t, "A", st.Agent)
			ids[s] = st.RequestID
		}

		// Program B: its own agents, and a message queued behind A's dead
		// run in s1.
		bAgent := func(name string) Agent {
			return func(ctx context.Context, run *Run) (Answer, error) {
				ran.add(name, run)
				return Answer{Reply: "by " + name}, nil
			}
		}
		agentsB := NewAgents()
		require.NoError(t, agentsB.Register("B", bAgent("B")))
		var logs logBuffer
		b := e.newRunner(t, func(c *Config) {
			c.Agent, c.Agents = bAgent("B-default"), agentsB
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			c.Queue.DispatchInterval = 20 * time.Millisecond
			c.Resume.Grace = 50 * time.Millisecond
		})
		out, err := b.Handle(ctx, Message{SessionKey: "s1", ClientRequestID: "q", Content: "for B", OnBusy: Queue}, nil)
		require.NoError(t, err)
		require.True(t, out.Queued, "%+v", out)

		// Once A's runs are due for a resume, B's polls find them, and
		// leave them.
		waitFor(t, func() bool { b.dispatchOnce(ctx); return b.SkippedForAgent() == int64(len(sessions)) })
		for range 2 * foreignEvery {
			b.dispatchOnce(ctx)
		}
		assert.Equal(t, int64(len(sessions)), b.SkippedForAgent(), "each request counted once")
		for _, s := range sessions {
			assert.Equal(t, 1, logs.lines("request="+ids[s], "agent=A"), "%s logged once, with its agent", s)
			st, err := b.Status(ctx, s, "c")
			require.NoError(t, err)
			assert.Equal(t, StateProcessing, st.State, s)
			assert.False(t, st.Live, s)
		}
		st, err := b.Status(ctx, "s1", "q")
		require.NoError(t, err)
		assert.Equal(t, StateQueued, st.State, "not run ahead of A's dead run")
		assert.Equal(t, []string{"A:s1/c:A", "A:s2/c:A", "A:s3/c:A", "A:s4/c:A"}, ran.all(), "B ran nothing")

		// A Runner with "A" (and no default agent) resumes A's runs with
		// "A", and leaves B's queued message alone.
		var resumed sync.Map
		agentsA2 := NewAgents()
		require.NoError(t, agentsA2.Register("A", func(ctx context.Context, run *Run) (Answer, error) {
			ran.add("A2", run)
			resumed.Store(run.SessionKey(), run.Resumed())
			if err := write(ctx, run); err != nil {
				return Answer{}, err
			}
			return Answer{Reply: "by A"}, nil
		}))
		a2 := e.newRunner(t, func(c *Config) {
			c.Agents = agentsA2
			c.Queue.DispatchInterval = 20 * time.Millisecond
			c.Resume.Grace = 50 * time.Millisecond
		})
		require.NoError(t, a2.Start(ctx))
		for _, s := range sessions {
			st, err := a2.Wait(ctx, s, "c")
			require.NoError(t, err)
			require.Equal(t, StateSucceeded, st.State, st.Error)
			assert.Equal(t, "by A", st.Reply)
			assert.Equal(t, "A", st.Agent)
			r, _ := resumed.Load(s)
			assert.Equal(t, true, r, s)
		}
		assert.Equal(t, len(sessions), e.ledgerRows(t), "each tool call written once")
		waitFor(t, func() bool { return a2.SkippedForAgent() == 1 }) // B's queued message, the head of s1 now
		st, err = a2.Status(ctx, "s1", "q")
		require.NoError(t, err)
		assert.Equal(t, StateQueued, st.State)

		require.NoError(t, b.Start(ctx))
		st, err = b.Wait(ctx, "s1", "q")
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, st.State, st.Error)
		assert.Equal(t, "by B-default", st.Reply)
		assert.Equal(t, "", st.Agent)
		assert.Equal(t, []string{"A:s1/c:A", "A:s2/c:A", "A:s3/c:A", "A:s4/c:A"}, ran.all()[:4])
		var rest []string
		for _, r := range ran.all()[4:] {
			if strings.HasPrefix(r, "A2:") {
				// A's messages only (a run that lost its lease on a slow
				// machine is resumed again: by "A" too).
				assert.Regexp(t, `^A2:s[1-4]/c:A$`, r)
				continue
			}
			rest = append(rest, r)
		}
		assert.Equal(t, []string{"B-default:s1/q:"}, rest, "B's agent ran its own message only")
	})
}

// TestAgentsNamedByMessage: Handle with a nil agent runs the agent the
// message names, stores its name, and hands it to the run; an unknown or
// bad name is refused before any SQL; Register checks its input.
func TestAgentsNamedByMessage(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 5*time.Second)
		ctx := bg(t)
		agents := NewAgents()
		require.NoError(t, agents.Register("summarizer", func(ctx context.Context, run *Run) (Answer, error) {
			return Answer{Reply: "summary by " + run.Agent()}, nil
		}))
		r := e.newRunner(t, func(c *Config) { c.Agent, c.Agents = answerOK, agents })
		out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c1", Content: "x", Agent: "summarizer"}, nil)
		require.NoError(t, err)
		assert.Equal(t, "summary by summarizer", out.Reply)
		out, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c2", Content: "x"}, nil)
		require.NoError(t, err)
		assert.Equal(t, "ok", out.Reply, "no name: the default agent")
		var stored []sql.NullString
		require.NoError(t, db.Select(&stored, "SELECT agent FROM rowlease_request ORDER BY client_request_id"))
		require.Len(t, stored, 2)
		require.True(t, stored[0].Valid)
		assert.Equal(t, "summarizer", stored[0].String)
		assert.False(t, stored[1].Valid, "the default agent is stored as NULL")

		rows := requestRows(t, e)
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c3", Content: "x", Agent: "chat"}, answerOK)
		var ua *UnknownAgentError
		require.ErrorAs(t, err, &ua)
		assert.Equal(t, "chat", ua.Name)
		assert.ErrorAs(t, err, new(*UnknownAgentError))
		assert.ErrorIs(t, err, lease.ErrInvalid)
		_, err = r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c3", Content: "x", Agent: "chat "}, nil)
		assert.ErrorIs(t, err, lease.ErrInvalid)
		assert.Equal(t, rows, requestRows(t, e), "nothing written")

		for _, bad := range []string{"", "x ", strings.Repeat("a", 129), "summarizer"} {
			assert.ErrorIs(t, agents.Register(bad, answerOK), lease.ErrInvalid, "%q", bad)
		}
		assert.ErrorIs(t, agents.Register("nil", nil), lease.ErrInvalid)
		assert.Equal(t, []string{"summarizer"}, agents.Names())
	})
}

package request

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/rowlease/rowlease/internal/valid"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// UnknownAgentError reports a message that names an agent
// (Message.Agent) not registered in Config.Agents: it matches
// lease.ErrInvalid (400 in httpapi). Nothing was written.
type UnknownAgentError struct {
	Name string // the agent's name, as the message gave it
}

// Error names the agent.
func (e *UnknownAgentError) Error() string {
	return fmt.Sprintf("request: no agent named %q is registered (Config.Agents)", e.Name)
}

// Is makes errors.Is(err, lease.ErrInvalid) true.
func (e *UnknownAgentError) Is(target error) bool { return target == lease.ErrInvalid }

// Agents maps names to agents (Config.Agents), as toolexec.Registry maps
// names to tools. A message names its agent (Message.Agent); the name is
// stored with its request (schema.ColAgent), and a Runner starts from the
// queue, and resumes, only the requests whose agent it has: the unnamed
// (default) agent is Config.Agent. It is safe for concurrent use; an agent
// registered after New is used from the next message and the next poll of
// the dispatcher on.
type Agents struct {
	mu     sync.RWMutex
	agents map[string]Agent
}

// NewAgents returns an empty registry.
func NewAgents() *Agents { return &Agents{agents: map[string]Agent{}} }

// Register adds an agent under name. The name must be non-empty text of
// at most schema.MaxAgentNameLen bytes, by the rule of session keys and
// client request ids (valid UTF-8, no NUL, no trailing space); a bad name,
// a nil agent or a name registered twice is an error matching lease.ErrInvalid.
func (a *Agents) Register(name string, agent Agent) error {
	if err := valid.Text("request", "agent name", name, schema.MaxAgentNameLen); err != nil {
		return err
	}
	if agent == nil {
		return invalid("agent", "nil")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.agents[name]; dup {
		return invalid("agent name", "registered twice")
	}
	a.agents[name] = agent
	return nil
}

// Lookup returns the agent registered under name, if any. A nil registry
// has none.
func (a *Agents) Lookup(name string) (Agent, bool) {
	if a == nil {
		return nil, false
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	ag, ok := a.agents[name]
	return ag, ok
}

// Names lists the registered agents, sorted.
func (a *Agents) Names() []string {
	if a == nil {
		return nil
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]string, 0, len(a.agents))
	for n := range a.agents {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Agent is the name of the agent that runs the request (Message.Agent as
// stored with it): "" for the default agent (Config.Agent).
func (run *Run) Agent() string { return run.msg.Agent }

// agentOf returns this Runner's agent of the given name: Config.Agent for
// "", else the one registered in Config.Agents; nil when it has none.
func (r *Runner) agentOf(name string) Agent {
	if name == "" {
		return r.cfg.Agent
	}
	ag, _ := r.cfg.Agents.Lookup(name)
	return ag
}

// namedAgent returns the agent a message names (agentOf: nil when this
// Runner has none), and refuses, before any SQL, a name that is not
// registered (*UnknownAgentError) or not valid text. A registered name is
// valid text (Register checks it).
func (r *Runner) namedAgent(name string) (Agent, error) {
	if name == "" {
		return r.cfg.Agent, nil
	}
	if ag, ok := r.cfg.Agents.Lookup(name); ok {
		return ag, nil
	}
	if err := valid.Text("request", "agent", name, schema.MaxAgentNameLen); err != nil {
		return nil, err
	}
	return nil, &UnknownAgentError{Name: name}
}

// ownAgents is the SQL condition (on the unqualified agent column) that a
// request's agent is one this Runner has, with its arguments: the default
// agent (NULL) if Config.Agent is set, and the names registered in
// Config.Agents now. The names are bound as arguments: no input reaches
// the text.
func (r *Runner) ownAgents() (cond string, args []any) {
	var or []string
	if r.cfg.Agent != nil {
		or = append(or, schema.ColAgent+" IS NULL")
	}
	if names := r.cfg.Agents.Names(); len(names) > 0 {
		or = append(or, schema.ColAgent+" IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(names)), ", ")+")")
		for _, n := range names {
			args = append(args, n)
		}
	}
	if len(or) == 0 {
		return "1 = 0", nil
	}
	return "(" + strings.Join(or, " OR ") + ")", args
}

// dispatches reports whether the Runner has an agent, or may get one: the
// dispatcher runs only then.
func (r *Runner) dispatches() bool { return r.cfg.Agent != nil || r.cfg.Agents != nil }

// Reports of the requests a Runner leaves to others because it does not
// have their agent.
const (
	// EventAgentSkipped is the Observer event (Config.Observer) of a
	// request that this Runner found to start or resume and left alone,
	// because it does not have its agent; with AttrRequest and AttrAgent.
	// It is reported once per request per Runner, as the log line is.
	EventAgentSkipped = "rowlease.agent_skipped"
	// AttrAgent is the agent's name ("" for the default agent).
	AttrAgent = "rowlease.agent"
)

// foreignEvery: the dispatcher looks for the requests waiting for an
// agent it does not have on its first poll and then on every foreignEvery
// polls; foreignBatch bounds the requests one look reads.
const (
	foreignEvery = 30
	foreignBatch = 100
)

// agentSkips are the requests this Runner left alone for their agent:
// each is reported once (up to maxHints remembered at a time), and
// counted.
type agentSkips struct {
	mu    sync.Mutex
	seen  map[string]struct{}
	n     int64
	polls int64 // the dispatcher's polls, for foreignEvery
}

// SkippedForAgent returns how many requests this Runner found to start or
// resume and left alone because it does not have their agent (Config.Agent
// for an unnamed one, Config.Agents for a named one): each is counted
// once, logged once (with the request's id and the agent's name) and
// reported to the Observer (EventAgentSkipped). A Runner that has the
// agent runs them. A count that keeps growing while nothing runs them
// means that no Runner of the service has some agent.
func (r *Runner) SkippedForAgent() int64 {
	r.skips.mu.Lock()
	defer r.skips.mu.Unlock()
	return r.skips.n
}

// skipForAgent reports, once per request, that the Runner leaves request
// id alone because it does not have its agent.
func (r *Runner) skipForAgent(ctx context.Context, id, agent string) {
	r.skips.mu.Lock()
	if _, seen := r.skips.seen[id]; seen {
		r.skips.mu.Unlock()
		return
	}
	if r.skips.seen == nil || len(r.skips.seen) >= maxHints {
		r.skips.seen = map[string]struct{}{}
	}
	r.skips.seen[id] = struct{}{}
	r.skips.n++
	r.skips.mu.Unlock()
	name := agent
	if name == "" {
		name = "(default)"
	}
	r.log.Info("rowlease: a request waits for an agent this Runner does not have; a Runner that has it runs it",
		"request", id, "agent", name)
	if obs := r.cfg.Observer; obs != nil {
		obs.Event(ctx, EventAgentSkipped, lease.Attr{Key: AttrRequest, Value: id}, lease.Attr{Key: AttrAgent, Value: agent})
	}
}

// reportForeign looks, on the dispatcher's first poll and every
// foreignEvery polls after it, for the requests that are ready to start or
// resume and whose agent this Runner does not have (the dispatcher's
// sessions leave them out), and reports each once (skipForAgent).
func (r *Runner) reportForeign(ctx context.Context) {
	r.skips.mu.Lock()
	poll := r.skips.polls
	r.skips.polls++
	r.skips.mu.Unlock()
	if poll%foreignEvery != 0 {
		return
	}
	own, args := r.ownAgents()
	rows, err := r.db.QueryContext(ctx, r.sql.foreign(own), append(args, foreignBatch)...)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("rowlease: reading the requests waiting for other agents failed", "err", err)
		}
		return
	}
	type skipped struct{ id, agent string }
	var found []skipped
	for rows.Next() {
		var s skipped
		if err := rows.Scan(&s.id, &s.agent); err != nil {
			break
		}
		found = append(found, s)
	}
	_ = rows.Close()
	for _, s := range found {
		r.skipForAgent(ctx, s.id, s.agent)
	}
}

package toolexec

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// Registry maps tool names to their effects: side effects written in the
// database's transaction (Register) or effects outside the database
// (RegisterExternal). It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]tool
}

type tool struct {
	fx   SideEffect
	ext  ExternalEffect
	opts ExternalOptions
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{tools: map[string]tool{}} }

// Register adds a tool whose side effect writes in the database (see
// Store.Execute). An empty name, a nil side effect or a name already
// registered is an error.
func (r *Registry) Register(name string, fn SideEffect) error {
	if fn == nil {
		return fmt.Errorf("toolexec: register: empty name or nil side effect")
	}
	return r.add(name, tool{fx: fn})
}

// RegisterExternal adds a tool whose effect happens outside the database
// (see Store.ExecuteExternal), reconciled with o when an earlier run left its
// outcome unknown. An empty name, a nil effect or a name already
// registered is an error.
func (r *Registry) RegisterExternal(name string, fn ExternalEffect, o ExternalOptions) error {
	if fn == nil {
		return fmt.Errorf("toolexec: register: empty name or nil external effect")
	}
	return r.add(name, tool{ext: fn, opts: o})
}

func (r *Registry) add(name string, t tool) error {
	if name == "" {
		return fmt.Errorf("toolexec: register: empty name or nil side effect")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[name]; dup {
		return fmt.Errorf("toolexec: register: tool %q registered twice", name)
	}
	r.tools[name] = t
	return nil
}

func (r *Registry) get(name string) (tool, error) {
	if r != nil {
		r.mu.RLock()
		t, ok := r.tools[name]
		r.mu.RUnlock()
		if ok {
			return t, nil
		}
	}
	return tool{}, fmt.Errorf("%w: %q", ErrUnknownTool, name)
}

// Lookup returns the side effect of a tool registered with Register, or an
// error matching ErrUnknownTool (also for an external tool: use Store.Call).
func (r *Registry) Lookup(name string) (SideEffect, error) {
	t, err := r.get(name)
	if err != nil {
		return nil, err
	}
	if t.fx == nil {
		return nil, fmt.Errorf("%w: %q is an external tool", ErrUnknownTool, name)
	}
	return t.fx, nil
}

// External reports whether name is registered as an external tool.
func (r *Registry) External(name string) bool {
	t, err := r.get(name)
	return err == nil && t.ext != nil
}

// Call executes call.Tool as tools registered it: Execute for a side
// effect in the database, ExecuteExternal for an external one. An
// unregistered tool gives an error matching ErrUnknownTool and writes
// nothing.
func (s *Store) Call(ctx context.Context, db Beginner, tools *Registry, call Call, o ExecOptions) (Result, error) {
	t, err := tools.get(call.Tool)
	if err != nil {
		return Result{}, err
	}
	if t.ext != nil {
		return s.ExecuteExternal(ctx, db, call, o, t.opts, t.ext)
	}
	return s.Execute(ctx, db, call, o, t.fx)
}

// Names lists the registered tools, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.tools))
	for n := range r.tools {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

package toolexec

import (
	"fmt"
	"sort"
	"sync"
)

// Registry maps tool names to their side effects. It is safe for
// concurrent use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]SideEffect
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{tools: map[string]SideEffect{}} }

// Register adds a tool. An empty name, a nil side effect or a name already
// registered is an error.
func (r *Registry) Register(name string, fn SideEffect) error {
	if name == "" || fn == nil {
		return fmt.Errorf("toolexec: register: empty name or nil side effect")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[name]; dup {
		return fmt.Errorf("toolexec: register: tool %q registered twice", name)
	}
	r.tools[name] = fn
	return nil
}

// Lookup returns the tool's side effect, or an error matching
// ErrUnknownTool.
func (r *Registry) Lookup(name string) (SideEffect, error) {
	if r != nil {
		r.mu.RLock()
		fn, ok := r.tools[name]
		r.mu.RUnlock()
		if ok {
			return fn, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownTool, name)
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

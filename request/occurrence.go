package request

import (
	"encoding/json"
	"sync"

	"github.com/rowlease/rowlease/toolexec"
)

// occurrences numbers a run's identical tool calls — the same tool and
// canonical arguments — for toolexec.Call.Occurrence: the n-th identical
// call that succeeds in a run is occurrence n−1, an effect of its own, and
// a resumed run, making the same calls in the same order, meets the same
// rows in the same order.
//
// A call takes the lowest number that no identical call of the run holds
// (in flight) or succeeded under. A call that did not succeed gives its
// number back: nothing of it committed (a tool's failure, a transient or
// a lost database, a lost lease), or its effect's outcome is unknown (an
// external effect started), and the same call made again — a retry — is
// the same occurrence, which retries, takes over or reconciles its row,
// never a new effect beside it. Parallel identical calls get their numbers
// in the order they take them.
type occurrences struct {
	mu    sync.Mutex
	taken map[occurrenceKey]map[int]bool
}

// occurrenceKey is what makes two calls of a request identical.
type occurrenceKey struct{ tool, argsHash string }

// take numbers a call of tool with args. settle gives the number back
// unless the call succeeded; call it once, when the call has returned.
// Arguments that cannot be canonicalized get 0 (toolexec refuses them and
// writes nothing).
func (o *occurrences) take(tool string, args json.RawMessage) (n int, settle func(succeeded bool)) {
	_, hash, err := toolexec.CanonicalArguments(args)
	if err != nil {
		return 0, func(bool) {}
	}
	k := occurrenceKey{tool: tool, argsHash: hash}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.taken == nil {
		o.taken = map[occurrenceKey]map[int]bool{}
	}
	held := o.taken[k]
	if held == nil {
		held = map[int]bool{}
		o.taken[k] = held
	}
	for held[n] {
		n++
	}
	held[n] = true
	return n, func(succeeded bool) {
		if succeeded {
			return
		}
		o.mu.Lock()
		delete(held, n)
		o.mu.Unlock()
	}
}

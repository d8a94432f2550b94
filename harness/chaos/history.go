package chaos

import (
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// History records operations with call and return times from many
// goroutines. Times are nanoseconds on the monotonic clock since the
// History was made.
type History struct {
	start time.Time

	mu  sync.Mutex
	ops []porcupine.Operation
	// pending are operations whose outcome is unknown, by index: their
	// return time is set by Settle or Close, when nothing of theirs can
	// still land. last is each client's last operation.
	pending map[int]bool
	last    map[int]int
}

// NewHistory starts an empty history.
func NewHistory() *History {
	return &History{start: time.Now(), pending: map[int]bool{}, last: map[int]int{}}
}

// Now is the current time of the history.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records one operation of client. An output with ResUnknown gets its
// return time at Close.
func (h *History) Add(client int, in Input, out Output, call, ret int64) {
	h.AddMeta(client, in, out, call, ret, nil)
}

// AddMeta is Add with metadata (a fenced write's ledger id).
func (h *History) AddMeta(client int, in Input, out Output, call, ret int64, meta any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if out.Res == ResUnknown {
		h.pending[len(h.ops)] = true
	}
	h.last[client] = len(h.ops)
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret, Metadata: meta})
}

// Close ends the history: operations of unknown outcome return now. Call
// it when every operation has returned and the server has finished what
// it was sent (see the round's quiesce).
func (h *History) Close() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := h.Now()
	for i := range h.pending {
		h.ops[i].Return = end
	}
	clear(h.pending)
	return h.ops
}

// Settle gives client's last operation, if its outcome is unknown, the
// return time now: call it once nothing of the operation can still land
// (its server session is gone).
func (h *History) Settle(client int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i, ok := h.last[client]; ok && h.pending[i] {
		h.ops[i].Return = h.Now()
		delete(h.pending, i)
	}
}

// Len is the number of operations recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

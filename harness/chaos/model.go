package chaos

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// OpKind is a lease operation of the model.
type OpKind uint8

// The operations recorded in a lease history.
const (
	OpAcquire    OpKind = iota + 1 // Acquire with a new token (optionally in a state)
	OpReenter                      // AcquireWith the token the worker holds
	OpRenew                        // Renew
	OpRelease                      // Release
	OpTransition                   // Transition from one state to the other, kept or released
	OpFenced                       // a ledger row written in RunFenced with the grant's fence
	OpExpire                       // the test sets expires_at into the past ("expire now")
	OpRead                         // Inspect
)

var opNames = map[OpKind]string{
	OpAcquire: "acquire", OpReenter: "reenter", OpRenew: "renew", OpRelease: "release",
	OpTransition: "transition", OpFenced: "fenced-write", OpExpire: "expire", OpRead: "read",
}

func (k OpKind) String() string { return opNames[k] }

// Res is what an operation returned.
type Res uint8

// Results.
const (
	// ResOK: it took effect (a fenced write: its ledger row committed).
	ResOK Res = iota + 1
	// ResRefused: it definitely took no effect because its condition did
	// not hold: an acquire refused as held or in another state, a
	// token-checked write that reported lease.ErrLost, a fenced write whose
	// fence failed.
	ResRefused
	// ResUnknown: it failed otherwise (connection cut, timeout, server
	// gone); it may or may not have taken effect, at any time after its
	// call. Its return time is the end of the round.
	ResUnknown
)

// Input is an operation's input. Tok names the grant's token (tokens are
// numbered by the test; holders are "t<Tok>").
type Input struct {
	Kind OpKind
	Key  string
	Tok  int64
	Gen  int64 // OpRenew, OpRelease, OpTransition, OpFenced: the generation of the grant the worker holds (a fenced write's ledger row carries it)
	In   byte  // OpAcquire: the state required (0: any); OpTransition: the state from
	To   byte  // OpTransition: the state to
	Keep bool  // OpTransition: keep the lease (renew) instead of releasing it
}

// Output is an operation's result. Gen is the generation handed back
// (negative when the operation hands none back); OpRead fills the rest.
type Output struct {
	Res   Res
	Gen   int64
	Tok   int64 // OpRead: the holder's token (0: no holder)
	Held  bool  // OpRead
	State byte  // OpRead
}

// State is the model of one lease row. Tok is the token (0: free);
// Expired says the test expired it and nobody renewed or took it since;
// St is the state column.
type State struct {
	Tok     int64
	Gen     int64
	Expired bool
	St      byte
}

// InitialState is a row as Ensure creates it, in state 'a'.
var InitialState = State{St: 'a'}

// Step is the sequential specification of a lease row: the set of states
// that in, answered by out, can lead to from s (empty: impossible).
func Step(s State, in Input, out Output) []State {
	match := s.Tok != 0 && s.Tok == in.Tok
	// held: a token-checked operation's condition. The token and the
	// generation must both match: a token granted again by a reentry of a
	// free row (the generation one higher) does not make an earlier copy
	// of the grant hold (an unknown reentry can leave a worker with it).
	held := match && s.Gen == in.Gen
	var cond bool
	next := s
	gen := s.Gen
	switch in.Kind {
	case OpAcquire, OpReenter:
		// WHERE state IN (…) AND (token IS NULL OR token = tok OR expired)
		cond = (in.In == 0 || s.St == in.In) && (s.Tok == 0 || match || s.Expired)
		if !match {
			next.Gen++ // a new grant; reentry keeps the generation
		}
		next.Tok, next.Expired = in.Tok, false
		gen = next.Gen
	case OpRenew:
		cond = held
		next.Expired = false
	case OpRelease:
		cond = held
		next.Tok, next.Expired = 0, false
	case OpTransition:
		cond = held && s.St == in.In
		next.St = in.To
		if in.Keep {
			next.Expired = false
		} else {
			next.Tok, next.Expired = 0, false
		}
	case OpFenced:
		// Confirm: token and generation match and not expired; the ledger row carries
		// the worker's generation, which must be the current one.
		cond = held && !s.Expired
		next.Expired = false
		if out.Res == ResOK && s.Gen != in.Gen {
			return nil // a stale generation committed
		}
	case OpExpire:
		if s.Tok != 0 {
			next.Expired = true
		}
		return []State{next}
	case OpRead:
		if out.Tok == s.Tok && out.Gen == s.Gen && out.State == s.St && out.Held == (s.Tok != 0 && !s.Expired) {
			return []State{s}
		}
		return nil
	}
	switch out.Res {
	case ResOK:
		if cond && (out.Gen < 0 || out.Gen == gen) {
			return []State{next}
		}
	case ResRefused:
		if !cond {
			return []State{s}
		}
	case ResUnknown:
		if cond {
			return []State{s, next}
		}
		return []State{s}
	}
	return nil
}

// Model is the porcupine model of a set of lease rows, partitioned by key.
var Model = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(Input).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []any { return []any{InitialState} },
	Step: func(s, in, out any) []any {
		next := Step(s.(State), in.(Input), out.(Output))
		res := make([]any, len(next))
		for i, n := range next {
			res[i] = n
		}
		return res
	},
	Hash: func(s any) uint64 {
		st := s.(State)
		h := uint64(st.Tok)*1_000_003 ^ uint64(st.Gen)*7919 ^ uint64(st.St)
		if st.Expired {
			h ^= 1 << 63
		}
		return h
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(Input), out.(Output)
		res := map[Res]string{ResOK: "ok", ResRefused: "refused", ResUnknown: "unknown"}[o.Res]
		if i.Kind == OpRead {
			return fmt.Sprintf("read → t%d gen %d held=%v state %c", o.Tok, o.Gen, o.Held, o.State)
		}
		return fmt.Sprintf("%s(t%d gen %d %c→%c keep=%v) → %s gen %d", i.Kind, i.Tok, i.Gen, max(i.In, '-'), max(i.To, '-'), i.Keep, res, o.Gen)
	},
	DescribeState: func(s any) string {
		st := s.(State)
		return fmt.Sprintf("t%d gen %d expired=%v state %c", st.Tok, st.Gen, st.Expired, st.St)
	},
}

// Check checks a history for linearizability against Model, within
// timeout. It returns porcupine's verdict and, for a violation, the
// linearization info (for porcupine.Visualize).
func Check(h []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(Model.ToModel(), h, timeout)
}

package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/rowlease/rowlease/lease"
)

func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	in.Key = "k"
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
}

// TestModel pins the lease model on small histories, legal and illegal,
// so that the linearizability check can fail.
func TestModel(t *testing.T) {
	ok := func(gen int64) Output { return Output{Res: ResOK, Gen: gen} }
	refused := Output{Res: ResRefused, Gen: -1}
	unknown := Output{Res: ResUnknown, Gen: -1}
	cases := []struct {
		name  string
		h     []porcupine.Operation
		legal bool
	}{
		{"one acquire", []porcupine.Operation{op(0, 0, 1, Input{Kind: OpAcquire, Tok: 1}, ok(1))}, true},
		{"two live acquires both win", []porcupine.Operation{
			op(0, 0, 1, Input{Kind: OpAcquire, Tok: 1}, ok(1)),
			op(1, 2, 3, Input{Kind: OpAcquire, Tok: 2}, ok(2)),
		}, false},
		{"takeover after expire", []porcupine.Operation{
			op(0, 0, 1, Input{Kind: OpAcquire, Tok: 1}, ok(1)),
			op(2, 2, 3, Input{Kind: OpExpire}, ok(-1)),
			op(1, 4, 5, Input{Kind: OpAcquire, Tok: 2}, ok(2)),
			op(0, 6, 7, Input{Kind: OpRenew, Tok: 1, Gen: 1}, refused),
			op(0, 8, 9, Input{Kind: OpFenced, Tok: 1, Gen: 1}, refused),
		}, true},
		{"stale generation commits", []porcupine.Operation{
			op(0, 0, 1, Input{Kind: OpAcquire, Tok: 1}, ok(1)),
			op(2, 2, 3, Input{Kind: OpExpire}, ok(-1)),
			op(1, 4, 5, Input{Kind: OpAcquire, Tok: 2}, ok(2)),
			op(0, 6, 7, Input{Kind: OpFenced, Tok: 1, Gen: 1}, ok(1)),
		}, false},
		{"fenced write after expire commits", []porcupine.Operation{
			op(0, 0, 1, Input{Kind: OpAcquire, Tok: 1}, ok(1)),
			op(2, 2, 3, Input{Kind: OpExpire}, ok(-1)),
			op(0, 4, 5, Input{Kind: OpFenced, Tok: 1, Gen: 1}, ok(1)),
		}, false},
		{"renew after expire revives", []porcupine.Operation{
			op(0, 0, 1, Input{Kind: OpAcquire, Tok: 1}, ok(1)),
			op(2, 2, 3, Input{Kind: OpExpire}, ok(-1)),
			op(0, 4, 5, Input{Kind: OpRenew, Tok: 1, Gen: 1}, ok(1)),
			op(1, 6, 7, Input{Kind: OpAcquire, Tok: 2}, refused),
			op(0, 8, 9, Input{Kind: OpFenced, Tok: 1, Gen: 1}, ok(1)),
		}, true},
		{"unknown acquire may have won", []porcupine.Operation{
			op(0, 0, 100, Input{Kind: OpAcquire, Tok: 1}, unknown),
			op(1, 2, 3, Input{Kind: OpAcquire, Tok: 2}, refused),
			op(1, 4, 5, Input{Kind: OpRead}, Output{Res: ResOK, Gen: 1, Tok: 1, Held: true, State: 'a'}),
		}, true},
		{"refused acquire of a free row", []porcupine.Operation{
			op(1, 2, 3, Input{Kind: OpAcquire, Tok: 2}, refused),
		}, false},
		{"reentry keeps the generation", []porcupine.Operation{
			op(0, 0, 1, Input{Kind: OpAcquire, Tok: 1}, ok(1)),
			op(0, 2, 3, Input{Kind: OpReenter, Tok: 1}, ok(2)),
		}, false},
		{"transition from the wrong state", []porcupine.Operation{
			op(0, 0, 1, Input{Kind: OpAcquire, Tok: 1}, ok(1)),
			op(0, 2, 3, Input{Kind: OpTransition, Tok: 1, Gen: 1, In: 'b', To: 'a', Keep: true}, ok(1)),
		}, false},
		{"a renew with an earlier generation of a reentered token is refused", []porcupine.Operation{
			op(0, 0, 1, Input{Kind: OpAcquire, Tok: 1}, ok(1)),
			op(0, 2, 3, Input{Kind: OpRelease, Tok: 1, Gen: 1}, ok(-1)),
			op(0, 4, 100, Input{Kind: OpReenter, Tok: 1}, unknown),
			op(0, 6, 7, Input{Kind: OpRenew, Tok: 1, Gen: 1}, refused),
			op(1, 8, 9, Input{Kind: OpRead}, Output{Res: ResOK, Gen: 2, Tok: 1, Held: true, State: 'a'}),
		}, true},
		{"a renew with an earlier generation of a reentered token succeeds", []porcupine.Operation{
			op(0, 0, 1, Input{Kind: OpAcquire, Tok: 1}, ok(1)),
			op(0, 2, 3, Input{Kind: OpRelease, Tok: 1, Gen: 1}, ok(-1)),
			op(0, 4, 5, Input{Kind: OpReenter, Tok: 1}, ok(2)),
			op(0, 6, 7, Input{Kind: OpRenew, Tok: 1, Gen: 1}, ok(2)),
		}, false},
		{"released lease read as held", []porcupine.Operation{
			op(0, 0, 1, Input{Kind: OpAcquire, Tok: 1}, ok(1)),
			op(0, 2, 3, Input{Kind: OpRelease, Tok: 1, Gen: 1}, ok(-1)),
			op(1, 4, 5, Input{Kind: OpRead}, Output{Res: ResOK, Gen: 1, Tok: 1, Held: true, State: 'a'}),
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := porcupine.CheckOperations(Model.ToModel(), c.h)
			if got != c.legal {
				t.Fatalf("linearizable = %v, want %v", got, c.legal)
			}
		})
	}
}

// TestUnfencedWritesCaught runs the lease workload with a deliberate bug —
// ledger rows written without the fence — and expects the check to find
// stale generations committed: the harness can fail.
func TestUnfencedWritesCaught(t *testing.T) {
	e := OpenEnv(t, lease.SQLite)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := CreateTables(ctx, e.Direct, lease.SQLite); err != nil {
		t.Fatal(err)
	}
	rep, err := RunLease(ctx, LeaseConfig{
		Dialect: lease.SQLite, DB: e.Faulty, Direct: e.Direct, Ops: 4000, Keys: 4, Workers: 3, OpsPerKey: 300, Unfenced: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Violations == 0 {
		t.Fatalf("%d ops with unfenced writes, and no violation found", rep.Ops)
	}
	t.Logf("%d ops, %d violations found, as expected", rep.Ops, rep.Violations)
}

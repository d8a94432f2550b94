package engine

import (
	"slices"
	"testing"
	"time"
)

// TestJointSQLCachedPerShape: jointSQL builds a statement once per shape
// of its ops and takes it from the cache after; every dimension of a
// shape that changes the text must be in the cache key. Each list of ops
// below differs from the others in one such dimension, and each is built
// after all the others are cached: the text and the arguments must be
// those built afresh.
func TestJointSQLCachedPerShape(t *testing.T) {
	cols := Columns{Key: "id", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation", State: "status", UpdatedAt: "updated_at"}
	renamed := cols
	renamed.Generation, renamed.UpdatedAt = "gen", ""
	for _, d := range []Dialect{Postgres, MySQL} {
		t.Run(d.String(), func(t *testing.T) {
			mk := func(table string, c Columns) *Lease[string] {
				l, err := New[string](d, MustTable(table, c), Options{SkipCheck: true})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			a, b := mk("t_a", cols), mk("t_b", cols)
			sameAsA, other := mk("t_a", cols), mk("t_a", renamed)
			tok, err := NewToken()
			if err != nil {
				t.Fatal(err)
			}
			g := func(key string, gen int64) Grant[string] {
				return Grant[string]{Key: key, Holder: "h", Token: tok, Generation: gen, TTL: time.Second}
			}
			change := func(o ChangeOptions) ChangeOptions { o.TTL = time.Second; return o }
			lists := [][]JointOp{
				{ConfirmOp(a, g("1", 1)), ConfirmOp(b, g("2", 2))},
				{ConfirmOp(a, g("1", 1)), ReleaseOp(b, g("2", 2))},
				{ConfirmOp(b, g("1", 1)), ConfirmOp(a, g("2", 2))},
				{ConfirmOp(other, g("1", 1)), ConfirmOp(b, g("2", 2))},
				{ConfirmOp(a, g("1", 1)), TransitionOp(b, g("2", 2), change(ChangeOptions{From: []string{"processing"}, To: "success"}))},
				{ConfirmOp(a, g("1", 1)), TransitionOp(b, g("2", 2), change(ChangeOptions{From: []string{"processing", "started"}, To: "success"}))},
				{ConfirmOp(a, g("1", 1)), TransitionOp(b, g("2", 2), change(ChangeOptions{From: []string{"processing"}}))},
				{ConfirmOp(a, g("1", 1)), TransitionOp(b, g("2", 2), change(ChangeOptions{From: []string{"processing"}, To: "success", Keep: true}))},
				{ConfirmOp(a, g("1", 1)), TransitionOp(b, g("2", 2), change(ChangeOptions{From: []string{"processing"}, To: "success", Set: []Assignment{Set("reply", "r")}}))},
				{ConfirmOp(a, g("1", 1)), TransitionOp(b, g("2", 2), change(ChangeOptions{From: []string{"processing"}, To: "success", Set: []Assignment{Set("result", "r")}}))},
				{ConfirmOp(a, g("1", 1)), TransitionOp(b, g("2", 2), change(ChangeOptions{From: []string{"processing"}, To: "success", Set: []Assignment{Set("reply", "r"), Set("result", "s")}}))},
				{ConfirmOp(a, g("1", 1)), ConfirmOp(b, g("2", 2)), ReleaseOp(b, g("3", 3))},
			}
			texts := map[string]int{}
			for round := range 2 {
				for i, ops := range lists {
					q, args := jointSQL(ops)
					want := compileJoint(ops)
					if q != want.query {
						t.Fatalf("round %d, list %d: cached text\n%s\nwant\n%s", round, i, q, want.query)
					}
					all := map[string]any{}
					for j, op := range ops {
						for k, v := range op.w.vals() {
							all[string(rune('0'+j))+"."+k] = v
						}
					}
					if wantArgs := want.args(all); !slices.Equal(args, wantArgs) {
						t.Fatalf("round %d, list %d: arguments %v, want %v", round, i, args, wantArgs)
					}
					if j, seen := texts[q]; seen && j != i {
						t.Fatalf("lists %d and %d differ in shape but built one text", j, i)
					}
					texts[q] = i
				}
			}
			// A Lease of the same dialect, table and columns is the same
			// shape: it shares the text.
			q1, _ := jointSQL([]JointOp{ConfirmOp(a, g("1", 1)), ConfirmOp(b, g("2", 2))})
			q2, _ := jointSQL([]JointOp{ConfirmOp(sameAsA, g("1", 1)), ConfirmOp(b, g("2", 2))})
			if q1 != q2 {
				t.Fatalf("same shape, two texts:\n%s\n%s", q1, q2)
			}
		})
	}
}

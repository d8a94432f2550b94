package engine

import (
	"math/rand/v2"
	"regexp"
	"testing"
	"time"
)

// TestShapedStatementsPerShape: each statement built per call comes from
// the shape cache; every input that changes its text must be in its key.
// Each call below differs from the others in one such input and runs
// after all the others are cached: its text must be the one built afresh.
func TestShapedStatementsPerShape(t *testing.T) {
	cols := Columns{Key: "id", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation", State: "status", UpdatedAt: "updated_at"}
	for _, d := range []Dialect{Postgres, MySQL, SQLite} {
		t.Run(d.String(), func(t *testing.T) {
			l, err := New[string](d, MustTable("t_shape", cols), Options{SkipCheck: true})
			if err != nil {
				t.Fatal(err)
			}
			one, two := []string{"a"}, []string{"a", "b"}
			set1, set2 := []Assignment{Set("x", 1)}, []Assignment{Set("y", 1)}
			type call struct {
				kind     string
				states   []string
				setState bool
				keep     bool
				set      []Assignment
			}
			build := map[string]func(c call) string{
				"acquire": func(c call) string { return l.b.acquire(c.states, c.setState, c.set, true) },
				"reenter": func(c call) string { return l.b.acquire(c.states, c.setState, c.set, false) },
				"change":  func(c call) string { return l.b.change(c.states, c.setState, c.set, c.keep) },
				"create":  func(c call) string { return l.b.create(c.setState, c.set) },
				"ensure":  func(c call) string { return l.b.ensure(c.setState, c.set) },
			}
			var calls []call
			for _, kind := range []string{"acquire", "reenter", "change", "create", "ensure"} {
				for _, states := range [][]string{nil, one, two} {
					if (kind == "create" || kind == "ensure") && states != nil {
						continue
					}
					for _, setState := range []bool{false, true} {
						for _, keep := range []bool{false, true} {
							if kind != "change" && keep {
								continue
							}
							for _, set := range [][]Assignment{nil, set1, set2, append(set1, set2...)} {
								calls = append(calls, call{kind, states, setState, keep, set})
							}
						}
					}
				}
			}
			texts := map[string]int{}
			for round := range 2 {
				for i, c := range calls {
					got := l.shapedStmt(c.kind, len(c.states), c.setState, c.keep, c.set, func() string { return build[c.kind](c) })
					want := compile(d, build[c.kind](c))
					if got.query != want.query {
						t.Fatalf("round %d, call %d %+v: cached\n%s\nwant\n%s", round, i, c, got.query, want.query)
					}
					if j, seen := texts[got.query]; seen && j != i && round == 0 {
						t.Fatalf("calls %d and %d differ in shape but built one text", j, i)
					}
					texts[got.query] = i
				}
			}
		})
	}
}

// TestValidIdentAsTheRegexp: the loop accepts exactly what
// ^[A-Za-z_][A-Za-z0-9_]{0,62}$ accepts.
func TestValidIdentAsTheRegexp(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
	cases := []string{"", "a", "_", "9", "a9", "_9", "a-b", "a b", "é", "aé", "A_Z_09", "a.b", "a\x00", "a\n"}
	long := "a"
	for len(long) < 70 {
		cases = append(cases, long)
		long += "b"
	}
	alphabet := []byte("aZ_09-. é\x00")
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(8))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got, want := validIdent(s), re.MatchString(s); got != want {
			t.Fatalf("validIdent(%q) = %v, the regexp says %v", s, got, want)
		}
	}
}

// TestAcquireCreateShapes: AcquireCreate's and AcquireCreateUnless's
// statements, cached per shape, are the text built afresh, and every
// shape of the guard (none, other columns matched, other columns read,
// more of either) gets a text of its own.
func TestAcquireCreateShapes(t *testing.T) {
	cols := Columns{Key: "id", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation", State: "status", UpdatedAt: "updated_at"}
	a, err := New[string](Postgres, MustTable("t_shape_a", cols), Options{SkipCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New[string](Postgres, MustTable("t_shape_c", cols), Options{SkipCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	m := func(cols ...string) []Assignment {
		var out []Assignment
		for _, col := range cols {
			out = append(out, Set(col, 1))
		}
		return out
	}
	guards := []*Unless{
		nil,
		{Match: m("x"), Columns: []string{"status"}},
		{Match: m("y"), Columns: []string{"status"}},
		{Match: m("x", "y"), Columns: []string{"status"}},
		{Match: m("x"), Columns: []string{"holder"}},
		{Match: m("x"), Columns: []string{"status", "holder"}},
	}
	texts := map[string]int{}
	for round := range 2 {
		for i, u := range guards {
			ao := NewAcquireOp(a, "k", "h", time.Second, AcquireOptions{})
			co := NewCreateOp(c, "k", "h", time.Second, CreateOptions{State: "processing"})
			got := acquireCreateStmt(ao, co, u)
			want := compile(Postgres, acquireCreateSQL(a.b, c.b, ao.o, co.o, u))
			if got.query != want.query {
				t.Fatalf("round %d, guard %d: cached\n%s\nwant\n%s", round, i, got.query, want.query)
			}
			if j, seen := texts[got.query]; seen && j != i && round == 0 {
				t.Fatalf("guards %d and %d differ in shape but built one text", j, i)
			}
			texts[got.query] = i
		}
	}
}

// TestUnlessReadShapes: AcquireCreateUnless's read on MySQL and SQLite,
// cached per shape, is the text built afresh, and every shape of the
// guard gets a text of its own.
func TestUnlessReadShapes(t *testing.T) {
	cols := Columns{Key: "id", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation", State: "status", UpdatedAt: "updated_at"}
	set := func(cols ...string) []Assignment {
		var out []Assignment
		for _, col := range cols {
			out = append(out, Set(col, 1))
		}
		return out
	}
	guards := []Unless{
		{Match: set("x"), Columns: []string{"status"}},
		{Match: set("y"), Columns: []string{"status"}},
		{Match: set("x", "y"), Columns: []string{"status"}},
		{Match: set("x"), Columns: []string{"holder"}},
		{Match: set("x"), Columns: []string{"status", "holder"}},
	}
	for _, d := range []Dialect{MySQL, SQLite} {
		l, err := New[string](d, MustTable("t_unless", cols), Options{SkipCheck: true})
		if err != nil {
			t.Fatal(err)
		}
		texts := map[string]int{}
		for round := range 2 {
			for i, u := range guards {
				got, want := l.unlessStmt(u), compile(d, l.b.unlessRead(u, ""))
				if got.query != want.query {
					t.Fatalf("%s, round %d, guard %d: cached\n%s\nwant\n%s", d, round, i, got.query, want.query)
				}
				if j, seen := texts[got.query]; seen && j != i && round == 0 {
					t.Fatalf("%s: guards %d and %d differ in shape but built one text", d, j, i)
				}
				texts[got.query] = i
			}
		}
	}
}

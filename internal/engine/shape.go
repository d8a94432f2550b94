package engine

import (
	"strconv"
	"strings"
	"sync"
)

// Statements built per call — an acquire, a create or a transition with
// states and columns to set, a joint statement, AcquireCreate's — depend
// only on their shape: the Lease's dialect, table and columns
// (Lease.shape), the kind of statement, how many states it checks, and
// which columns it sets. shapeCache keeps each compiled once under a key
// that names all of these, so that a call lays out its arguments and
// builds no SQL text. Shapes are few (a program's tables times their
// kinds of write), so the cache stays small; Leases of the same dialect,
// table and columns share entries.
//
// Whoever gives a builder in stmt.go a new input that changes its text
// must put that input into the key (shapeKey, jointWrite.shape), or two
// shapes share one text; TestShapedStatementsPerShape and
// TestJointSQLCachedPerShape try every input they know of.
var shapeCache sync.Map // string -> compiled

// shaped returns the statement of key, compiled by build on its first use.
func shaped(key string, build func() compiled) compiled {
	if c, ok := shapeCache.Load(key); ok {
		return c.(compiled)
	}
	c := build()
	shapeCache.Store(key, c)
	return c
}

// shapeKey writes the shape of one statement of l: kind, the number of
// states checked, whether a state is set, keep, and the columns set, in
// order. Column names are identifiers (validated), so the separators
// cannot occur in them.
func shapeKey(b *strings.Builder, lshape, kind string, states int, setState, keep bool, set []Assignment) {
	b.WriteString(lshape)
	b.WriteByte(0)
	b.WriteString(kind)
	b.WriteByte(0)
	b.WriteString(strconv.Itoa(states))
	if setState {
		b.WriteByte('s')
	}
	if keep {
		b.WriteByte('k')
	}
	for _, a := range set {
		b.WriteByte(0)
		b.WriteString(a.Column)
	}
	b.WriteByte(1)
}

// shapedStmt is shaped for one statement of l.
func (l *Lease[K]) shapedStmt(kind string, states int, setState, keep bool, set []Assignment, build func() string) compiled {
	var b strings.Builder
	shapeKey(&b, l.shape, kind, states, setState, keep, set)
	return shaped(b.String(), func() compiled { return compile(l.dialect, build()) })
}

// acquireShape names the acquire statement o sends, under kind: the
// statement of a new token (kind), or, with o.Token set, that of a held
// one (kind+":reenter"), which keeps the reentry's parts (acquireParts).
func (o AcquireOptions) acquireShape(kind string) string {
	if o.Token.isZero() {
		return kind
	}
	return kind + ":reenter"
}

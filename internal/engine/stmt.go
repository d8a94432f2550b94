package engine

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rowlease/rowlease/internal/driver"
)

// A template is SQL with named parameters written {name}. compile turns it
// into a dialect's placeholders (its driver's Compile) once; the compiled
// form is cached.
type compiled struct {
	query string
	names []string // the argument names in placeholder order ("?" dialects repeat them)
	// slots are names as fields of leaseArgs (argOther: looked up by
	// name), worked out once by compile so that argsOf compares no text.
	slots []argSlot
}

var compileCache sync.Map // map[dialect+template]compiled

func compile(d Dialect, tmpl string) compiled {
	ck := d.String() + "\x00" + tmpl
	if c, ok := compileCache.Load(ck); ok {
		return c.(compiled)
	}
	var c compiled
	c.query, c.names = d.driver().Compile(tmpl)
	c.slots = make([]argSlot, len(c.names))
	for i, n := range c.names {
		c.slots[i] = slotOf(n)
	}
	compileCache.Store(ck, c)
	return c
}

// args lays out the named values in placeholder order.
func (c compiled) args(vals map[string]any) []any {
	out := make([]any, len(c.names))
	for i, n := range c.names {
		out[i] = vals[n]
	}
	return out
}

// argSlot names a field of leaseArgs.
type argSlot uint8

const (
	argOther argSlot = iota // not a field: leaseArgs.more
	argKey
	argTok
	argHolder
	argTTL
	argGen
	argState
)

func slotOf(name string) argSlot {
	switch name {
	case "key":
		return argKey
	case "tok":
		return argTok
	case "holder":
		return argHolder
	case "ttl":
		return argTTL
	case "gen":
		return argGen
	case "state":
		return argState
	}
	return argOther
}

// leaseArgs are the named values of a statement, as vals gives them in a
// map: the names that every lease statement draws from as fields, any
// other (a state condition's s0…, an assignment's v0…) in more. A name
// without a value is sent as NULL, as a name missing from the map is.
// Acquire, Renew and Release lay out their arguments from it (argsOf),
// with no map to build and no name to hash.
type leaseArgs struct {
	key, tok, holder, ttl, gen, state any
	more                              map[string]any
}

func (a *leaseArgs) at(s argSlot, name string) any {
	switch s {
	case argKey:
		return a.key
	case argTok:
		return a.tok
	case argHolder:
		return a.holder
	case argTTL:
		return a.ttl
	case argGen:
		return a.gen
	case argState:
		return a.state
	}
	return a.more[name]
}

// argsOf is args for the values in a.
func (c compiled) argsOf(a *leaseArgs) []any {
	out := make([]any, len(c.names))
	for i, n := range c.names {
		s := argOther
		if i < len(c.slots) {
			s = c.slots[i]
		} else {
			s = slotOf(n) // built without compile (compileJoint)
		}
		out[i] = a.at(s, n)
	}
	return out
}

func vals(extra ...any) map[string]any {
	m := make(map[string]any, len(extra)/2+4)
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

// heldVals are the arguments of a statement that leaves key held by
// holder under tok for ttl: an acquire (state set, states checked) or a
// create (state set, states nil); Create and AcquireCreate (AcquireWith
// lays out the same values from a leaseArgs).
func heldVals(key any, tok Token, holder string, ttl time.Duration, state string, states []string, set []Assignment) map[string]any {
	m := vals("key", key, "tok", tok.secret(), "holder", holder, "ttl", ttl.Microseconds(), "state", state)
	addStates(m, states)
	addSet(m, set)
	return m
}

// grantVals are the arguments of a token-checked statement on g's row
// (Delete, a joint release; Release lays out the same values from a
// leaseArgs).
func grantVals[K Key](g Grant[K]) map[string]any {
	return vals("key", g.Key, "tok", g.Token.secret(), "gen", g.Generation)
}

// confirmVals are Confirm's arguments: it renews for g.TTL.
func confirmVals[K Key](g Grant[K]) map[string]any {
	m := grantVals(g)
	m["ttl"] = g.TTL.Microseconds()
	return m
}

// changeVals are Transition's arguments.
func changeVals[K Key](g Grant[K], o ChangeOptions) map[string]any {
	m := grantVals(g)
	m["ttl"], m["state"] = o.TTL.Microseconds(), o.To
	addStates(m, o.From)
	addSet(m, o.Set)
	return m
}

func addStates(m map[string]any, states []string) {
	for i, s := range states {
		m["s"+strconv.Itoa(i)] = s
	}
}

func addSet(m map[string]any, set []Assignment) {
	for i, a := range set {
		m["v"+strconv.Itoa(i)] = a.Value
	}
}

// sqlBuilder writes the statements of one table in one dialect. The
// statements every dialect writes alike (an UPDATE's skeleton, its
// conditions) are composed here; whatever differs between dialects —
// quoting, the clock, placeholders, how a generation comes back, locking
// reads, upserts, row lists — is the driver's text.
type sqlBuilder struct {
	drv driver.Driver
	t   Table
	// alias, when set, names the table in a MySQL multi-table UPDATE (see
	// Joint): every column is qualified with it, and no generation is
	// handed back through LAST_INSERT_ID (one statement cannot hand back
	// several; the rows changed prove the writes instead).
	alias string
}

func (s sqlBuilder) col(c string) string {
	if s.alias != "" {
		return s.alias + "." + s.drv.Quote(c)
	}
	return s.drv.Quote(c)
}

// genAcquire is the generation after an acquire: unchanged on reentry (same
// token), +1 on a new grant. On MySQL it is wrapped in LAST_INSERT_ID(expr)
// so the value comes back in the OK packet, and it is the first assignment:
// MySQL evaluates SET left to right on already-updated values, so it must
// read the old token.
func (s sqlBuilder) genAssign(acquire bool) string {
	g, tok := s.col(s.t.cols.Generation), s.col(s.t.cols.Token)
	expr := g
	if acquire {
		expr = "CASE WHEN " + tok + " = {tok} THEN " + g + " ELSE " + g + " + 1 END"
	}
	if s.alias == "" {
		if back := s.drv.GenerationBack(g, expr); back != "" {
			return back
		}
	}
	if !acquire {
		return ""
	}
	return g + " = " + expr
}

// genAssignNew is the generation after an acquire under a new token:
// always +1 (genAssign's CASE, whose THEN only a held token takes),
// handed back on MySQL as genAssign does.
func (s sqlBuilder) genAssignNew() string {
	g := s.col(s.t.cols.Generation)
	expr := g + " + 1"
	if s.alias == "" {
		if back := s.drv.GenerationBack(g, expr); back != "" {
			return back
		}
	}
	return g + " = " + expr
}

// expAssign sets the expiry to now + ttl. For the same token (renewal,
// reentry) it never moves the expiry backwards and always changes it: when
// the stored expiry is already at or past now+ttl it advances by one
// microsecond. It reads the old token and expiry, so on MySQL it must come
// before the assignments to either. Every successful write therefore changes the
// row, so MySQL's changed-rows count is 1 even when a renew lands in the same
// microsecond as the previous write.
func (s sqlBuilder) expAssign() string {
	e, tok := s.col(s.t.cols.ExpiresAt), s.col(s.t.cols.Token)
	target := s.drv.PlusMicros(s.drv.Now(), "{ttl}")
	return e + " = CASE WHEN " + tok + " = {tok} AND " + e + " IS NOT NULL AND " + e + " >= " + target +
		" THEN " + s.drv.PlusMicros(e, "1") + " ELSE " + target + " END"
}

func (s sqlBuilder) stateIn(states []string) string {
	if len(states) == 0 {
		return ""
	}
	ph := make([]string, len(states))
	for i := range states {
		ph[i] = "{s" + strconv.Itoa(i) + "}"
	}
	return " AND " + s.col(s.t.cols.State) + " IN (" + strings.Join(ph, ", ") + ")"
}

func (s sqlBuilder) tail(setState bool, set []Assignment) []string {
	var out []string
	if setState {
		out = append(out, s.col(s.t.cols.State)+" = {state}")
	}
	for i, a := range set {
		out = append(out, s.col(a.Column)+" = {v"+strconv.Itoa(i)+"}")
	}
	if s.t.cols.UpdatedAt != "" {
		out = append(out, s.col(s.t.cols.UpdatedAt)+" = "+s.drv.Now())
	}
	return out
}

func (s sqlBuilder) returning() string { return s.drv.Returning(s.col(s.t.cols.Generation)) }

func (s sqlBuilder) update(assigns []string, where string) string {
	return s.updateR(assigns, where, true)
}

// assignList joins the non-empty assignments.
func assignList(assigns []string) string {
	var parts []string
	for _, a := range assigns {
		if a != "" {
			parts = append(parts, a)
		}
	}
	return strings.Join(parts, ", ")
}

// updateR is update with RETURNING only when ret is set.
func (s sqlBuilder) updateR(assigns []string, where string, ret bool) string {
	q := "UPDATE " + s.t.qname(s.drv) + " SET " + assignList(assigns) + " WHERE " + where
	if ret {
		q += s.returning()
	}
	return q
}

func (s sqlBuilder) keyIs() string { return s.col(s.t.cols.Key) + " = {key}" }

// grantIs is the condition of every token-checked statement on one row:
// the key, the token and the generation of the grant. The token alone is
// not enough: it can be granted again (a reentry with
// AcquireOptions.Token that finds the row free is a new grant,
// generation+1, under the same token), and a copy of the earlier grant
// must not renew, release, change or delete the newer one.
func (s sqlBuilder) grantIs() string {
	return s.keyIs() + " AND " + s.col(s.t.cols.Token) + " = {tok} AND " + s.col(s.t.cols.Generation) + " = {gen}"
}

func (s sqlBuilder) acquire(inStates []string, setState bool, set []Assignment, fresh bool) string {
	return s.update(s.acquireParts(inStates, setState, set, fresh))
}

// acquireParts are the assignments and the condition of acquire. fresh:
// the token is one the acquire has just drawn (AcquireOptions.Token not
// set), which no row holds; the statement then leaves out what only a
// reentry with a held token needs — the generation kept and the expiry
// never moved backwards for the same token, and the token as a condition
// — since for a new token every one of those CASEs takes its ELSE and the
// condition never matches: the same writes, in about half the text (and,
// on MySQL, half the parameters), which the server parses and evaluates
// on every acquire.
func (s sqlBuilder) acquireParts(inStates []string, setState bool, set []Assignment, fresh bool) ([]string, string) {
	c := s.t.cols
	tok, e := s.col(c.Token), s.col(c.ExpiresAt)
	gen, exp, held := s.genAssign(true), s.expAssign(), " OR "+tok+" = {tok}"
	if fresh {
		gen, exp, held = s.genAssignNew(), e+" = "+s.drv.PlusMicros(s.drv.Now(), "{ttl}"), ""
	}
	assigns := []string{gen, exp, tok + " = {tok}", s.col(c.Holder) + " = {holder}"}
	assigns = append(assigns, s.tail(setState, set)...)
	where := s.keyIs() + s.stateIn(inStates) +
		" AND (" + tok + " IS NULL" + held + " OR " + e + " IS NULL OR " + e + " <= " + s.drv.Now() + ")"
	return assigns, where
}

func (s sqlBuilder) renew() string {
	assigns := []string{s.genAssign(false), s.expAssign()}
	assigns = append(assigns, s.tail(false, nil)...)
	return s.update(assigns, s.grantIs())
}

// release is the plain Release: it needs no generation back, so on
// PostgreSQL and SQLite it has no RETURNING and succeeds on one row
// affected. (On MySQL the token goes from a value to NULL, so the row
// always changes; the LAST_INSERT_ID assignment is kept for one code path.)
func (s sqlBuilder) release() string {
	assigns, where := s.releaseParts()
	return s.updateR(assigns, where, false)
}

// releaseParts are the assignments and the condition of release.
func (s sqlBuilder) releaseParts() ([]string, string) {
	c := s.t.cols
	assigns := []string{s.genAssign(false), s.col(c.ExpiresAt) + " = NULL", s.col(c.Token) + " = NULL", s.col(c.Holder) + " = NULL"}
	return append(assigns, s.tail(false, nil)...), s.grantIs()
}

// delete removes the row if the grant (token and generation) still matches.
func (s sqlBuilder) delete() string {
	return "DELETE FROM " + s.t.qname(s.drv) + " WHERE " + s.grantIs()
}

// change frees the lease (holder, token and expiry to NULL); with keep it
// instead renews it. Transition uses it.
func (s sqlBuilder) change(inStates []string, setState bool, set []Assignment, keep bool) string {
	return s.update(s.changeParts(inStates, setState, set, keep))
}

// changeParts are the assignments and the condition of change.
func (s sqlBuilder) changeParts(inStates []string, setState bool, set []Assignment, keep bool) ([]string, string) {
	c := s.t.cols
	assigns := []string{s.genAssign(false)}
	if keep {
		assigns = append(assigns, s.expAssign())
	} else {
		assigns = append(assigns, s.col(c.ExpiresAt)+" = NULL", s.col(c.Token)+" = NULL", s.col(c.Holder)+" = NULL")
	}
	assigns = append(assigns, s.tail(setState, set)...)
	return assigns, s.grantIs() + s.stateIn(inStates)
}

func (s sqlBuilder) verify(lock bool) string {
	c := s.t.cols
	q := "SELECT " + s.col(c.Generation) + " FROM " + s.t.qname(s.drv) + " WHERE " + s.grantIs() +
		" AND " + s.col(c.ExpiresAt) + " > " + s.drv.Now()
	if lock {
		q += s.drv.ForUpdate()
	}
	return q
}

// confirm is renew with two more conditions: the lease has not expired,
// and its generation is the grant's. A token can be granted again after
// another holder held the lease (a reentry that finds the row free is a
// new grant, generation+1, under the same token): a copy of the earlier
// grant must not pass.
func (s sqlBuilder) confirm() string { return s.update(s.confirmParts()) }

// confirmParts are the assignments and the condition of confirm.
func (s sqlBuilder) confirmParts() ([]string, string) {
	assigns := []string{s.genAssign(false), s.expAssign()}
	return append(assigns, s.tail(false, nil)...), s.grantIs() + " AND " + s.col(s.t.cols.ExpiresAt) + " > " + s.drv.Now()
}

func (s sqlBuilder) inspect() string {
	c := s.t.cols
	e := s.col(c.ExpiresAt)
	state := "''"
	if c.State != "" {
		state = "COALESCE(" + s.col(c.State) + ", '')"
	}
	return "SELECT COALESCE(" + s.col(c.Holder) + ", ''), " + s.col(c.Generation) + ", " + state +
		", CASE WHEN " + s.col(c.Token) + " IS NOT NULL AND " + e + " > " + s.drv.Now() + " THEN 1 ELSE 0 END" +
		", CASE WHEN " + e + " IS NULL THEN 0 ELSE " + s.drv.MicrosUntil(e) + " END" +
		" FROM " + s.t.qname(s.drv) + " WHERE " + s.keyIs()
}

func (s sqlBuilder) create(setState bool, set []Assignment) string {
	cols, vals := s.createParts(setState, set)
	return s.insertText(cols, vals)
}

// createParts are the columns and the values of create (see also
// AcquireCreate, which inserts them with a SELECT).
func (s sqlBuilder) createParts(setState bool, set []Assignment) (cols, vals []string) {
	c := s.t.cols
	cols = []string{s.col(c.Key), s.col(c.Holder), s.col(c.Token), s.col(c.ExpiresAt), s.col(c.Generation)}
	vals = []string{"{key}", "{holder}", "{tok}", s.drv.PlusMicros(s.drv.Now(), "{ttl}"), "1"}
	return s.insertParts(cols, vals, setState, set)
}

func (s sqlBuilder) insert(cols, vals []string, setState bool, set []Assignment) string {
	return s.insertText(s.insertParts(cols, vals, setState, set))
}

// insertParts adds the state, the extra assignments and the updated_at
// stamp to an insert's columns and values.
func (s sqlBuilder) insertParts(cols, vals []string, setState bool, set []Assignment) ([]string, []string) {
	c := s.t.cols
	if setState {
		cols, vals = append(cols, s.col(c.State)), append(vals, "{state}")
	}
	for i, a := range set {
		cols, vals = append(cols, s.col(a.Column)), append(vals, "{v"+strconv.Itoa(i)+"}")
	}
	if c.UpdatedAt != "" {
		cols, vals = append(cols, s.col(c.UpdatedAt)), append(vals, s.drv.Now())
	}
	return cols, vals
}

func (s sqlBuilder) insertText(cols, vals []string) string {
	return "INSERT INTO " + s.t.qname(s.drv) + " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ")"
}

func (s sqlBuilder) ensure(setState bool, set []Assignment) string {
	c := s.t.cols
	q := s.insert([]string{s.col(c.Key), s.col(c.Generation)}, []string{"{key}", "0"}, setState, set)
	return q + s.drv.InsertIgnore(s.col(c.Key))
}

// lockWrite is an UPDATE that matches no row: on SQLite it starts the
// transaction's write (and takes the database's write lock) without
// changing anything or firing a trigger.
func (s sqlBuilder) lockWrite() string {
	g := s.col(s.t.cols.Generation)
	return "UPDATE " + s.t.qname(s.drv) + " SET " + g + " = " + g + " WHERE 1 = 0"
}

// renewMany is the batch renewal of the grants gs[i], i in idx: Renew's
// expiry rule with the token and generation already matched by the WHERE
// clause.
func (s sqlBuilder) renewMany(gs any, idx []int, ttl time.Duration) (string, []any) {
	keys, toks, gens := anyBatchArgs(gs, idx)
	c := s.t.cols
	e, k, tok, gen := s.col(c.ExpiresAt), s.col(c.Key), s.col(c.Token), s.col(c.Generation)
	ttlText := strconv.FormatInt(ttl.Microseconds(), 10)
	target := s.drv.PlusMicros(s.drv.Now(), ttlText)
	assigns := []string{e + " = CASE WHEN " + e + " IS NOT NULL AND " + e + " >= " + target +
		" THEN " + s.drv.PlusMicros(e, "1") + " ELSE " + target + " END"}
	assigns = append(assigns, s.tail(false, nil)...)
	keyList, pairList, args := s.drv.Pairs(keys, toks, gens)
	q := "UPDATE " + s.t.qname(s.drv) + " SET " + strings.Join(assigns, ", ") +
		" WHERE " + k + " IN (" + keyList + ") AND (" + k + ", " + tok + ", " + gen + ") IN (" + pairList + ")"
	return q + s.drv.Returning(tok+", "+gen), args
}

// heldTokens reads which of the batch's tokens still hold their rows
// with the grant's generation.
func (s sqlBuilder) heldTokens(gs any, idx []int) (string, []any) {
	keys, toks, gens := anyBatchArgs(gs, idx)
	c := s.t.cols
	k, tok, gen := s.col(c.Key), s.col(c.Token), s.col(c.Generation)
	keyList, pairList, args := s.drv.Pairs(keys, toks, gens)
	return "SELECT " + tok + ", " + gen + " FROM " + s.t.qname(s.drv) + " WHERE " + k + " IN (" + keyList + ") AND (" +
		k + ", " + tok + ", " + gen + ") IN (" + pairList + ")", args
}

func batchArgs[K Key](gs []Grant[K], idx []int) ([]any, []string, []int64) {
	keys := make([]any, len(idx))
	toks := make([]string, len(idx))
	gens := make([]int64, len(idx))
	for j, i := range idx {
		keys[j], toks[j], gens[j] = gs[i].Key, gs[i].Token.secret(), gs[i].Generation
	}
	return keys, toks, gens
}

// anyBatchArgs is batchArgs for the builder, which is not generic.
func anyBatchArgs(gs any, idx []int) ([]any, []string, []int64) {
	return gs.(interface {
		batchArgs([]int) ([]any, []string, []int64)
	}).batchArgs(idx)
}

// grantList lets the builder read keys and tokens of any key type.
type grantList[K Key] []Grant[K]

func (g grantList[K]) batchArgs(idx []int) ([]any, []string, []int64) {
	return batchArgs([]Grant[K](g), idx)
}

package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Unless names the row that AcquireCreateUnless reads instead of
// writing: the row of the CreateOp's table whose Match columns hold the
// given values, and the Columns to read from it. Match should name a
// unique key of that table (a request's session and client request id,
// say): if several rows match, one of them is read.
type Unless struct {
	// Match is column = value, all of them: at least one, each column an
	// identifier named once.
	Match []Assignment
	// Columns are read from the row into AcquireCreateUnless's dest, in
	// order: at least one, each an identifier; never the token column,
	// which is a secret.
	Columns []string
}

// AcquireCreateUnless is AcquireCreate unless the row u names exists: a
// lookup and a claim in one, for "find this request, or take its session
// and insert it". When the row exists, nothing is written, its Columns
// are scanned into dest (as sql.Row.Scan would; one dest per column, so
// use sql.Null… or pointers for columns that can be NULL) and found is
// true, with zero grants. When it does not, the result is AcquireCreate's,
// with found false.
//
// On PostgreSQL it is one statement (AcquireCreate's data-modifying WITH,
// with the read first and the acquire made only if the read found
// nothing), wherever it runs. A row inserted by another transaction after
// the statement's snapshot is not seen by the read; when Match is a unique
// key that c's row fills with the same values (as it should be), that key
// then fails the insert, and the acquire is undone with the statement:
// *DuplicateKeyError, as from AcquireCreate. Without such a key nothing
// stops a second row. On MySQL and SQLite it is the
// read and then AcquireCreate, on db, which must be a transaction as
// AcquireCreate requires (checked before the read: on a pool it is a
// *ValidationError and sends nothing).
//
// Errors are AcquireCreate's, and *ValidationError (ErrInvalid) for a bad
// u or dest, before any SQL. When the row exists, neither write is
// reported to the Observers: none was made.
func AcquireCreateUnless[A, C Key](ctx context.Context, db DB, a AcquireOp[A], c CreateOp[C], u Unless, dest ...any) (ga Grant[A], gc Grant[C], found bool, err error) {
	if a.l == nil || c.l == nil {
		return Grant[A]{}, Grant[C]{}, false, invalid("acquire-create", "zero op; build it with a Lease's AcquireOp and CreateOp")
	}
	if a.l.caps.AcquireCreate {
		return acquireCreateOne(ctx, db, a, c, &u, dest)
	}
	err = a.checkJoint(db, c)
	if err == nil {
		err = c.l.checkUnless(u, dest)
	}
	if err != nil {
		a.report(ctx, time.Now(), 0, err)
		c.report(ctx, time.Now(), 0, err)
		return Grant[A]{}, Grant[C]{}, false, err
	}
	vals := map[string]any{}
	u.addVals(vals)
	q := c.l.unlessStmt(u)
	switch err := resolve(db).QueryRowContext(ctx, q.query, q.args(vals)...).Scan(dest...); {
	case err == nil:
		return Grant[A]{}, Grant[C]{}, true, nil
	case !errors.Is(err, sql.ErrNoRows):
		return Grant[A]{}, Grant[C]{}, false, err
	}
	ga, gc, err = AcquireCreate(ctx, db, a, c)
	return ga, gc, false, err
}

// checkUnless checks u and dest against l's table.
func (l *Lease[K]) checkUnless(u Unless, dest []any) error {
	if len(u.Match) == 0 {
		return invalid("unless", "no column to match")
	}
	seen := map[string]bool{}
	for _, m := range u.Match {
		if !validIdent(m.Column) {
			return invalid("unless", fmt.Sprintf("match column %q is not a valid identifier", m.Column))
		}
		if seen[m.Column] {
			return invalid("unless", fmt.Sprintf("match column %q named twice", m.Column))
		}
		seen[m.Column] = true
	}
	if len(u.Columns) == 0 {
		return invalid("unless", "no column to read")
	}
	for _, col := range u.Columns {
		if !validIdent(col) {
			return invalid("unless", fmt.Sprintf("column %q is not a valid identifier", col))
		}
		if col == l.table.cols.Token {
			return invalid("unless", "the token column is a secret and is never read")
		}
	}
	if len(dest) != len(u.Columns) {
		return invalid("unless", fmt.Sprintf("%d columns to read into %d destinations", len(u.Columns), len(dest)))
	}
	for _, d := range dest {
		if d == nil {
			return invalid("unless", "nil destination")
		}
	}
	return nil
}

// shape writes u's part of the statement's shape key: the columns it
// matches and reads.
func (u Unless) shape(b *strings.Builder) {
	b.WriteString("unless")
	for _, m := range u.Match {
		b.WriteByte(0)
		b.WriteString(m.Column)
	}
	b.WriteByte(1)
	for _, col := range u.Columns {
		b.WriteByte(0)
		b.WriteString(col)
	}
	b.WriteByte(1)
}

// addVals adds the Match values to a statement's arguments, as
// {u.m0}, {u.m1}, ….
func (u Unless) addVals(m map[string]any) {
	for i, a := range u.Match {
		m["u.m"+strconv.Itoa(i)] = a.Value
	}
}

// unlessRead is the read of the row u names: its Columns, after lead
// (written as it is, for a column of the caller's own), from the row whose
// Match columns equal {u.m0}, {u.m1}, …; at most one row.
func (s sqlBuilder) unlessRead(u Unless, lead string) string {
	read := make([]string, len(u.Columns))
	for i, col := range u.Columns {
		read[i] = s.col(col)
	}
	match := make([]string, len(u.Match))
	for i, m := range u.Match {
		match[i] = s.col(m.Column) + " = {u.m" + strconv.Itoa(i) + "}"
	}
	return "SELECT " + lead + strings.Join(read, ", ") + " FROM " + s.t.qname(s.drv) + " WHERE " + strings.Join(match, " AND ") + " LIMIT 1"
}

// unlessStmt is the read of u on MySQL and SQLite, compiled once per shape.
func (l *Lease[K]) unlessStmt(u Unless) compiled {
	var key strings.Builder
	key.WriteString(l.shape)
	key.WriteByte(0)
	u.shape(&key)
	return shaped(key.String(), func() compiled { return compile(l.dialect, l.b.unlessRead(u, "")) })
}

// scanUnless runs AcquireCreateUnless's statement on PostgreSQL: the two
// generations, the found mark and the row's columns, scanned into dest
// only when the row exists (they are NULL when it does not, which a
// caller's plain destination could not hold).
func scanUnless(ctx context.Context, db DB, q compiled, all map[string]any, agen, cgen *sql.NullInt64, dest []any) (found bool, err error) {
	rows, err := resolve(db).QueryContext(ctx, q.query, q.args(all)...)
	if err != nil {
		return false, err
	}
	defer func() {
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
	}()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return false, err
		}
		return false, errors.New("lease: acquire-create-unless: the statement returned no row")
	}
	var mark sql.NullInt64
	head := []any{agen, cgen, &mark}
	skip := make([]any, len(dest))
	for i := range skip {
		skip[i] = new(any)
	}
	if err := rows.Scan(append(head, skip...)...); err != nil {
		return false, err
	}
	if !mark.Valid {
		return false, rows.Err()
	}
	if err := rows.Scan(append(head, dest...)...); err != nil {
		return false, err
	}
	return true, rows.Err()
}

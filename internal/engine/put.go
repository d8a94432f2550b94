package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rowlease/rowlease/internal/driver"
)

// Row is a row of a table of the caller's, for ConfirmPut: its values by
// column, and the columns of its primary (or a unique) key.
type Row struct {
	// Table is the table's name, optionally schema-qualified, as
	// NewTable validates it.
	Table string
	// Key are the columns of the key that ConfirmPut's upsert matches on
	// (a primary or unique key of Table); each is one of Columns.
	Key []string
	// Columns and Values: the row, one value per column, in order.
	Columns []string
	Values  []any
}

// ConfirmPut writes row — an insert, or, when a row with the same Key
// exists, an update of its other columns — only if g still holds, proved
// as Confirm proves it; when g no longer holds it writes nothing and
// returns a *LostError. It is for an append-only journal kept under a
// lease (package request records a run's steps with it): a write the
// holder was told is stored, and that no stale holder can make.
//
//   - PostgreSQL: one statement: Confirm's UPDATE … RETURNING in a
//     data-modifying WITH, and an INSERT … SELECT that reads it, ON
//     CONFLICT DO UPDATE. The confirmation renews g for g.TTL and locks
//     its row until the statement ends.
//   - SQLite: one statement: an INSERT … SELECT whose WHERE checks, by
//     the database clock, that g holds (token, generation, not expired),
//     ON CONFLICT DO UPDATE. SQLite lets one writer in at a time and the
//     statement takes the write lock before it reads, so nothing can take
//     the lease over between the check and the write. g is not renewed.
//   - MySQL/MariaDB: one transaction of two statements: Confirm (a write
//     of g's row, which a multi-primary cluster such as Galera certifies
//     against a concurrent takeover on another node), then INSERT … ON
//     DUPLICATE KEY UPDATE. A transaction that ended as a deadlock or
//     certification victim is run again, as RunFenced does.
//
// db must be a pool (*sql.DB, *sqlx.DB) or, on PostgreSQL and SQLite, any
// DB; on MySQL it must begin transactions. Bad input — a nil db, an
// invalid table or column name, no columns, a value count that differs,
// a Key column not among Columns, every column in Key — is a
// *ValidationError before any SQL. The write is one row and costs the same
// whatever the table already holds.
func ConfirmPut[K Key](ctx context.Context, l *Lease[K], db DB, g Grant[K], row Row) (err error) {
	if l.obs != nil {
		var gen int64
		defer l.observe(ctx, "confirm_put", VerdictOK, time.Now(), &gen, &err)
	}
	if err := l.checkConfirm(db, g); err != nil {
		return err
	}
	if err := checkRow(row); err != nil {
		return err
	}
	m := confirmVals(g)
	for i, v := range row.Values {
		m["c"+strconv.Itoa(i)] = v
	}
	if !l.caps.PutInOne {
		return l.putTx(ctx, db, g, row, m)
	}
	c := compile(l.dialect, l.putSQL(row))
	var n int64
	_, err = l.sendConfirmed(ctx, db, c.query, func(q string) (bool, error) {
		res, err := l.execQ(ctx, db, q, c.args(m))
		if err != nil {
			return false, err
		}
		n, err = res.RowsAffected()
		return n == 0, err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return &LostError{Key: keyText(g.Key), Op: "confirm put"}
	}
	return nil
}

// putSQL is ConfirmPut's write, as its driver writes it: with
// Caps.PutInOne the one statement, else the upsert that follows a Confirm.
func (l *Lease[K]) putSQL(row Row) string {
	s := l.b
	cols := make([]string, len(row.Columns))
	ph := make([]string, len(row.Columns))
	var update []string
	for i, c := range row.Columns {
		cols[i], ph[i] = l.drv.Quote(c), "{c"+strconv.Itoa(i)+"}"
		if !slices.Contains(row.Key, c) {
			update = append(update, cols[i])
		}
	}
	key := make([]string, len(row.Key))
	for i, c := range row.Key {
		key[i] = l.drv.Quote(c)
	}
	p := driver.PutParams{
		Into:   "INSERT INTO " + Table{name: row.Table}.qname(l.drv) + " (" + strings.Join(cols, ", ") + ")",
		Values: strings.Join(ph, ", "),
		Key:    key,
		Update: update,
	}
	if l.caps.PutInOne {
		p.Confirm = s.confirm()
		p.Held = "SELECT 1 FROM " + s.t.qname(l.drv) + " WHERE " + s.grantIs() + " AND " + s.col(s.t.cols.ExpiresAt) + " > " + l.drv.Now()
	}
	return l.drv.ConfirmPut(p)
}

// putTx is ConfirmPut where it is not one statement (MySQL): Confirm,
// then the upsert, in one transaction, run again as a deadlock or
// certification victim.
func (l *Lease[K]) putTx(ctx context.Context, db DB, g Grant[K], row Row, m map[string]any) error {
	b, ok := resolve(db).(TxBeginner)
	if !ok {
		return invalid("db", fmt.Sprintf("%T cannot begin a transaction (ConfirmPut on MySQL needs a pool)", db))
	}
	ins := compile(l.dialect, l.putSQL(row))
	return RetryVictims(ctx, l.dialect, b, func() error {
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := l.Confirm(ctx, tx, g); err != nil {
			_ = tx.Rollback()
			if lost, ok := err.(*LostError); ok {
				lost.Op = "confirm put"
			}
			return err
		}
		if _, err := tx.ExecContext(ctx, ins.query, ins.args(m)...); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("lease: commit of a confirmed put (outcome unknown): %w", err)
		}
		return nil
	})
}

// checkRow checks ConfirmPut's row before any SQL.
func checkRow(row Row) error {
	if err := checkTableName(row.Table); err != nil {
		return err
	}
	if len(row.Columns) == 0 {
		return invalid("row columns", "none")
	}
	if len(row.Values) != len(row.Columns) {
		return invalid("row values", fmt.Sprintf("%d values for %d columns", len(row.Values), len(row.Columns)))
	}
	seen := map[string]bool{}
	for _, c := range row.Columns {
		if !validIdent(c) {
			return invalid("row column", fmt.Sprintf("%q is not a valid identifier", c))
		}
		if seen[c] {
			return invalid("row column", fmt.Sprintf("%q given twice", c))
		}
		seen[c] = true
	}
	if len(row.Key) == 0 {
		return invalid("row key", "none")
	}
	for _, c := range row.Key {
		if !seen[c] {
			return invalid("row key", fmt.Sprintf("%q is not one of the row's columns", c))
		}
	}
	if len(row.Key) >= len(row.Columns) {
		return invalid("row key", "every column is in the key: nothing to update on conflict")
	}
	return nil
}

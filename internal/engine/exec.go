package engine

import (
	"context"
	"database/sql"
	"errors"

	"github.com/rowlease/rowlease/internal/retry"
)

// exec runs an UPDATE that hands back the generation and reports whether it
// matched the row; args are its arguments in placeholder order (c.args,
// c.argsOf). PostgreSQL and SQLite use RETURNING. MySQL reads the
// value that LAST_INSERT_ID(expr) put in the OK packet when rows affected
// is 1. Every successful statement changes a microsecond expiry column, so
// 1 is what a match reports in either affected-rows mode. Only on a
// declared coarser column (Options.ExpiryResolution) can a renewal in the
// same second leave the row unchanged; there, and only there, 0 rows
// affected with a non-zero insert id counts as a match (MySQL sends 0 when
// no row was evaluated; engines that misreport LAST_INSERT_ID(expr), as
// Vitess 16.0 did, must not be given a coarse column).
//
// A deadlock, serialization or certification victim in autocommit is sent
// again (see retry). A token-checked statement (checked) that matched
// no row is, with Options.MultiPrimary, sent once more causally: only a
// second miss is a miss.
func (l *Lease[K]) exec(ctx context.Context, db DB, c compiled, args []any, checked bool) (gen int64, ok bool, err error) {
	_, err = l.sendConfirmed(ctx, db, c.query, func(q string) (bool, error) {
		var err error
		gen, ok, err = l.execOnce(ctx, db, q, args)
		return !ok && checked, err
	})
	return gen, ok, err
}

// sendConfirmed sends q through send, again as a deadlock, serialization
// or certification victim in autocommit (see retry). When send reports a
// miss (a token-checked statement that matched no row) on a multi-primary
// Lease (Options.MultiPrimary), q is sent once more causally: only a
// second miss is a miss. It returns the last send's miss and error.
func (l *Lease[K]) sendConfirmed(ctx context.Context, db DB, q string, send func(q string) (miss bool, err error)) (miss bool, err error) {
	run := func(q string) error {
		return l.retry(ctx, db, func() error {
			var err error
			miss, err = send(q)
			return err
		})
	}
	if err = run(q); err == nil && miss && l.multiPrimary {
		err = run(l.drv.Causal(q))
	}
	return miss, err
}

func (l *Lease[K]) execOnce(ctx context.Context, db DB, q string, args []any) (gen int64, ok bool, err error) {
	if l.caps.Returning {
		err = l.queryRow(ctx, db, q, args).Scan(&gen)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return gen, err == nil, err
	}
	res, err := l.execQ(ctx, db, q, args)
	if err != nil {
		return 0, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, false, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, false, err
	}
	if n == 1 || (n == 0 && id != 0 && l.coarse) {
		return id, true, nil
	}
	return 0, false, nil
}

func (l *Lease[K]) translate(k K, err error) error {
	if err == nil {
		return nil
	}
	if IsDuplicateKey(err) {
		return &DuplicateKeyError{Key: keyText(k), Err: err}
	}
	return err
}

// execOne runs a statement that needs nothing back and reports whether it
// affected exactly one row. Only for statements that always change the row
// they match (a token set to NULL, a row deleted), so that MySQL's
// changed-rows count is as good as a matched-rows count.
//
// Like exec, it sends a victim again in autocommit and, with
// Options.MultiPrimary, confirms a miss causally.
func (l *Lease[K]) execOne(ctx context.Context, db DB, c compiled, args []any) (bool, error) {
	var n int64
	_, err := l.sendConfirmed(ctx, db, c.query, func(q string) (bool, error) {
		res, err := l.execQ(ctx, db, q, args)
		if err != nil {
			return false, err
		}
		n, err = res.RowsAffected()
		return n != 1, err
	})
	return n == 1, err
}

// autocommit reports whether statements on db run in autocommit: db is a
// pool (*sql.DB, *sqlx.DB), a pool's connection handed over with OnConn,
// or a FlowDB with no transaction open.
func autocommit(db DB) bool {
	switch resolve(db).(type) {
	case pool, pooledConn:
		return true
	}
	return false
}

// retry runs fn, and again after a jittered pause (retry.Backoff) while
// it fails as a deadlock or serialization victim, or — on a multi-primary
// cluster (Galera) — as a certification failure (MySQL error 1213,
// PostgreSQL 40001 or 40P01), up to retry.MaxAttempts runs in all. Such a
// statement took no effect, so on a pool, where it ran in autocommit,
// running it again is safe. Inside a transaction (a *sql.Tx, a *sql.Conn,
// a FlowDB routing into one) the whole transaction was rolled back, and
// the error is returned at once. SQLite's busy errors are not retried
// here: the busy timeout already waited.
func (l *Lease[K]) retry(ctx context.Context, db DB, fn func() error) error {
	return RetryVictims(ctx, l.dialect, db, fn)
}

// RetryVictims is Lease.retry for a statement of dialect d that is not one
// of Lease's (Joint's, and the upper floors' own autocommit statements):
// fn runs again, after a back-off, while it fails as a deadlock,
// serialization or certification victim on a dialect whose victims took
// no effect (driver.Caps.RetryVictims), and only when db is not a
// transaction (a victim inside one has rolled all of it back); at most
// retry.MaxAttempts runs.
func RetryVictims(ctx context.Context, d Dialect, db DB, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt >= retry.MaxAttempts || !d.driver().Caps().RetryVictims || !IsRetryable(err) || !autocommit(db) {
			return err
		}
		if !retry.Backoff(ctx, attempt) {
			return err
		}
	}
}

package engine

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
)

// OnConn returns conn, a connection that the pool db gave out (db.Conn),
// as the DB to pass to a Lease's operations that are to run on it: they
// then run as they do on db — in autocommit, a deadlock or serialization
// victim sent again, the first-use check (Check) counted as db's — but
// every statement goes to conn, so none of them waits for another of db's
// connections. Statements that the Lease keeps prepared on db are not
// used there: they are sent as text. The heartbeat renews on a connection
// of its own this way (heartbeat.BatchConfig.Pool).
//
// conn must not be inside a transaction begun with a plain BEGIN (one
// that Conn.BeginTx began is a *sql.Tx: pass that instead). When db is
// not a pool (a *sql.DB or *sqlx.DB: it has PrepareContext and Stats) or
// conn is nil, OnConn returns conn as it is.
func OnConn(db DB, conn *sql.Conn) DB {
	if _, ok := db.(pool); !ok || conn == nil || isNil(db) {
		return conn
	}
	return pooledConn{conn: conn, pool: db}
}

// pooledConn is a connection with the pool that gave it out (OnConn).
// Its statements run in autocommit, as on the pool.
type pooledConn struct {
	conn *sql.Conn
	pool DB // a pool (OnConn checked it)
}

// A statement that the connection refuses with driver.ErrBadConn was not
// sent (the driver says so with that error): it goes to the pool, which
// tries it on another connection, as a statement sent on the pool would
// have been.

func (c pooledConn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	res, err := c.conn.ExecContext(ctx, q, args...)
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return c.pool.ExecContext(ctx, q, args...)
	}
	return res, err
}

func (c pooledConn) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	rows, err := c.conn.QueryContext(ctx, q, args...)
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return c.pool.QueryContext(ctx, q, args...)
	}
	return rows, err
}

func (c pooledConn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	row := c.conn.QueryRowContext(ctx, q, args...)
	if err := row.Err(); errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return c.pool.QueryRowContext(ctx, q, args...)
	}
	return row
}

// BeginTx begins a transaction on the connection (the batch renewal's
// READ COMMITTED transaction on MySQL).
func (c pooledConn) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	return c.conn.BeginTx(ctx, opts)
}

// pinnable is a pool that gives out its connections (*sql.DB, *sqlx.DB).
type pinnable interface {
	pool
	connPool
}

// pin takes a connection of db for an operation whose grant's trust
// deadline counts from the send time of its statement, when db is a pool
// that gives out connections and the Lease sends its statements as text
// (its default on MySQL and PostgreSQL): the send time is then read once
// a connection was had, so that a wait for one, behind work that holds
// the others, does not eat the new grant's trust. Statements kept
// prepared on the pool (SQLite by default, PrepareAlways) take their
// connection themselves, and the send time is read before that wait.
// done gives the connection back.
func (l *Lease[K]) pin(ctx context.Context, db DB) (on DB, done func(), err error) {
	p, ok := db.(pinnable)
	if !ok || isNil(db) || l.prepares() {
		return db, noop, nil
	}
	c, err := p.Conn(ctx)
	if err != nil {
		return nil, noop, err
	}
	return pooledConn{conn: c, pool: db}, func() { _ = c.Close() }, nil
}

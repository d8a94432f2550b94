package countdb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
)

// OpenDB opens driverName/dsn through a counting driver wrapper and returns
// a *sql.DB whose every driver round trip is counted in c: statements
// executed on a connection or a prepared statement, prepares, begins,
// commits and rollbacks (see [Stats]). Transactions that library code opens
// on the returned *sql.DB are counted too.
//
// The driver is looked up with sql.Open(driverName, dsn).Driver(), so it
// must be registered (the *sql.DB used for the lookup is closed again). If
// the driver implements driver.DriverContext its connector is wrapped;
// otherwise connections are opened with the driver's Open(dsn).
func OpenDB(driverName, dsn string, c *Counter) (*sql.DB, error) {
	if c == nil {
		return nil, errors.New("countdb: nil Counter")
	}
	probe, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	d := probe.Driver()
	if err := probe.Close(); err != nil {
		return nil, fmt.Errorf("countdb: closing driver lookup: %w", err)
	}
	var connector driver.Connector
	if dc, ok := d.(driver.DriverContext); ok {
		if connector, err = dc.OpenConnector(dsn); err != nil {
			return nil, err
		}
	} else {
		connector = dsnConnector{dsn: dsn, d: d}
	}
	return sql.OpenDB(WrapConnector(connector, c)), nil
}

// WrapConnector returns connector with every connection it makes counted in
// c, as [OpenDB] does; use it with sql.OpenDB for a connector built by hand
// (such as pgx's stdlib.GetConnector). If connector is an io.Closer, so is
// the result, and closing it closes connector.
func WrapConnector(connector driver.Connector, c *Counter) driver.Connector {
	return &countConnector{ct: connector, c: c}
}

// dsnConnector opens connections with a driver.Driver's Open, as
// database/sql does for drivers without driver.DriverContext.
type dsnConnector struct {
	dsn string
	d   driver.Driver
}

func (t dsnConnector) Connect(context.Context) (driver.Conn, error) { return t.d.Open(t.dsn) }
func (t dsnConnector) Driver() driver.Driver                        { return t.d }

// countConnector wraps a driver.Connector, counting on the conns it makes.
type countConnector struct {
	ct driver.Connector
	c  *Counter
}

func (k *countConnector) Connect(ctx context.Context) (driver.Conn, error) {
	ci, err := k.ct.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return wrapConn(ci, k.c), nil
}

func (k *countConnector) Driver() driver.Driver { return &countDriver{d: k.ct.Driver(), c: k.c} }

// Close closes the wrapped connector if it is an io.Closer (sql.DB.Close
// calls this).
func (k *countConnector) Close() error {
	if cl, ok := k.ct.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// countDriver is what the wrapped connector reports as its driver: opening
// through it counts too.
type countDriver struct {
	d driver.Driver
	c *Counter
}

func (d *countDriver) Open(name string) (driver.Conn, error) {
	ci, err := d.d.Open(name)
	if err != nil {
		return nil, err
	}
	return wrapConn(ci, d.c), nil
}

// wrapConn wraps ci in the conn type that has exactly the session
// interfaces ci has: database/sql keeps a connection after a cancelled
// transaction only when it is both a driver.SessionResetter and a
// driver.Validator, so those two must not be claimed when ci lacks them.
// Every other optional interface is always implemented and falls back to
// database/sql's default behaviour when ci lacks it.
func wrapConn(ci driver.Conn, c *Counter) driver.Conn {
	base := &conn{ci: ci, c: c}
	_, r := ci.(driver.SessionResetter)
	_, v := ci.(driver.Validator)
	switch {
	case r && v:
		return &connRV{base}
	case r:
		return &connR{base}
	case v:
		return &connV{base}
	}
	return base
}

// conn is a counting driver.Conn. It implements driver.ConnBeginTx,
// driver.ConnPrepareContext, driver.ExecerContext, driver.QueryerContext,
// driver.NamedValueChecker and driver.Pinger whatever ci implements.
type conn struct {
	ci driver.Conn
	c  *Counter
}

// Unwrap returns the driver's own connection, for code that reaches it
// through sql.Conn.Raw.
func (k *conn) Unwrap() driver.Conn { return k.ci }

func (k *conn) Close() error { return k.ci.Close() }

func (k *conn) Prepare(query string) (driver.Stmt, error) {
	return k.PrepareContext(context.Background(), query)
}

func (k *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var si driver.Stmt
	var err error
	if pc, ok := k.ci.(driver.ConnPrepareContext); ok {
		si, err = pc.PrepareContext(ctx, query)
	} else {
		si, err = k.ci.Prepare(query)
		if err == nil && ctx.Err() != nil {
			si.Close()
			si, err = nil, ctx.Err()
		}
	}
	if k.c.counting() {
		k.c.prepares.Add(1)
	}
	if err != nil {
		return nil, err
	}
	s := &stmt{si: si, ci: k.ci, query: query, c: k.c}
	if _, ok := si.(driver.ColumnConverter); ok {
		return &stmtCC{s}, nil
	}
	return s, nil
}

func (k *conn) Begin() (driver.Tx, error) {
	return k.BeginTx(context.Background(), driver.TxOptions{})
}

func (k *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var txi driver.Tx
	var err error
	if bc, ok := k.ci.(driver.ConnBeginTx); ok {
		txi, err = bc.BeginTx(ctx, opts)
	} else {
		// As database/sql does for a driver without BeginTx.
		switch {
		case opts.Isolation != driver.IsolationLevel(sql.LevelDefault):
			return nil, errors.New("sql: driver does not support non-default isolation level")
		case opts.ReadOnly:
			return nil, errors.New("sql: driver does not support read-only transactions")
		}
		txi, err = k.ci.Begin() // fallback for old drivers
		if err == nil && ctx.Err() != nil {
			txi.Rollback()
			txi, err = nil, ctx.Err()
		}
	}
	if k.c.counting() {
		k.c.begins.Add(1)
	}
	if err != nil {
		return nil, err
	}
	return &tx{txi: txi, c: k.c}, nil
}

// ExecContext runs query directly when ci can (counting it), and returns
// driver.ErrSkip uncounted when ci cannot, so that database/sql prepares
// the statement and counts it there.
func (k *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	var res driver.Result
	var err error
	k.c.sending(query)
	if ec, ok := k.ci.(driver.ExecerContext); ok {
		res, err = ec.ExecContext(ctx, query, args)
	} else if e, ok := k.ci.(driver.Execer); ok { // fallback for old drivers
		var dargs []driver.Value
		if dargs, err = namedValueToValue(args); err != nil {
			return nil, err
		}
		if err = ctx.Err(); err != nil {
			return nil, err
		}
		res, err = e.Exec(query, dargs)
	} else {
		return nil, driver.ErrSkip
	}
	if err == driver.ErrSkip { // drivers return ErrSkip itself
		return nil, err
	}
	k.c.add(query)
	return k.c.execResult(query, res, err)
}

// QueryContext is ExecContext's counterpart for queries.
func (k *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	var rows driver.Rows
	var err error
	k.c.sending(query)
	if qc, ok := k.ci.(driver.QueryerContext); ok {
		rows, err = qc.QueryContext(ctx, query, args)
	} else if q, ok := k.ci.(driver.Queryer); ok { // fallback for old drivers
		var dargs []driver.Value
		if dargs, err = namedValueToValue(args); err != nil {
			return nil, err
		}
		if err = ctx.Err(); err != nil {
			return nil, err
		}
		rows, err = q.Query(query, dargs)
	} else {
		return nil, driver.ErrSkip
	}
	if err == driver.ErrSkip { // drivers return ErrSkip itself
		return nil, err
	}
	k.c.add(query)
	return k.c.queryResult(query, rows, err)
}

// CheckNamedValue forwards to ci, or returns driver.ErrSkip so that
// database/sql applies its default conversion.
func (k *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if nc, ok := k.ci.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (k *conn) Ping(ctx context.Context) error {
	if p, ok := k.ci.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (k *conn) resetSession(ctx context.Context) error {
	return k.ci.(driver.SessionResetter).ResetSession(ctx)
}

func (k *conn) isValid() bool { return k.ci.(driver.Validator).IsValid() }

// connR is a conn whose driver conn is a driver.SessionResetter.
type connR struct{ *conn }

func (k *connR) ResetSession(ctx context.Context) error { return k.resetSession(ctx) }

// connV is a conn whose driver conn is a driver.Validator.
type connV struct{ *conn }

func (k *connV) IsValid() bool { return k.isValid() }

// connRV is a conn whose driver conn is both.
type connRV struct{ *conn }

func (k *connRV) ResetSession(ctx context.Context) error { return k.resetSession(ctx) }
func (k *connRV) IsValid() bool                          { return k.isValid() }

// tx counts the end of a driver transaction.
type tx struct {
	txi driver.Tx
	c   *Counter
}

func (t *tx) Commit() error {
	if t.c.counting() {
		t.c.commits.Add(1)
	}
	if err := t.txi.Commit(); err != nil {
		return err
	}
	return t.c.failAfter(Commit)
}

func (t *tx) Rollback() error {
	if t.c.counting() {
		t.c.rollbacks.Add(1)
	}
	return t.txi.Rollback()
}

// stmt is a counting prepared statement: each Exec or Query is one
// statement. It implements driver.StmtExecContext, driver.StmtQueryContext
// and driver.NamedValueChecker whatever si implements.
type stmt struct {
	si    driver.Stmt
	ci    driver.Conn // the conn si was prepared on, for CheckNamedValue
	query string
	c     *Counter
}

func (s *stmt) Close() error  { return s.si.Close() }
func (s *stmt) NumInput() int { return s.si.NumInput() }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	s.c.sending(s.query)
	s.c.add(s.query)
	res, err := s.si.Exec(args) // forwarding the deprecated method
	return s.c.execResult(s.query, res, err)
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	s.c.sending(s.query)
	s.c.add(s.query)
	rows, err := s.si.Query(args) // forwarding the deprecated method
	return s.c.queryResult(s.query, rows, err)
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.sending(s.query)
	if ec, ok := s.si.(driver.StmtExecContext); ok {
		s.c.add(s.query)
		res, err := ec.ExecContext(ctx, args)
		return s.c.execResult(s.query, res, err)
	}
	dargs, err := namedValueToValue(args)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.Exec(dargs)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.sending(s.query)
	if qc, ok := s.si.(driver.StmtQueryContext); ok {
		s.c.add(s.query)
		rows, err := qc.QueryContext(ctx, args)
		return s.c.queryResult(s.query, rows, err)
	}
	dargs, err := namedValueToValue(args)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.Query(dargs)
}

// CheckNamedValue forwards to si, else to the conn (which is what
// database/sql would have used for a stmt without one), else returns
// driver.ErrSkip so that database/sql goes on to the column converter or
// its default conversion.
func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if nc, ok := s.si.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(nv)
	}
	if nc, ok := s.ci.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// stmtCC is a stmt whose driver stmt is a driver.ColumnConverter.
type stmtCC struct{ *stmt }

func (s *stmtCC) ColumnConverter(idx int) driver.ValueConverter {
	return s.si.(driver.ColumnConverter).ColumnConverter(idx) // forwarding the deprecated interface
}

// namedValueToValue is database/sql's conversion for drivers without the
// context methods.
func namedValueToValue(named []driver.NamedValue) ([]driver.Value, error) {
	dargs := make([]driver.Value, len(named))
	for n, param := range named {
		if len(param.Name) > 0 {
			return nil, errors.New("sql: driver does not support the use of Named Parameters")
		}
		dargs[n] = param.Value
	}
	return dargs, nil
}

// Interface checks.
var (
	_ driver.Connector          = (*countConnector)(nil)
	_ io.Closer                 = (*countConnector)(nil)
	_ driver.Conn               = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*connR)(nil)
	_ driver.Validator          = (*connV)(nil)
	_ driver.SessionResetter    = (*connRV)(nil)
	_ driver.Validator          = (*connRV)(nil)
	_ driver.Tx                 = (*tx)(nil)
	_ driver.StmtExecContext    = (*stmt)(nil)
	_ driver.StmtQueryContext   = (*stmt)(nil)
	_ driver.NamedValueChecker  = (*stmt)(nil)
	_ driver.ColumnConverter    = (*stmtCC)(nil)
)

package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"

	"github.com/rowlease/rowlease/internal/driver"
)

// maxWarned bounds the pools remembered as warned about.
const maxWarned = 64

// Probe reads the expiry column's type and fractional digits from
// information_schema. On a go-sql-driver pool the read is sent with one
// argument that changes nothing, through the connection itself (see
// probeRaw), which also tells whether the DSN has interpolateParams=true;
// when it has not, and the Lease does not prepare everything anyway, a
// warning is logged once per pool.
func (Driver) Probe(ctx context.Context, db driver.DB, p driver.ProbeParams) (driver.ProbeResult, error) {
	var schema, typ sql.NullString
	var prec sql.NullInt64
	q := probeSQL(p)
	found, interpolates, raw := probeRaw(ctx, db, q, &typ, &prec)
	var err error
	switch {
	case raw == nil && interpolates:
		if !found {
			err = sql.ErrNoRows
		}
	default:
		if raw == nil && !interpolates && !p.PrepareAlways {
			warnInterpolate(ctx, db, p)
		}
		err = db.QueryRowContext(ctx, q).Scan(&schema, &typ, &prec)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return driver.ProbeResult{}, driver.ErrColumnNotFound
	}
	if err != nil {
		return driver.ProbeResult{}, err
	}
	return driver.ProbeResult{Checked: true, Type: typ.String, Precision: precision(typ.String, prec), Suggest: "DATETIME(6)"}, nil
}

// probeSQL reads the expiry column's type and fractional digits (no row
// when the column is not found). The schema and table are constants in
// the WHERE clause, so that MariaDB opens that one table's definition
// instead of scanning every schema's; DATABASE(), which only MySQL has,
// is in the select list so that no other dialect runs the statement.
func probeSQL(p driver.ProbeParams) string {
	sch := "DATABASE()"
	if p.Schema != "" {
		sch = "'" + p.Schema + "'"
	}
	return "SELECT DATABASE(), DATA_TYPE, DATETIME_PRECISION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = " + sch +
		" AND TABLE_NAME = '" + p.Table + "' AND COLUMN_NAME = '" + p.ExpiresAt + "'"
}

// precision is the fractional digits of a DATETIME or TIMESTAMP column,
// or -1 for another type.
func precision(typ string, prec sql.NullInt64) int {
	switch strings.ToLower(typ) {
	case "datetime", "timestamp":
		if prec.Valid {
			return int(prec.Int64)
		}
		return 0
	}
	return -1
}

// errNoRaw: the handle is not a go-sql-driver pool whose connection the
// check can use directly; the check runs as on any handle.
var errNoRaw = errors.New("lease: no go-sql-driver connection")

// probeRaw runs the check statement q, with one argument that changes
// nothing (AND 1 = ?), on a connection of a go-sql-driver pool through
// database/sql's Conn.Raw, to learn whether the pool's DSN has
// interpolateParams=true without a round trip of its own: with it off, the
// driver declines a statement with arguments before sending anything
// (driver.ErrSkip, after which database/sql would prepare it), and the
// check is then sent as usual (without arguments: no prepare); with it
// on, the driver runs the statement in one round trip and its row is the
// check's answer. raw is errNoRaw when db is not such a pool (a
// transaction, a *sql.Conn, a wrapper, another driver), or the driver's
// error.
func probeRaw(ctx context.Context, db driver.DB, q string, typ *sql.NullString, prec *sql.NullInt64) (found, interpolates bool, raw error) {
	p, ok := db.(interface {
		Driver() sqldriver.Driver
		Conn(context.Context) (*sql.Conn, error)
	})
	if !ok || driver.IsNil(db) {
		return false, false, errNoRaw
	}
	switch p.Driver().(type) {
	case *mysql.MySQLDriver, mysql.MySQLDriver:
	default:
		return false, false, errNoRaw
	}
	conn, err := p.Conn(ctx)
	if err != nil {
		return false, false, err
	}
	defer conn.Close()
	raw = conn.Raw(func(dc any) error {
		qc, ok := dc.(sqldriver.QueryerContext)
		if !ok {
			return errNoRaw
		}
		rows, err := qc.QueryContext(ctx, q+" AND 1 = ?", []sqldriver.NamedValue{{Ordinal: 1, Value: int64(1)}})
		if errors.Is(err, sqldriver.ErrSkip) {
			return nil
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		interpolates = true
		dest := make([]sqldriver.Value, len(rows.Columns()))
		if err := rows.Next(dest); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if len(dest) != 3 {
			return fmt.Errorf("lease: the check read %d columns", len(dest))
		}
		found = true
		if err := typ.Scan(dest[1]); err != nil {
			return err
		}
		if b, ok := dest[2].([]byte); ok { // text protocol: digits
			dest[2] = string(b)
		}
		return prec.Scan(dest[2])
	})
	return found, interpolates, raw
}

// interpolateWarned holds the pools already warned about (bounded): the
// warning is once per pool, not once per Lease.
var interpolateWarned struct {
	m sync.Map
	n atomic.Int64
}

// warnInterpolate logs, once per pool, that the pool's DSN leaves
// interpolateParams off.
func warnInterpolate(ctx context.Context, db driver.DB, p driver.ProbeParams) {
	if interpolateWarned.n.Load() >= maxWarned {
		return
	}
	if _, loaded := interpolateWarned.m.LoadOrStore(db, struct{}{}); loaded {
		return
	}
	interpolateWarned.n.Add(1)
	p.Log.WarnContext(ctx, "lease: the MySQL DSN has no interpolateParams=true: go-sql-driver prepares, runs and closes every statement with arguments, "+
		"two round trips where one does (measured on loopback: 0.6-0.7 of the lease operations per second); add interpolateParams=true to the DSN "+
		"(mysql.Config.InterpolateParams), unless its charset is one interpolation refuses (big5, gbk, sjis, cp932, gb2312, gb18030)",
		slog.String("table", p.Name))
}

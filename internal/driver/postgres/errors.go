package postgres

import (
	"errors"
	"strings"

	"github.com/rowlease/rowlease/internal/driver"
)

// sqlState is how a PostgreSQL error is recognised (pgx's *pgconn.PgError,
// lib/pq's *pq.Error), so that this package links no driver.
type sqlState interface{ SQLState() string }

// Classify reads an error with a SQLState() method: 23505 is a duplicate
// key, 40001 and 40P01 a serialization or deadlock victim (retryable).
func (Driver) Classify(err error) (driver.ErrKind, bool) {
	var pg sqlState
	if !errors.As(err, &pg) {
		return 0, false
	}
	switch pg.SQLState() {
	case "23505":
		return driver.KindDuplicateKey, true
	case "40001", "40P01":
		return driver.KindRetryable, true
	}
	return driver.KindOther, true
}

// The texts of pgconn.ErrConnClosed and pgconn.ErrReadOnlyConnection
// (pinned by httpapi's tests against pgx's own values).
const (
	pgxConnClosed         = "conn closed"
	pgxReadOnlyConnection = "read only connection"
)

// UnavailableNode is true for pgx's sentinels "conn closed" and "read
// only connection" (a leaf with exactly their text: they are errors.New
// values), and for SQLSTATE class 08 (connection exception), 25006 (a
// write refused by a read-only server), 53300 (too many connections),
// 57P01, 57P02 (shutting down or crashed) and 57P03 (cannot accept
// connections yet).
func (Driver) UnavailableNode(err error) (bool, bool) {
	if _, wraps := err.(interface{ Unwrap() error }); !wraps {
		switch err.Error() {
		case pgxConnClosed, pgxReadOnlyConnection:
			return true, true
		}
	}
	if e, ok := err.(sqlState); ok {
		s := e.SQLState()
		return strings.HasPrefix(s, "08") || s == "25006" || s == "53300" || s == "57P01" || s == "57P02" || s == "57P03", true
	}
	return false, false
}

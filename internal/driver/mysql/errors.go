package mysql

import (
	"errors"

	"github.com/go-sql-driver/mysql"

	"github.com/rowlease/rowlease/internal/driver"
)

// Classify reads a *mysql.MySQLError: 1062 is a duplicate key, 1213 a
// deadlock or certification victim (retryable), 1205 a lock wait timeout
// (transient).
func (Driver) Classify(err error) (driver.ErrKind, bool) {
	var my *mysql.MySQLError
	if !errors.As(err, &my) {
		return 0, false
	}
	switch my.Number {
	case 1062:
		return driver.KindDuplicateKey, true
	case 1213:
		return driver.KindRetryable, true
	case 1205:
		return driver.KindTransient, true
	}
	return driver.KindOther, true
}

// UnavailableNode is true for go-sql-driver's ErrInvalidConn (a
// connection that broke mid-statement) and MySQL/MariaDB errors 1040 (too
// many connections), 1047 (a Galera node outside the primary component,
// or still joining: nothing of the statement ran), 1053 (server shutdown
// in progress) and 1927 (connection killed).
func (Driver) UnavailableNode(err error) (bool, bool) {
	if driver.Is(err, mysql.ErrInvalidConn) {
		return true, true
	}
	if e, ok := err.(*mysql.MySQLError); ok {
		return e.Number == 1040 || e.Number == 1047 || e.Number == 1053 || e.Number == 1927, true
	}
	return false, false
}

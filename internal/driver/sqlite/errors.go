package sqlite

import (
	"errors"
	"reflect"
	"strings"

	"github.com/rowlease/rowlease/internal/driver"
)

// Classify reads a SQLite error's extended result code (see code):
// SQLITE_CONSTRAINT_UNIQUE and _PRIMARYKEY are a duplicate key,
// SQLITE_BUSY and its extended codes retryable (another connection held
// the lock past the busy timeout), SQLITE_LOCKED transient.
func (Driver) Classify(err error) (driver.ErrKind, bool) {
	c, ok := code(err)
	if !ok {
		return 0, false
	}
	switch {
	case c == 2067 || c == 1555: // SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY
		return driver.KindDuplicateKey, true
	case c&0xff == 5: // SQLITE_BUSY, SQLITE_BUSY_RECOVERY, _SNAPSHOT, _TIMEOUT
		return driver.KindRetryable, true
	case c&0xff == 6: // SQLITE_LOCKED and its extended codes
		return driver.KindTransient, true
	}
	return driver.KindOther, true
}

// UnavailableNode is true, for an error with a Code() int method (as
// modernc.org/sqlite's), for SQLITE_BUSY (locked by another connection
// beyond the busy timeout), SQLITE_IOERR and SQLITE_CANTOPEN (the file
// cannot be read or opened).
func (Driver) UnavailableNode(err error) (bool, bool) {
	if e, ok := err.(interface{ Code() int }); ok {
		switch e.Code() & 0xff {
		case 5, 10, 14: // SQLITE_BUSY, SQLITE_IOERR, SQLITE_CANTOPEN
			return true, true
		}
		return false, true
	}
	return false, false
}

// code finds a SQLite error in err's chain and returns its extended
// result code: through a Code() int method (modernc.org/sqlite), or the
// ExtendedCode field of a struct type named Error in a package
// .../go-sqlite3 (mattn/go-sqlite3, which links cgo and is not imported).
func code(err error) (int, bool) {
	var lite interface{ Code() int }
	if errors.As(err, &lite) {
		return lite.Code(), true
	}
	for depth := 0; err != nil && depth < 100; depth++ { // bounded: a cyclic chain is a bug elsewhere
		if c, ok := mattnCode(err); ok {
			return c, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if c, ok := code(e); ok {
					return c, true
				}
			}
			return 0, false
		default:
			return 0, false
		}
	}
	return 0, false
}

// mattnCode reads the ExtendedCode of a mattn/go-sqlite3 sqlite3.Error (a
// value or a pointer).
func mattnCode(err error) (int, bool) {
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0, false
		}
		v = v.Elem()
	}
	t := v.Type()
	if v.Kind() != reflect.Struct || t.Name() != "Error" || !strings.HasSuffix(t.PkgPath(), "/go-sqlite3") {
		return 0, false
	}
	f := v.FieldByName("ExtendedCode")
	switch f.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return int(f.Int()), true
	}
	return 0, false
}

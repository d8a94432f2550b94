package engine

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// keyText is the key as text, for errors: a string kind as it is, an
// integer in decimal. It looks at the underlying kind, so a named type's
// String method plays no part.
func keyText[K Key](k K) string {
	v := reflect.ValueOf(k)
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Uint32:
		return strconv.FormatUint(v.Uint(), 10)
	}
	return strconv.FormatInt(v.Int(), 10)
}

// checkKey refuses a key of a string kind that CheckText refuses (the
// empty string among them). Every integer is a key, 0 and negative ones
// included: 0 is a valid primary key on every dialect.
func (l *Lease[K]) checkKey(k K) error {
	// Every type whose underlying type is string (type SessionID string),
	// not only string itself.
	if v := reflect.ValueOf(k); v.Kind() == reflect.String {
		return CheckText("key", v.String(), MaxKeyLen)
	}
	return nil
}

func checkHolder(h string) error { return CheckText("holder", h, MaxHolderLen) }

// CheckText checks text that the lease tables store and compare, so that
// it behaves alike on every dialect, and returns a *ValidationError (field
// names it) when it is:
//
//   - empty;
//   - longer than maxBytes bytes;
//   - not valid UTF-8;
//   - holding a NUL byte (PostgreSQL cannot store one);
//   - ending in a space: MySQL's and MariaDB's PAD SPACE collations (the
//     utf8mb4_bin of the shipped tables among them) compare "a" and "a "
//     as equal, so they would be one key there and two on PostgreSQL and
//     SQLite.
//
// The error never quotes s. Keys of a string kind and holders are checked
// with it (maxBytes MaxKeyLen and MaxHolderLen); use it for other text that
// takes part in a unique key, such as a client request id.
func CheckText(field, s string, maxBytes int) error {
	switch {
	case s == "":
		return invalid(field, "empty")
	case len(s) > maxBytes:
		return invalid(field, "longer than "+strconv.Itoa(maxBytes)+" bytes")
	case !utf8.ValidString(s):
		return invalid(field, "not UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return invalid(field, "contains a NUL byte")
	case s[len(s)-1] == ' ':
		return invalid(field, "ends with a space (MySQL would compare it equal to the text without it)")
	}
	return nil
}

// ValidateTTL reports a TTL outside MinTTL..MaxTTL as a *ValidationError.
func ValidateTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return invalid("ttl", "must be positive")
	case ttl < MinTTL:
		return invalid("ttl", "below "+MinTTL.String())
	case ttl > MaxTTL:
		return invalid("ttl", "above "+MaxTTL.String())
	}
	return nil
}

func (l *Lease[K]) checkTTL(ttl time.Duration) error {
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	if m := l.marginFor(ttl); m+l.res >= ttl {
		return invalid("ttl", "not above the safety margin "+m.String()+" plus the expiry resolution "+l.res.String())
	}
	return nil
}

func (l *Lease[K]) checkStates(field string, states ...string) error {
	for _, s := range states {
		if s == "" {
			continue
		}
		if l.table.cols.State == "" {
			return invalid(field, "the table spec has no State column")
		}
		if err := CheckText(field, s, 64); err != nil {
			return err
		}
	}
	return nil
}

// checkIn validates a state condition: no empty states.
func (l *Lease[K]) checkIn(field string, in []string) error {
	for _, s := range in {
		if s == "" {
			return invalid(field, "empty state in the condition")
		}
	}
	return l.checkStates(field, in...)
}

func (l *Lease[K]) checkSet(set []Assignment) error {
	seen := map[string]bool{}
	for _, a := range set {
		if !validIdent(a.Column) {
			return invalid("assignment", fmt.Sprintf("column %q is not a valid identifier", a.Column))
		}
		if l.table.isLeaseColumn(a.Column) {
			return invalid("assignment", fmt.Sprintf("column %q is a lease column", a.Column))
		}
		if seen[a.Column] {
			return invalid("assignment", fmt.Sprintf("column %q assigned twice", a.Column))
		}
		seen[a.Column] = true
	}
	return nil
}

// checkNew checks the input of an operation that makes a new grant
// (Acquire, Create): the database, the key, the holder and the TTL, in
// that order.
func (l *Lease[K]) checkNew(db DB, key K, holder string, ttl time.Duration) error {
	if err := l.checkRow(db, key); err != nil {
		return err
	}
	if err := checkHolder(holder); err != nil {
		return err
	}
	return l.checkTTL(ttl)
}

// checkRow checks the database and the key of an operation on a row.
func (l *Lease[K]) checkRow(db DB, key K) error {
	if err := l.checkDB(db); err != nil {
		return err
	}
	return l.checkKey(key)
}

// checkHeld checks the database and the grant of an operation on a held
// lease.
func (l *Lease[K]) checkHeld(db DB, g Grant[K]) error {
	if err := l.checkDB(db); err != nil {
		return err
	}
	return l.checkGrant(g)
}

// checkChange checks the input of a Transition.
func (l *Lease[K]) checkChange(db DB, g Grant[K], o ChangeOptions) error {
	if err := l.checkHeld(db, g); err != nil {
		return err
	}
	if err := l.checkIn("from states", o.From); err != nil {
		return err
	}
	if err := l.checkWrites(o.To, o.Set); err != nil {
		return err
	}
	if o.Keep {
		return l.checkTTL(o.TTL)
	}
	if o.TTL != 0 {
		return invalid("ttl", "set without Keep")
	}
	return nil
}

// checkConfirm checks the input of a Confirm: it renews for g.TTL.
func (l *Lease[K]) checkConfirm(db DB, g Grant[K]) error {
	if err := l.checkHeld(db, g); err != nil {
		return err
	}
	return l.checkTTL(g.TTL)
}

// checkWrites checks what a statement writes besides the lease columns:
// the state column's value and the extra assignments.
func (l *Lease[K]) checkWrites(state string, set []Assignment) error {
	if err := l.checkStates("state", state); err != nil {
		return err
	}
	return l.checkSet(set)
}

func (l *Lease[K]) checkDB(db DB) error {
	if isNil(db) {
		return invalid("db", "nil")
	}
	return nil
}

func (l *Lease[K]) checkGrant(g Grant[K]) error {
	if err := l.checkKey(g.Key); err != nil {
		return err
	}
	if g.Token.isZero() {
		return invalid("grant", "zero token")
	}
	return nil
}

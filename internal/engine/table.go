package engine

import (
	"fmt"
	"strings"

	"github.com/rowlease/rowlease/internal/driver"
)

// Columns names the lease columns of a table. Key, Holder, Token, ExpiresAt
// and Generation are required; State and UpdatedAt are optional.
type Columns struct {
	Key        string // the row's key; must be the primary key or unique
	Holder     string // who holds the lease (nullable text)
	Token      string // the grant's secret (nullable text, 36 characters)
	ExpiresAt  string // database-clock expiry (see the package doc for its type)
	Generation string // fencing counter (integer, not null, default 0)
	State      string // optional: a status column that operations may check and set
	UpdatedAt  string // optional: set to the database clock on every write
}

// Table is a validated table spec: a table name and its lease columns. Build
// it with NewTable; the zero Table is unusable.
type Table struct {
	name string
	cols Columns
}

// validIdent reports whether s is a safe SQL identifier: a letter or
// underscore, then letters, digits or underscores, at most 63 characters.
// It runs on every column an operation sets, so it is a loop, not a
// regular expression.
func validIdent(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// checkTableName checks a table name, optionally schema-qualified
// ("schema.table"): each part an identifier (validIdent).
func checkTableName(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return invalid("table name", fmt.Sprintf("%q has more than one dot", name))
	}
	for _, p := range parts {
		if !validIdent(p) {
			return invalid("table name", fmt.Sprintf("%q is not a valid identifier", name))
		}
	}
	return nil
}

// NewTable validates a table name (optionally schema-qualified, "schema.table")
// and its columns. Names are identifiers: a letter or underscore followed by
// letters, digits and underscores, at most 63 characters. They are quoted in
// SQL, so give them as the database stores them. Column names must be
// distinct.
func NewTable(name string, cols Columns) (Table, error) {
	if err := checkTableName(name); err != nil {
		return Table{}, err
	}
	seen := map[string]string{}
	check := func(field, col string, required bool) error {
		if col == "" {
			if required {
				return invalid("column "+field, "required")
			}
			return nil
		}
		if !validIdent(col) {
			return invalid("column "+field, fmt.Sprintf("%q is not a valid identifier", col))
		}
		if other, dup := seen[strings.ToLower(col)]; dup {
			return invalid("column "+field, fmt.Sprintf("%q is also the %s column", col, other))
		}
		seen[strings.ToLower(col)] = field
		return nil
	}
	for _, c := range []struct {
		field, col string
		req        bool
	}{
		{"Key", cols.Key, true}, {"Holder", cols.Holder, true}, {"Token", cols.Token, true},
		{"ExpiresAt", cols.ExpiresAt, true}, {"Generation", cols.Generation, true},
		{"State", cols.State, false}, {"UpdatedAt", cols.UpdatedAt, false},
	} {
		if err := check(c.field, c.col, c.req); err != nil {
			return Table{}, err
		}
	}
	return Table{name: name, cols: cols}, nil
}

// MustTable is NewTable that panics on error, for package-level specs built
// from constants.
func MustTable(name string, cols Columns) Table {
	t, err := NewTable(name, cols)
	if err != nil {
		panic(err)
	}
	return t
}

// Name returns the table name.
func (t Table) Name() string { return t.name }

// Columns returns the column names.
func (t Table) Columns() Columns { return t.cols }

// isLeaseColumn reports whether col is one of the spec's own columns, which
// extra assignments must not touch.
func (t Table) isLeaseColumn(col string) bool {
	c := strings.ToLower(col)
	for _, x := range []string{t.cols.Key, t.cols.Holder, t.cols.Token, t.cols.ExpiresAt, t.cols.Generation, t.cols.State, t.cols.UpdatedAt} {
		if x != "" && strings.ToLower(x) == c {
			return true
		}
	}
	return false
}

// QuotedTable returns t's name quoted for d (each part of a
// schema-qualified name quoted on its own), for callers writing their own
// SQL against the table.
func QuotedTable(t Table, d Dialect) string { return t.qname(d.driver()) }

// split returns the schema ("" when the name is not qualified) and the
// table name.
func (t Table) split() (schema, table string) {
	if i := strings.IndexByte(t.name, '.'); i >= 0 {
		return t.name[:i], t.name[i+1:]
	}
	return "", t.name
}

func (t Table) qname(d driver.Driver) string {
	parts := strings.Split(t.name, ".")
	for i, p := range parts {
		parts[i] = d.Quote(p)
	}
	return strings.Join(parts, ".")
}

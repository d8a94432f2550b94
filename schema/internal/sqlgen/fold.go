package sqlgen

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/rowlease/rowlease/schema/internal/sqlscript"
)

// This file folds the up migrations of one dialect into the tables and
// indexes they leave behind, reading the statements as text: the
// statements of the migration files, in the forms they are written in
// (one column or constraint per line of a CREATE TABLE). A statement of
// another form stops the generator with an error that names it, rather
// than a DDL that misses what it does; teach the fold the form first.
//
// Understood:
//
//	CREATE TABLE [IF NOT EXISTS] t (\n<one definition per line>\n)<options>
//	CREATE [UNIQUE] INDEX [IF NOT EXISTS] i\n    ON t (<columns>)
//	ALTER TABLE t <clauses, separated by commas>, the clauses being
//	    ADD COLUMN [IF NOT EXISTS] c <type> <rest>
//	    DROP COLUMN [IF EXISTS] c (that no constraint or index names)
//	    DROP CONSTRAINT [IF EXISTS] k
//	    DROP INDEX k (MySQL: a key of the table, UNIQUE KEY or KEY)
//	    ADD CONSTRAINT k <definition> (in the place of a k dropped by the
//	        same statement; otherwise after the constraints of its kind)
//	    ADD UNIQUE KEY k (...), ADD KEY k (...) (MySQL)
//	    RENAME TO t2 (t2 takes the place of a t2 dropped before)
//	DROP TABLE [IF EXISTS] t (and its indexes)
//	DROP INDEX [IF EXISTS] i (an index created again under its name by
//	    the same file takes its place)
//	INSERT INTO ..., PRAGMA ... (no change to the tables)

// model is what a sequence of statements has built.
type model struct {
	tables  []*table // in creation order, with the place of a dropped table kept
	indexes []*index // in creation order
}

type table struct {
	name    string
	dropped bool // a place kept for a table renamed to name later in the file
	defs    []*def
	options string // after the closing parenthesis, e.g. " ENGINE=InnoDB …"
}

// def is one line of a CREATE TABLE: a column, or a table constraint or
// key.
type def struct {
	column    bool
	name, typ string // a column's name and type
	rest      string // a column's NULL, DEFAULT …; a constraint's whole text
	key       string // a constraint's or key's name ("" for PRIMARY KEY (…))
	rank      int    // a constraint's kind: constraintRank
	dropped   bool   // dropped by the statement being folded
}

type index struct {
	unique          bool
	dropped         bool   // a place kept for an index created again under name later in the file
	name, table, on string // on: "(columns)"
}

func newSchema() *model { return &model{} }

var (
	createTableRE    = regexp.MustCompile(`^CREATE TABLE (IF NOT EXISTS )?(\w+) \($`)
	createIndexRE    = regexp.MustCompile(`(?s)^CREATE (UNIQUE )?INDEX (IF NOT EXISTS )?(\w+)\s+ON (\w+) (\(.*\))$`)
	alterTableRE     = regexp.MustCompile(`(?s)^ALTER TABLE (\w+)\s+(.*)$`)
	dropTableRE      = regexp.MustCompile(`^DROP TABLE (IF EXISTS )?(\w+)$`)
	dropIndexRE      = regexp.MustCompile(`^DROP INDEX (IF EXISTS )?(\w+)$`)
	noChangeRE       = regexp.MustCompile(`^(INSERT INTO|PRAGMA) `)
	addColumnRE      = regexp.MustCompile(`(?s)^ADD COLUMN (IF NOT EXISTS )?(\w+)\s+(.+)$`)
	dropColumnRE     = regexp.MustCompile(`^DROP COLUMN (IF EXISTS )?(\w+)$`)
	dropConstraintRE = regexp.MustCompile(`^DROP CONSTRAINT (IF EXISTS )?(\w+)$`)
	dropKeyRE        = regexp.MustCompile(`^DROP INDEX (\w+)$`)
	addConstraintRE  = regexp.MustCompile(`(?s)^ADD ((?:CONSTRAINT|UNIQUE KEY|KEY) (\w+)\s.+)$`)
	renameRE         = regexp.MustCompile(`^RENAME TO (\w+)$`)
	constraintRE     = regexp.MustCompile(`^(?:CONSTRAINT (\w+) )?(PRIMARY KEY|UNIQUE KEY|UNIQUE|KEY|INDEX|CHECK|FOREIGN KEY)\b(?: (\w+) \()?`)
)

// Ranks of the table constraints and keys: a constraint that a statement
// adds goes after the last one of its rank or a lower one.
var constraintRank = map[string]int{
	"PRIMARY KEY": 0, "UNIQUE KEY": 1, "UNIQUE": 1, "KEY": 2, "INDEX": 2, "CHECK": 3, "FOREIGN KEY": 3,
}

// apply folds one migration file into m.
func (m *model) apply(src string) error {
	for _, stmt := range sqlscript.Split(src) {
		if err := m.exec(stmt); err != nil {
			return fmt.Errorf("%s: %w", sqlscript.FirstLine(stmt), err)
		}
	}
	// The place of a table or index dropped and not made again is not kept.
	m.tables = slices.DeleteFunc(m.tables, func(t *table) bool { return t.dropped })
	m.indexes = slices.DeleteFunc(m.indexes, func(ix *index) bool { return ix.dropped })
	return nil
}

func (m *model) exec(stmt string) error {
	first, _, _ := strings.Cut(stmt, "\n")
	switch {
	case createTableRE.MatchString(first):
		return m.createTable(stmt)
	case createIndexRE.MatchString(stmt):
		g := createIndexRE.FindStringSubmatch(stmt)
		if m.index(g[3]) != nil {
			if g[2] != "" {
				return nil
			}
			return errors.New("the index exists already")
		}
		if m.table(g[4]) == nil {
			return fmt.Errorf("no table %s", g[4])
		}
		ix := &index{unique: g[1] != "", name: g[3], table: g[4], on: g[5]}
		// In the place of an index of the name dropped before, if any.
		if k := slices.IndexFunc(m.indexes, func(x *index) bool { return x.dropped && x.name == ix.name }); k >= 0 {
			m.indexes[k] = ix
			return nil
		}
		m.indexes = append(m.indexes, ix)
		return nil
	case dropIndexRE.MatchString(stmt):
		g := dropIndexRE.FindStringSubmatch(stmt)
		ix := m.index(g[2])
		if ix == nil {
			if g[1] != "" {
				return nil
			}
			return fmt.Errorf("no index %s", g[2])
		}
		ix.dropped = true
		return nil
	case alterTableRE.MatchString(stmt):
		g := alterTableRE.FindStringSubmatch(stmt)
		t := m.table(g[1])
		if t == nil {
			return fmt.Errorf("no table %s", g[1])
		}
		for _, clause := range splitClauses(g[2]) {
			if err := m.alter(t, clause); err != nil {
				return fmt.Errorf("%s: %w", clause, err)
			}
		}
		t.defs = slices.DeleteFunc(t.defs, func(d *def) bool { return d.dropped })
		return nil
	case dropTableRE.MatchString(stmt):
		g := dropTableRE.FindStringSubmatch(stmt)
		t := m.table(g[2])
		if t == nil {
			if g[1] != "" {
				return nil
			}
			return fmt.Errorf("no table %s", g[2])
		}
		*t = table{name: t.name, dropped: true}
		m.indexes = slices.DeleteFunc(m.indexes, func(ix *index) bool { return ix.table == g[2] })
		return nil
	case noChangeRE.MatchString(stmt):
		return nil
	}
	return errors.New("statement not understood by the generator (schema/internal/sqlgen/fold.go)")
}

func (m *model) createTable(stmt string) error {
	lines := strings.Split(stmt, "\n")
	g := createTableRE.FindStringSubmatch(lines[0])
	last := lines[len(lines)-1]
	if len(lines) < 3 || !strings.HasPrefix(last, ")") {
		return errors.New("want one definition per line and the closing parenthesis at the start of the last line")
	}
	if m.table(g[2]) != nil {
		if g[1] != "" {
			return nil
		}
		return errors.New("the table exists already")
	}
	t := &table{name: g[2], options: strings.TrimPrefix(last, ")")}
	for _, line := range lines[1 : len(lines)-1] {
		d, err := parseDef(strings.TrimSuffix(strings.TrimSpace(line), ","))
		if err != nil {
			return err
		}
		t.defs = append(t.defs, d)
	}
	m.tables = append(m.tables, t)
	return nil
}

// parseDef reads one definition of a CREATE TABLE.
func parseDef(text string) (*def, error) {
	if text == "" {
		return nil, errors.New("empty line in CREATE TABLE")
	}
	if g := constraintRE.FindStringSubmatch(text); g != nil {
		key := g[1]
		if key == "" {
			key = g[3]
		}
		return &def{rest: text, key: key, rank: constraintRank[g[2]]}, nil
	}
	name, rest, _ := strings.Cut(text, " ")
	rest = strings.TrimSpace(rest)
	typ, rest, _ := strings.Cut(rest, " ")
	if typ == "" {
		return nil, fmt.Errorf("column %s has no type", name)
	}
	return &def{column: true, name: name, typ: typ, rest: strings.TrimSpace(rest)}, nil
}

// alter applies one clause of an ALTER TABLE to t.
func (m *model) alter(t *table, clause string) error {
	switch {
	case addColumnRE.MatchString(clause):
		g := addColumnRE.FindStringSubmatch(clause)
		if t.def(g[2], true) != nil {
			if g[1] != "" {
				return nil
			}
			return errors.New("the column exists already")
		}
		d, err := parseDef(g[2] + " " + g[3])
		if err != nil {
			return err
		}
		at := 0
		for i, x := range t.defs {
			if x.column {
				at = i + 1
			}
		}
		t.defs = slices.Insert(t.defs, at, d)
		return nil
	case dropColumnRE.MatchString(clause):
		g := dropColumnRE.FindStringSubmatch(clause)
		d := t.def(g[2], true)
		if d == nil {
			if g[1] != "" {
				return nil
			}
			return errors.New("no such column")
		}
		if k := m.usesColumn(t, d.name); k != "" {
			return fmt.Errorf("%s uses the column: drop it first", k)
		}
		d.dropped = true
		return nil
	case dropConstraintRE.MatchString(clause):
		g := dropConstraintRE.FindStringSubmatch(clause)
		d := t.def(g[2], false)
		if d == nil {
			if g[1] != "" {
				return nil
			}
			return errors.New("no such constraint")
		}
		d.dropped = true
		return nil
	case dropKeyRE.MatchString(clause):
		d := t.def(dropKeyRE.FindStringSubmatch(clause)[1], false)
		if d == nil || d.rank != constraintRank["UNIQUE KEY"] && d.rank != constraintRank["KEY"] {
			return errors.New("no such key (UNIQUE KEY or KEY) in the table")
		}
		d.dropped = true
		return nil
	case addConstraintRE.MatchString(clause):
		g := addConstraintRE.FindStringSubmatch(clause)
		d, err := parseDef(g[1])
		if err != nil {
			return err
		}
		if old := t.def(g[2], false); old != nil && old.dropped {
			*old = *d // in the place of the one this statement dropped
			return nil
		}
		if t.def(g[2], false) != nil {
			return errors.New("the constraint exists already")
		}
		at := 0
		for i, x := range t.defs {
			if x.column || x.rank <= d.rank {
				at = i + 1
			}
		}
		t.defs = slices.Insert(t.defs, at, d)
		return nil
	case renameRE.MatchString(clause):
		to := renameRE.FindStringSubmatch(clause)[1]
		if m.table(to) != nil {
			return fmt.Errorf("table %s exists already", to)
		}
		for _, ix := range m.indexes {
			if ix.table == t.name {
				ix.table = to
			}
		}
		// The table takes the place of the one dropped under its new name.
		if k := slices.IndexFunc(m.tables, func(x *table) bool { return x.dropped && x.name == to }); k >= 0 {
			j := slices.Index(m.tables, t)
			m.tables[k] = t
			m.tables = slices.Delete(m.tables, j, j+1)
		}
		t.name = to
		return nil
	}
	return errors.New("ALTER TABLE clause not understood by the generator (schema/internal/sqlgen/fold.go)")
}

// usesColumn returns the name of a constraint or index of t that names
// the column, "" if none does. Servers differ on dropping such a column
// (SQLite refuses, MySQL narrows the key), so the fold does not guess.
func (m *model) usesColumn(t *table, column string) string {
	word := regexp.MustCompile(`\b` + regexp.QuoteMeta(column) + `\b`)
	for _, d := range t.defs {
		if !d.column && !d.dropped && word.MatchString(d.rest) {
			if d.key == "" {
				return "the primary key"
			}
			return d.key
		}
	}
	for _, ix := range m.indexes {
		if !ix.dropped && ix.table == t.name && word.MatchString(ix.on) {
			return ix.name
		}
	}
	return ""
}

// table returns the table named name, nil if there is none.
func (m *model) table(name string) *table {
	for _, t := range m.tables {
		if !t.dropped && t.name == name {
			return t
		}
	}
	return nil
}

// index returns the index named name, nil if there is none.
func (m *model) index(name string) *index {
	for _, ix := range m.indexes {
		if !ix.dropped && ix.name == name {
			return ix
		}
	}
	return nil
}

// def returns t's column (column true) or constraint named name.
func (t *table) def(name string, column bool) *def {
	for _, d := range t.defs {
		if d.column == column && (d.name == name && column || d.key == name && !column) {
			return d
		}
	}
	return nil
}

// splitClauses splits the clauses of an ALTER TABLE at the commas outside
// parentheses and string literals.
func splitClauses(s string) []string {
	var out []string
	start := 0
	sqlscript.Depths(s, 0, func(i, depth int) bool {
		if s[i] == ',' && depth == 0 {
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
		return true
	})
	return append(out, strings.TrimSpace(s[start:]))
}

// create returns the statements that build m from nothing, idempotent:
// each table, then its indexes.
func (m *model) create() []string {
	var out []string
	for _, t := range m.tables {
		out = append(out, t.create())
		for _, ix := range m.indexes {
			if ix.table == t.name {
				unique := ""
				if ix.unique {
					unique = "UNIQUE "
				}
				out = append(out, fmt.Sprintf("CREATE %sINDEX IF NOT EXISTS %s\n    ON %s %s", unique, ix.name, ix.table, ix.on))
			}
		}
	}
	return out
}

// create returns t's CREATE TABLE IF NOT EXISTS, the names and types of
// its columns aligned.
func (t *table) create() string {
	nameW, typW := 0, 0
	for _, d := range t.defs {
		if d.column {
			nameW, typW = max(nameW, len(d.name)), max(typW, len(d.typ))
		}
	}
	lines := make([]string, len(t.defs))
	for i, d := range t.defs {
		if d.column {
			lines[i] = strings.TrimRight(fmt.Sprintf("    %-*s %-*s %s", nameW, d.name, typW, d.typ, d.rest), " ")
		} else {
			lines[i] = "    " + d.rest
		}
	}
	return "CREATE TABLE IF NOT EXISTS " + t.name + " (\n" + strings.Join(lines, ",\n") + "\n)" + t.options
}

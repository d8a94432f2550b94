// Package sqlscript reads the SQL files of package schema: it splits them
// into statements and walks a statement outside its string literals.
// Package schema runs them with it (Apply, ApplyScript, the upgrade), and
// its generator folds the migrations into the DDL with it, so both read a
// file the same way.
package sqlscript

import "strings"

// Split splits an SQL script into statements. Lines whose first non-blank
// characters are "--" and blank lines are dropped; a statement ends at a
// line whose last non-blank character is ';', which is removed. Text after
// the last ';' forms a final statement. The files of package schema keep
// comments on their own lines and never put ';' at a line end inside a
// statement.
func Split(src string) []string {
	var (
		stmts []string
		cur   []string
	)
	flush := func() {
		s := strings.TrimSpace(strings.Join(cur, "\n"))
		s = strings.TrimSpace(strings.TrimSuffix(s, ";"))
		if s != "" {
			stmts = append(stmts, s)
		}
		cur = cur[:0]
	}
	for line := range strings.Lines(src) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur = append(cur, strings.TrimRight(line, " \t\r\n"))
		if strings.HasSuffix(trimmed, ";") {
			flush()
		}
	}
	flush()
	return stmts
}

// FirstLine returns the first line of a statement without a trailing
// "(", to name the statement in an error message.
func FirstLine(stmt string) string {
	if i := strings.IndexByte(stmt, '\n'); i >= 0 {
		stmt = stmt[:i]
	}
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(stmt), "("))
}

// Depths calls visit, in order from index from, for each byte of s that is
// not part of a string literal (in single quotes, a doubled quote inside
// one), with the parenthesis depth it stands at: a '(' and its matching
// ')' both stand at the depth outside them. visit returns false to stop.
func Depths(s string, from int, visit func(i, depth int) bool) {
	depth, inString := 0, false
	for i := from; i < len(s); i++ {
		switch c := s[i]; {
		case inString:
			inString = c != '\'' // a doubled '' closes and reopens
			continue
		case c == '\'':
			inString = true
			continue
		case c == ')':
			depth--
		}
		if !visit(i, depth) {
			return
		}
		if s[i] == '(' {
			depth++
		}
	}
}

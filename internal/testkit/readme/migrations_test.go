package readme_test

import (
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestReadmeMigrationNote: wherever README or a page under docs/ speaks
// of migrations, it names either no migration numbers or every migration
// the schema ships (read from schema/migrations/*/migrate, so a new
// migration is covered without touching this test). A note that names
// some of them ("copy 2 and 3") sends goose and golang-migrate users past
// the ones it leaves out.
func TestReadmeMigrationNote(t *testing.T) {
	root := repoRoot(t)
	shipped := shippedMigrations(t, root)
	for _, name := range pages(t, root) {
		for _, p := range migrationParagraphs(readPage(t, root, name)) {
			named := migrationNumbers(p.text)
			if len(named) > 0 && !slices.Equal(named, shipped) {
				t.Errorf("%s:%d: the paragraph on migrations names migrations %v, but the schema ships %v: name them all, or none",
					name, p.line, named, shipped)
			}
		}
	}
}

// TestMigrationNumbers: what the check above takes for a migration number.
func TestMigrationNumbers(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []int
	}{
		{"Migration 2 lets a tool execution be `started`; migration 3 gives", []int{2, 3}},
		{"copy the migrations you do not have yet (2 and 3, from `schema.Migrations`", []int{2, 3}},
		{"copy migrations 2, 3 and 4 into your migration directory", []int{2, 3, 4}},
		{"Migrations 1 to 4 together build exactly what the DDL builds", []int{1, 2, 3, 4}},
		{"the file 000005_request_x.up.sql", []int{5}},
		{"copy every migration you do not have yet, and run them all", nil},
		{"golang-migrate v4, goose v3 and a 10 s busy timeout", nil},
	} {
		if got := migrationNumbers(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %v, want %v", tc.text, got, tc.want)
		}
	}
}

// shippedMigrations lists the version numbers of the golang-migrate files
// (the source of every other form), the same for every dialect.
func shippedMigrations(t *testing.T, root string) []int {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(root, "schema", "migrations", "*", "migrate"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no schema/migrations/*/migrate (%v)", err)
	}
	var first []int
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.up.sql"))
		if err != nil {
			t.Fatal(err)
		}
		var vs []int
		for _, f := range files {
			v, err := strconv.Atoi(strings.SplitN(filepath.Base(f), "_", 2)[0])
			if err != nil {
				t.Fatalf("%s: not a numbered migration", f)
			}
			vs = append(vs, v)
		}
		slices.Sort(vs)
		if first == nil {
			first = vs
		} else if !slices.Equal(vs, first) {
			t.Fatalf("%s has migrations %v, another dialect %v", dir, vs, first)
		}
	}
	return first
}

type paragraph struct {
	line int
	text string
}

// migrationParagraphs returns a page's prose paragraphs (blank-line
// separated, outside code blocks) that mention a migration.
func migrationParagraphs(md string) []paragraph {
	var out []paragraph
	var cur []string
	start, fenced := 0, false
	flush := func() {
		if text := strings.Join(cur, " "); strings.Contains(strings.ToLower(text), "migration") {
			out = append(out, paragraph{line: start, text: text})
		}
		cur = nil
	}
	for i, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			flush()
			continue
		}
		if fenced || strings.TrimSpace(l) == "" {
			flush()
			continue
		}
		if cur == nil {
			start = i + 1
		}
		cur = append(cur, l)
	}
	flush()
	return out
}

var (
	// "migration 2", "migrations 2, 3 and 4", "migrations 1 to 4"
	namedRe = regexp.MustCompile(`(?i)\bmigrations?\s+(\d+(?:(?:,\s*|\s+and\s+|\s+to\s+)\d+)*)\b`)
	// a list of numbers in a paragraph on migrations: "(2 and 3, from"
	listRe = regexp.MustCompile(`\b\d+(?:,\s*\d+)*(?:,?\s+and\s+|\s+to\s+)\d+\b`)
	// a migration file: 000005_request_x.up.sql
	fileRe = regexp.MustCompile(`\b(\d{6})_\w`)
	// what separates the numbers of a list
	sepRe = regexp.MustCompile(`\s*(,|\band\b|\bto\b)\s*`)
)

// migrationNumbers returns the migration numbers text names, sorted, once
// each; "N to M" names every number from N to M.
func migrationNumbers(text string) []int {
	var out []int
	addList := func(s string) {
		parts, seps := sepRe.Split(s, -1), sepRe.FindAllString(s, -1)
		for i, p := range parts {
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil {
				continue
			}
			if i > 0 && strings.TrimSpace(seps[i-1]) == "to" && len(out) > 0 {
				for m := out[len(out)-1] + 1; m < n; m++ {
					out = append(out, m)
				}
			}
			out = append(out, n)
		}
	}
	for _, m := range namedRe.FindAllStringSubmatch(text, -1) {
		addList(m[1])
	}
	for _, m := range listRe.FindAllString(text, -1) {
		addList(m)
	}
	for _, m := range fileRe.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

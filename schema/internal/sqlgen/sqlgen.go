// Package sqlgen writes the SQL files of package schema that are derived
// from its migrations, so that each statement is written once per dialect.
//
// The source is the golang-migrate files, migrations/<dialect>/migrate/
// NNNNNN_name.up.sql and NNNNNN_name.down.sql under the schema directory,
// written by hand. From them Generate produces:
//
//   - migrations/<dialect>/goose/NNNNN_name.sql: the up file and the down
//     file of one migration under "-- +goose Up" and "-- +goose Down", as
//     they are, comments included;
//   - sql/<dialect>.sql, the DDL that schema.Apply runs: the up migrations
//     folded into the tables they leave behind (fold.go), one CREATE TABLE
//     IF NOT EXISTS per table and one CREATE INDEX IF NOT EXISTS per index,
//     under a header (headers.go).
//
// `go generate ./schema/...` runs it (schema/internal/gen) and writes the
// files; Stale tells a test whether the committed ones are current.
package sqlgen

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Dialects are the directory names of the dialects, in the order the
// files are generated.
var Dialects = []string{"mysql", "postgres", "sqlite"}

// MigrateDir is the directory of a dialect's golang-migrate files: the
// source.
func MigrateDir(dialect string) string { return "migrations/" + dialect + "/migrate" }

// GooseDir is the directory of a dialect's goose files, all generated.
func GooseDir(dialect string) string { return "migrations/" + dialect + "/goose" }

// DDLFile is the path of a dialect's DDL, generated.
func DDLFile(dialect string) string { return "sql/" + dialect + ".sql" }

// Migration is one numbered migration of one dialect, as read from its
// golang-migrate files.
type Migration struct {
	Version          int
	Name             string // e.g. "request_queue"
	UpFile, DownFile string // file names, without the directory
	Up, Down         string // their text
}

var migrateFileRE = regexp.MustCompile(`^(\d{6})_([a-z0-9_]+)\.(up|down)\.sql$`)

// ReadMigrations reads the golang-migrate files of dialect from fsys,
// rooted at the schema directory, in version order. The versions must run
// from 1 without a gap, each with an up and a down file of the same name.
func ReadMigrations(fsys fs.FS, dialect string) ([]Migration, error) {
	dir := MigrateDir(dialect)
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := migrateFileRE.FindStringSubmatch(e.Name())
		if e.IsDir() || m == nil {
			return nil, fmt.Errorf("%s: %s is not a migration file NNNNNN_name.up.sql or NNNNNN_name.down.sql", dir, e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if mig.Name != m[2] {
			return nil, fmt.Errorf("%s: migration %d has two names, %s and %s", dir, v, mig.Name, m[2])
		}
		if m[3] == "up" {
			mig.UpFile, mig.Up = e.Name(), string(b)
		} else {
			mig.DownFile, mig.Down = e.Name(), string(b)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for v := 1; v <= len(byVersion); v++ {
		mig := byVersion[v]
		if mig == nil {
			return nil, fmt.Errorf("%s: migration %d is missing (versions must run from 1 without a gap)", dir, v)
		}
		if mig.UpFile == "" || mig.DownFile == "" {
			return nil, fmt.Errorf("%s: migration %d needs both an up and a down file", dir, v)
		}
		out = append(out, *mig)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no migrations", dir)
	}
	return out, nil
}

// Generate returns the generated files of every dialect, by path relative
// to the schema directory, read from the golang-migrate files in fsys
// (rooted at the schema directory).
func Generate(fsys fs.FS) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, d := range Dialects {
		migs, err := ReadMigrations(fsys, d)
		if err != nil {
			return nil, err
		}
		for _, m := range migs {
			out[path.Join(GooseDir(d), GooseName(m))] = []byte(Goose(m))
		}
		ddl, err := DDL(d, migs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", MigrateDir(d), err)
		}
		out[DDLFile(d)] = []byte(ddl)
	}
	return out, nil
}

// GooseName is the name of the goose file of m: its version in five
// digits, as goose numbers files.
func GooseName(m Migration) string { return fmt.Sprintf("%05d_%s.sql", m.Version, m.Name) }

// Goose returns the goose file of m: its golang-migrate up and down files
// as they are, each under its goose annotation. goose runs the file in one
// transaction and splits it at lines ending in ';', as schema.Apply does.
func Goose(m Migration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- Code generated from the golang-migrate files %06d_%s.{up,down}.sql. DO NOT EDIT.\n\n",
		m.Version, m.Name)
	b.WriteString("-- +goose Up\n")
	b.WriteString(strings.TrimRight(m.Up, "\n") + "\n\n")
	b.WriteString("-- +goose Down\n")
	b.WriteString(strings.TrimRight(m.Down, "\n") + "\n")
	return b.String()
}

// DDL returns the DDL file of dialect: its header, then the tables and
// indexes that the up migrations leave behind.
func DDL(dialect string, migs []Migration) (string, error) {
	header, ok := ddlHeaders[dialect]
	if !ok {
		return "", fmt.Errorf("no DDL header for dialect %q", dialect)
	}
	s := newSchema()
	for _, m := range migs {
		if err := s.apply(m.Up); err != nil {
			return "", fmt.Errorf("%s: %w", m.UpFile, err)
		}
	}
	var b strings.Builder
	b.WriteString(strings.ReplaceAll(header, "{{generated}}",
		"Code generated from "+MigrateDir(dialect)+" by schema/internal/sqlgen. DO NOT EDIT."))
	for _, stmt := range s.create() {
		b.WriteString("\n" + stmt + ";\n")
	}
	return b.String(), nil
}

// Stale lists what differs between the files Generate produces from fsys
// and the files in fsys: a generated file that is missing or has other
// content, and a file in a goose directory that Generate does not
// produce. The list is empty when the committed files are current.
func Stale(fsys fs.FS) ([]string, error) {
	want, err := Generate(fsys)
	if err != nil {
		return nil, err
	}
	var stale []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		got, err := fs.ReadFile(fsys, name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			stale = append(stale, name+": missing")
		case err != nil:
			return nil, err
		case !bytes.Equal(got, want[name]):
			stale = append(stale, name+": differs from what its migrations generate")
		}
	}
	for _, d := range Dialects {
		entries, err := fs.ReadDir(fsys, GooseDir(d))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range entries {
			name := path.Join(GooseDir(d), e.Name())
			if _, ok := want[name]; !ok {
				stale = append(stale, name+": not generated by any migration")
			}
		}
	}
	return stale, nil
}

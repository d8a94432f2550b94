// Command gen writes the SQL files of package schema that are generated
// from its golang-migrate files (see package sqlgen): the goose migrations
// and the DDL of each dialect. Run it in the schema directory, through
//
//	go generate ./schema/...
//
// It removes a goose file that no migration generates any more.
package main

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/rowlease/rowlease/schema/internal/sqlgen"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "schema/internal/gen:", err)
		os.Exit(1)
	}
}

func run() error {
	fsys := os.DirFS(".")
	files, err := sqlgen.Generate(fsys)
	if err != nil {
		return err
	}
	for _, d := range sqlgen.Dialects {
		entries, err := fs.ReadDir(fsys, sqlgen.GooseDir(d))
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		for _, e := range entries {
			name := sqlgen.GooseDir(d) + "/" + e.Name()
			if _, ok := files[name]; !ok {
				if err := os.Remove(filepath.FromSlash(name)); err != nil {
					return err
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.FromSlash(name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}

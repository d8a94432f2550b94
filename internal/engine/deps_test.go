package engine_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLibraryLinksNoOtherDriver: a program that imports the library (lease
// and the three levels) for MySQL links neither pgx nor SQLite; PostgreSQL
// and SQLite errors are recognised through their methods.
func TestLibraryLinksNoOtherDriver(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	pkgs := []string{"lease", "schema", "heartbeat", "session", "toolexec", "request"}
	for i, p := range pkgs {
		pkgs[i] = "github.com/rowlease/rowlease/" + p
	}
	out, err := exec.Command(gobin, append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := string(out)
	if !strings.Contains(deps, "github.com/go-sql-driver/mysql\n") {
		t.Fatalf("expected go-sql-driver/mysql among the dependencies; the listing looks wrong:\n%s", deps)
	}
	for _, banned := range []string{"github.com/jackc/pgx", "modernc.org/sqlite", "github.com/mattn/go-sqlite3", "github.com/lib/pq"} {
		if strings.Contains(deps, banned) {
			t.Errorf("the library links %s", banned)
		}
	}
}

// TestGoDirectiveNoPatchMinimum: the go line of a go.mod is what every
// importer's go mod tidy must meet. It names a release (1.N.0), not a
// patch level that would force a toolchain download on importers. The
// root module and every module under contrib/ are checked.
func TestGoDirectiveNoPatchMinimum(t *testing.T) {
	mods, err := filepath.Glob("../../contrib/*/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range append([]string{"../../go.mod"}, mods...) {
		b, err := os.ReadFile(mod)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			v, ok := strings.CutPrefix(line, "go ")
			if !ok {
				continue
			}
			found = true
			parts := strings.Split(strings.TrimSpace(v), ".")
			if len(parts) == 3 && parts[2] != "0" {
				t.Errorf("%s says go %s: a patch-level minimum", mod, v)
			}
			break
		}
		if !found {
			t.Errorf("%s has no go line", mod)
		}
	}
}

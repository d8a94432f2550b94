package httpapi_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoOtherDriver: a program that imports httpapi links neither
// pgx nor SQLite; their errors are recognised through their methods.
func TestLinksNoOtherDriver(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/rowlease/rowlease/httpapi").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := string(out)
	if !strings.Contains(deps, "github.com/rowlease/rowlease/request\n") {
		t.Fatalf("expected request among the dependencies; the listing looks wrong:\n%s", deps)
	}
	for _, banned := range []string{"github.com/jackc/pgx", "modernc.org/sqlite", "github.com/mattn/go-sqlite3", "github.com/lib/pq", "github.com/jmoiron/sqlx"} {
		if strings.Contains(deps, banned) {
			t.Errorf("httpapi links %s", banned)
		}
	}
}

package valid

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/rowlease/rowlease/internal/engine"
)

// TestTextNamesTheCallersPackage: the refusal is engine.CheckText's, under
// the caller's package name, and good text passes.
func TestTextNamesTheCallersPackage(t *testing.T) {
	if err := Text("request", "session key", "s-1", 10); err != nil {
		t.Fatalf("good text refused: %v", err)
	}
	for _, bad := range []string{"", "x ", "a\x00b", "\xff", strings.Repeat("a", 11)} {
		err := Text("request", "session key", bad, 10)
		var ve *engine.ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("%q: got %v, want a *engine.ValidationError", bad, err)
		}
		if ve.Package != "request" || ve.Field != "session key" {
			t.Fatalf("%q: package %q field %q, want request / session key", bad, ve.Package, ve.Field)
		}
		want := engine.CheckText("session key", bad, 10).(*engine.ValidationError)
		if ve.Reason != want.Reason {
			t.Fatalf("%q: reason %q, want engine.CheckText's %q", bad, ve.Reason, want.Reason)
		}
		if !strings.HasPrefix(err.Error(), "request: ") {
			t.Fatalf("%q: %q does not name the package", bad, err)
		}
	}
}

// TestDBRefusesNil: a nil database, typed or not, is a validation error
// under the caller's package; a database is not.
func TestDBRefusesNil(t *testing.T) {
	var nilDB *sql.DB
	var nilTx *sql.Tx
	for name, db := range map[string]any{"nil": nil, "typed nil db": nilDB, "typed nil tx": nilTx} {
		err := DB("toolexec", db)
		var ve *engine.ValidationError
		if !errors.As(err, &ve) || ve.Package != "toolexec" || ve.Field != "db" {
			t.Fatalf("%s: got %v, want a toolexec db *engine.ValidationError", name, err)
		}
	}
	if err := DB("toolexec", &sql.DB{}); err != nil {
		t.Fatalf("a database refused: %v", err)
	}
}

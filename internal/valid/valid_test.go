package valid

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/rowlease/rowlease/lease"
)

// TestTextNamesTheCallersPackage: the refusal is lease.CheckText's, under
// the caller's package name, and good text passes.
func TestTextNamesTheCallersPackage(t *testing.T) {
	if err := Text("request", "session key", "s-1", 10); err != nil {
		t.Fatalf("good text refused: %v", err)
	}
	for _, bad := range []string{"", "x ", "a\x00b", "\xff", strings.Repeat("a", 11)} {
		err := Text("request", "session key", bad, 10)
		var ve *lease.ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("%q: got %v, want a *lease.ValidationError", bad, err)
		}
		if ve.Package != "request" || ve.Field != "session key" {
			t.Fatalf("%q: package %q field %q, want request / session key", bad, ve.Package, ve.Field)
		}
		want := lease.CheckText("session key", bad, 10).(*lease.ValidationError)
		if ve.Reason != want.Reason {
			t.Fatalf("%q: reason %q, want lease.CheckText's %q", bad, ve.Reason, want.Reason)
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
		var ve *lease.ValidationError
		if !errors.As(err, &ve) || ve.Package != "toolexec" || ve.Field != "db" {
			t.Fatalf("%s: got %v, want a toolexec db *lease.ValidationError", name, err)
		}
	}
	if err := DB("toolexec", &sql.DB{}); err != nil {
		t.Fatalf("a database refused: %v", err)
	}
}

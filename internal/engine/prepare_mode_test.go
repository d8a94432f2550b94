package engine_test

import (
	"testing"

	"github.com/rowlease/rowlease/internal/engine"
)

// TestPrepareModePrepares pins the rule: PrepareAlways everywhere,
// PrepareNever nowhere, PrepareAuto on SQLite only.
func TestPrepareModePrepares(t *testing.T) {
	for _, c := range []struct {
		m    engine.PrepareMode
		d    engine.Dialect
		want bool
	}{
		{engine.PrepareAuto, engine.SQLite, true},
		{engine.PrepareAuto, engine.MySQL, false},
		{engine.PrepareAuto, engine.Postgres, false},
		{engine.PrepareAlways, engine.MySQL, true},
		{engine.PrepareAlways, engine.Postgres, true},
		{engine.PrepareAlways, engine.SQLite, true},
		{engine.PrepareNever, engine.SQLite, false},
		{engine.PrepareNever, engine.MySQL, false},
	} {
		if got := engine.Prepares(c.m, c.d); got != c.want {
			t.Errorf("Prepares(PrepareMode(%d), %v) = %v, want %v", c.m, c.d, got, c.want)
		}
	}
}

package lease_test

import (
	"testing"

	"github.com/rowlease/rowlease/lease"
)

// TestPrepareModePrepares pins the rule: PrepareAlways everywhere,
// PrepareNever nowhere, PrepareAuto on SQLite only.
func TestPrepareModePrepares(t *testing.T) {
	for _, c := range []struct {
		m    lease.PrepareMode
		d    lease.Dialect
		want bool
	}{
		{lease.PrepareAuto, lease.SQLite, true},
		{lease.PrepareAuto, lease.MySQL, false},
		{lease.PrepareAuto, lease.Postgres, false},
		{lease.PrepareAlways, lease.MySQL, true},
		{lease.PrepareAlways, lease.Postgres, true},
		{lease.PrepareAlways, lease.SQLite, true},
		{lease.PrepareNever, lease.SQLite, false},
		{lease.PrepareNever, lease.MySQL, false},
	} {
		if got := c.m.Prepares(c.d); got != c.want {
			t.Errorf("PrepareMode(%d).Prepares(%v) = %v, want %v", c.m, c.d, got, c.want)
		}
	}
}

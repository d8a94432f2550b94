package lease_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
)

var tableTestCols = lease.Columns{Key: "k", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation"}

func TestNewTable(t *testing.T) {
	long := strings.Repeat("a", 64)
	maxName := strings.Repeat("a", 63)
	badNames := []string{"", "1a", "a b", "a;b", `a"b`, "a`b", "a.b.c", long, "a." + long, long + ".a", ".a", "a.", "a-b", "a'b", "é", "a\x00"}
	for _, name := range badNames {
		_, err := lease.NewTable(name, tableTestCols)
		var ve *lease.ValidationError
		require.ErrorAs(t, err, &ve, "%q", name)
		assert.Equal(t, "table name", ve.Field, "%q", name)
		assert.ErrorIs(t, err, lease.ErrInvalid)
	}
	for _, name := range []string{"lease_item", "schema.table", "_x", "A1", maxName, maxName + "." + maxName} {
		tbl, err := lease.NewTable(name, tableTestCols)
		require.NoError(t, err, "%q", name)
		assert.Equal(t, name, tbl.Name())
		assert.Equal(t, tableTestCols, tbl.Columns())
	}

	withCol := func(f func(*lease.Columns)) lease.Columns {
		c := tableTestCols
		f(&c)
		return c
	}
	badCols := map[string]struct {
		cols  lease.Columns
		field string
	}{
		"missing Key":          {withCol(func(c *lease.Columns) { c.Key = "" }), "column Key"},
		"missing Holder":       {withCol(func(c *lease.Columns) { c.Holder = "" }), "column Holder"},
		"missing Token":        {withCol(func(c *lease.Columns) { c.Token = "" }), "column Token"},
		"missing ExpiresAt":    {withCol(func(c *lease.Columns) { c.ExpiresAt = "" }), "column ExpiresAt"},
		"missing Generation":   {withCol(func(c *lease.Columns) { c.Generation = "" }), "column Generation"},
		"bad Key":              {withCol(func(c *lease.Columns) { c.Key = "a b" }), "column Key"},
		"qualified Holder":     {withCol(func(c *lease.Columns) { c.Holder = "t.holder" }), "column Holder"},
		"injected Token":       {withCol(func(c *lease.Columns) { c.Token = "token; DROP TABLE x" }), "column Token"},
		"quoted ExpiresAt":     {withCol(func(c *lease.Columns) { c.ExpiresAt = "`e`" }), "column ExpiresAt"},
		"long Generation":      {withCol(func(c *lease.Columns) { c.Generation = long }), "column Generation"},
		"bad State":            {withCol(func(c *lease.Columns) { c.State = "1state" }), "column State"},
		"bad UpdatedAt":        {withCol(func(c *lease.Columns) { c.UpdatedAt = `u"` }), "column UpdatedAt"},
		"duplicate":            {withCol(func(c *lease.Columns) { c.Holder = "token" }), "column Token"},
		"duplicate other case": {withCol(func(c *lease.Columns) { c.Token = "HOLDER" }), "column Token"},
		"duplicate State":      {withCol(func(c *lease.Columns) { c.State = "Expires_At" }), "column State"},
		"duplicate UpdatedAt":  {withCol(func(c *lease.Columns) { c.UpdatedAt = "K" }), "column UpdatedAt"},
	}
	for name, c := range badCols {
		_, err := lease.NewTable("t", c.cols)
		var ve *lease.ValidationError
		require.ErrorAs(t, err, &ve, name)
		assert.Equal(t, c.field, ve.Field, name)
		assert.ErrorIs(t, err, lease.ErrInvalid, name)
	}
	_, err := lease.NewTable("t", withCol(func(c *lease.Columns) { c.State = "state"; c.UpdatedAt = "updated_at" }))
	require.NoError(t, err, "optional columns")

	assert.Panics(t, func() { lease.MustTable("a b", tableTestCols) })
	assert.NotPanics(t, func() { lease.MustTable("s.t", tableTestCols) })
}

package engine_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
)

var tableTestCols = engine.Columns{Key: "k", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation"}

func TestNewTable(t *testing.T) {
	long := strings.Repeat("a", 64)
	maxName := strings.Repeat("a", 63)
	badNames := []string{"", "1a", "a b", "a;b", `a"b`, "a`b", "a.b.c", long, "a." + long, long + ".a", ".a", "a.", "a-b", "a'b", "é", "a\x00"}
	for _, name := range badNames {
		_, err := engine.NewTable(name, tableTestCols)
		var ve *engine.ValidationError
		require.ErrorAs(t, err, &ve, "%q", name)
		assert.Equal(t, "table name", ve.Field, "%q", name)
		assert.ErrorIs(t, err, engine.ErrInvalid)
	}
	for _, name := range []string{"lease_item", "schema.table", "_x", "A1", maxName, maxName + "." + maxName} {
		tbl, err := engine.NewTable(name, tableTestCols)
		require.NoError(t, err, "%q", name)
		assert.Equal(t, name, tbl.Name())
		assert.Equal(t, tableTestCols, tbl.Columns())
	}

	withCol := func(f func(*engine.Columns)) engine.Columns {
		c := tableTestCols
		f(&c)
		return c
	}
	badCols := map[string]struct {
		cols  engine.Columns
		field string
	}{
		"missing Key":          {withCol(func(c *engine.Columns) { c.Key = "" }), "column Key"},
		"missing Holder":       {withCol(func(c *engine.Columns) { c.Holder = "" }), "column Holder"},
		"missing Token":        {withCol(func(c *engine.Columns) { c.Token = "" }), "column Token"},
		"missing ExpiresAt":    {withCol(func(c *engine.Columns) { c.ExpiresAt = "" }), "column ExpiresAt"},
		"missing Generation":   {withCol(func(c *engine.Columns) { c.Generation = "" }), "column Generation"},
		"bad Key":              {withCol(func(c *engine.Columns) { c.Key = "a b" }), "column Key"},
		"qualified Holder":     {withCol(func(c *engine.Columns) { c.Holder = "t.holder" }), "column Holder"},
		"injected Token":       {withCol(func(c *engine.Columns) { c.Token = "token; DROP TABLE x" }), "column Token"},
		"quoted ExpiresAt":     {withCol(func(c *engine.Columns) { c.ExpiresAt = "`e`" }), "column ExpiresAt"},
		"long Generation":      {withCol(func(c *engine.Columns) { c.Generation = long }), "column Generation"},
		"bad State":            {withCol(func(c *engine.Columns) { c.State = "1state" }), "column State"},
		"bad UpdatedAt":        {withCol(func(c *engine.Columns) { c.UpdatedAt = `u"` }), "column UpdatedAt"},
		"duplicate":            {withCol(func(c *engine.Columns) { c.Holder = "token" }), "column Token"},
		"duplicate other case": {withCol(func(c *engine.Columns) { c.Token = "HOLDER" }), "column Token"},
		"duplicate State":      {withCol(func(c *engine.Columns) { c.State = "Expires_At" }), "column State"},
		"duplicate UpdatedAt":  {withCol(func(c *engine.Columns) { c.UpdatedAt = "K" }), "column UpdatedAt"},
	}
	for name, c := range badCols {
		_, err := engine.NewTable("t", c.cols)
		var ve *engine.ValidationError
		require.ErrorAs(t, err, &ve, name)
		assert.Equal(t, c.field, ve.Field, name)
		assert.ErrorIs(t, err, engine.ErrInvalid, name)
	}
	_, err := engine.NewTable("t", withCol(func(c *engine.Columns) { c.State = "state"; c.UpdatedAt = "updated_at" }))
	require.NoError(t, err, "optional columns")

	assert.Panics(t, func() { engine.MustTable("a b", tableTestCols) })
	assert.NotPanics(t, func() { engine.MustTable("s.t", tableTestCols) })
}

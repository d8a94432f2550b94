package toolexec_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// TestColumnsCannotBeChanged (issue 8, item 14): the columns are handed
// out as a copy; changing it does not change what New uses.
func TestColumnsCannotBeChanged(t *testing.T) {
	c := toolexec.Columns()
	c.Key, c.Token = "changed", "changed"
	assert.Equal(t, schema.ColID, toolexec.Columns().Key)
	assert.Equal(t, schema.ColToken, toolexec.Columns().Token)
	s, err := toolexec.New(toolexec.Config{Dialect: lease.SQLite})
	require.NoError(t, err)
	assert.Equal(t, toolexec.Columns(), engine.TableOf(s.Lease()).Columns())
}

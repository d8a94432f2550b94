package request

import (
	"testing"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestMain fails the run if any goroutine is left behind.
func TestMain(m *testing.M) { testdb.Main(m) }

package chaos

import (
	"io"
	"log"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

func TestMain(m *testing.M) {
	if os.Getenv(WorkerEnv) != "" {
		os.Exit(WorkerMain()) // a worker process of the crash matrix
	}
	// The driver logs every connection the proxy cuts; the cuts are the point.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	testdb.Main(m)
}

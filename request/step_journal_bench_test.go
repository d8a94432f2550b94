package request

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// Journal benchmark sizes: one run records journalSteps steps of
// journalOutput bytes each.
const (
	journalSteps  = 200
	journalOutput = 8 << 10
)

// BenchmarkStepJournal records journalSteps steps of journalOutput bytes in
// one run, and reports what a step costs by its position: the mean time
// of a step in the first and in the last tenth of the run and their
// ratio (a journal whose cost grows with its length shows a ratio well
// above 1), the statements per step, and the bytes the database wrote per
// byte of output (PostgreSQL: WAL; MySQL/MariaDB: the InnoDB redo log;
// SQLite: what the process wrote to its files). Each op is one run.
func BenchmarkStepJournal(b *testing.B) {
	for _, d := range testdb.Dialects() {
		b.Run(d.String(), func(b *testing.B) {
			c := &countdb.Counter{}
			db := testdb.OpenWith(b, d, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
			e := newEnvTB(b, db, 30*time.Second)
			ctx := context.Background()
			// Random text: a compressing store (PostgreSQL's TOAST) must not
			// make the bytes written look smaller than they are.
			raw := make([]byte, (journalOutput-2)/2)
			_, _ = rand.Read(raw)
			out := json.RawMessage(`"` + hex.EncodeToString(raw) + `"`)
			var first, last time.Duration
			var stmts int64
			var written int64
			c.Pause() // counting only inside the steps
			b.ResetTimer()
			for i := range b.N {
				before := bytesWritten(b, db, d)
				c.Reset()
				_, err := e.r.Handle(ctx, Message{SessionKey: fmt.Sprintf("s%d", i), ClientRequestID: "c", Content: "x"},
					func(ctx context.Context, run *Run) (Answer, error) {
						for p := range journalSteps {
							start := time.Now()
							c.Resume()
							_, err := run.Step(ctx, "step-"+strconv.Itoa(p), func(context.Context) (json.RawMessage, error) { return out, nil })
							c.Pause()
							if err != nil {
								return Answer{}, err
							}
							switch el := time.Since(start); {
							case p < journalSteps/10:
								first += el
							case p >= journalSteps-journalSteps/10:
								last += el
							}
						}
						return Answer{Reply: "ok"}, nil
					})
				require.NoError(b, err)
				stmts += c.Stats().Statements
				written += bytesWritten(b, db, d) - before
			}
			b.StopTimer()
			tenth := float64(b.N * journalSteps / 10)
			b.ReportMetric(float64(first.Microseconds())/tenth/1000, "ms/step-first-tenth")
			b.ReportMetric(float64(last.Microseconds())/tenth/1000, "ms/step-last-tenth")
			b.ReportMetric(float64(last)/float64(first), "last/first")
			b.ReportMetric(float64(stmts)/float64(b.N*journalSteps), "stmts/step")
			b.ReportMetric(float64(written)/float64(b.N*journalSteps*journalOutput), "written-bytes/output-byte")
		})
	}
}

// bytesWritten reads a running total of what the database has written:
// PostgreSQL's WAL position, MySQL's InnoDB redo log bytes, and on SQLite
// (embedded) the bytes this process has written (/proc/self/io wchar).
func bytesWritten(b *testing.B, db *sqlx.DB, d lease.Dialect) int64 {
	b.Helper()
	var n int64
	switch d {
	case lease.Postgres:
		require.NoError(b, db.Get(&n, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"))
	case lease.MySQL:
		var name string
		require.NoError(b, db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_os_log_written'").Scan(&name, &n))
	default:
		f, err := os.Open("/proc/self/io")
		if err != nil {
			b.Skipf("no /proc/self/io: %v", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "wchar: "); ok {
				n, err = strconv.ParseInt(v, 10, 64)
				require.NoError(b, err)
			}
		}
	}
	return n
}

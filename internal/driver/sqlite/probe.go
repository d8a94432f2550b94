package sqlite

import (
	"context"
	"log/slog"
	"strings"

	"github.com/rowlease/rowlease/internal/driver"
)

// probeSQL reads the connection's busy timeout and the journal mode of
// the main database (table-valued pragmas exist on SQLite alone).
const probeSQL = "SELECT (SELECT * FROM pragma_busy_timeout), (SELECT * FROM pragma_journal_mode)"

// Probe reads the busy timeout and the journal mode, and logs a warning
// for each that the package doc asks for and is missing. Neither makes a
// lease unsafe; both make writers fail or wait where they need not. The
// expiry column, integer microseconds, needs no check.
func (Driver) Probe(ctx context.Context, db driver.DB, p driver.ProbeParams) (driver.ProbeResult, error) {
	var busy int64
	var journal string
	if err := db.QueryRowContext(ctx, probeSQL).Scan(&busy, &journal); err != nil {
		return driver.ProbeResult{}, err
	}
	if busy <= 0 {
		p.Log.WarnContext(ctx, "lease: SQLite busy_timeout is 0: a statement that finds the database locked fails at once with SQLITE_BUSY instead of waiting; open the database with a busy timeout (modernc.org/sqlite: _pragma=busy_timeout(10000); mattn/go-sqlite3: _busy_timeout=10000)",
			slog.String("table", p.Name))
	}
	if !strings.EqualFold(journal, "wal") {
		p.Log.WarnContext(ctx, "lease: SQLite journal_mode is not WAL: readers and the writer block each other; open the database with journal_mode WAL (modernc.org/sqlite: _pragma=journal_mode(WAL); mattn/go-sqlite3: _journal_mode=WAL)",
			slog.String("table", p.Name), slog.String("journal_mode", journal))
	}
	return driver.ProbeResult{}, nil
}

package sqlitedsn

import (
	"testing"
	"time"
)

// TestDSNs pins the DSN of every place that builds one, as each spelled it
// by hand before: the same strings.
func TestDSNs(t *testing.T) {
	t.Parallel()
	test := Settings{BusyTimeout: 20 * time.Second, SynchronousNormal: true}
	for _, c := range []struct{ name, got, want string }{
		{"schema.SQLiteDSN", Modernc("app.db", Settings{}),
			"file:app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"},
		{"testdb.SQLiteDSN, benchreport", Modernc("/tmp/t/test.db", test),
			"file:/tmp/t/test.db?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"},
		{"testdb.Mattn3DSN", Mattn("/tmp/t/test.db", test),
			"file:/tmp/t/test.db?_busy_timeout=20000&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate"},
		{"bookkeeper", Modernc("bookkeeper.db", Settings{BusyTimeout: 20 * time.Second, SynchronousNormal: true, ForeignKeys: true}),
			"file:bookkeeper.db?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_txlock=immediate"},
		{"mattn default", Mattn("app.db", Settings{}),
			"file:app.db?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate"},
		{"mattn foreign keys", Mattn("app.db", Settings{ForeignKeys: true, BusyTimeout: 1500 * time.Millisecond}),
			"file:app.db?_busy_timeout=1500&_journal_mode=WAL&_foreign_keys=1&_txlock=immediate"},
		{"below a millisecond: the default", Modernc("app.db", Settings{BusyTimeout: time.Microsecond}),
			"file:app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"},
	} {
		if c.got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, c.got, c.want)
		}
	}
}

// Package sqlitedsn builds the DSN of a SQLite database file with the
// settings rowlease runs SQLite with, in the spelling of either driver:
// WAL, a busy timeout, _txlock=immediate, and on request synchronous=NORMAL
// and foreign keys. schema.SQLiteDSN (for users), internal/testkit/testdb
// and the harnesses build theirs with it, each stating only what differs.
package sqlitedsn

import (
	"strconv"
	"strings"
	"time"
)

// DefaultBusyTimeout is the busy timeout of a DSN whose Settings leave it
// zero.
const DefaultBusyTimeout = 10 * time.Second

// Settings are what differs between the DSNs. Every DSN has journal_mode
// WAL and _txlock=immediate.
type Settings struct {
	// BusyTimeout is how long a connection waits for another one's lock,
	// in whole milliseconds; below one millisecond, DefaultBusyTimeout.
	BusyTimeout time.Duration
	// SynchronousNormal sets synchronous=NORMAL (fsync at checkpoints, not
	// at every commit: safe in WAL mode against corruption, but the last
	// commits may be lost if the machine loses power). Otherwise the
	// driver's default, FULL.
	SynchronousNormal bool
	// ForeignKeys turns foreign-key enforcement on.
	ForeignKeys bool
}

// Modernc returns the DSN for modernc.org/sqlite (driver name "sqlite"):
//
//	file:PATH?_pragma=busy_timeout(MS)&_pragma=journal_mode(WAL)[&_pragma=synchronous(NORMAL)][&_pragma=foreign_keys(1)]&_txlock=immediate
func Modernc(path string, s Settings) string {
	return build(path, s, func(name, value string) string { return "_pragma=" + name + "(" + value + ")" })
}

// Mattn returns the DSN for mattn/go-sqlite3 (driver name "sqlite3"):
//
//	file:PATH?_busy_timeout=MS&_journal_mode=WAL[&_synchronous=NORMAL][&_foreign_keys=1]&_txlock=immediate
func Mattn(path string, s Settings) string {
	return build(path, s, func(name, value string) string { return "_" + name + "=" + value })
}

// build writes the settings in one order for both drivers; pragma spells
// one of them.
func build(path string, s Settings, pragma func(name, value string) string) string {
	timeout := s.BusyTimeout
	if timeout < time.Millisecond {
		timeout = DefaultBusyTimeout
	}
	params := []string{
		pragma("busy_timeout", strconv.FormatInt(timeout.Milliseconds(), 10)),
		pragma("journal_mode", "WAL"),
	}
	if s.SynchronousNormal {
		params = append(params, pragma("synchronous", "NORMAL"))
	}
	if s.ForeignKeys {
		params = append(params, pragma("foreign_keys", "1"))
	}
	params = append(params, "_txlock=immediate")
	return "file:" + path + "?" + strings.Join(params, "&")
}

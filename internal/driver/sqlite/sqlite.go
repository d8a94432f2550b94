package sqlite

import (
	"time"

	"github.com/rowlease/rowlease/internal/driver"
)

// Driver is the SQLite dialect. Its zero value is ready.
type Driver struct{}

var _ driver.Driver = Driver{}

// Name returns "sqlite".
func (Driver) Name() string { return "sqlite" }

// Caps: RETURNING, ConfirmPut in one INSERT … SELECT, statements prepared
// by default (compiled in the process, no round trip), one writer at a
// time. Busy errors are not sent again: the busy timeout already waited.
func (Driver) Caps() driver.Caps {
	return driver.Caps{
		ClockResolution:  time.Millisecond,
		Returning:        true,
		PutInOne:         true,
		PrepareByDefault: true,
		SingleWriter:     true,
	}
}

// Quote quotes an identifier with double quotes.
func (Driver) Quote(id string) string { return `"` + id + `"` }

// Now is integer microseconds since the Unix epoch. SQLite's clock has
// millisecond resolution; 'now' is fixed for one statement step.
func (Driver) Now() string {
	return "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"
}

// PlusMicros adds integers.
func (Driver) PlusMicros(t, micros string) string { return "(" + t + " + " + micros + ")" }

// MicrosUntil subtracts integers.
func (d Driver) MicrosUntil(t string) string { return "(" + t + " - " + d.Now() + ")" }

// Compile writes ? placeholders.
func (Driver) Compile(tmpl string) (string, []string) { return driver.CompilePositional(tmpl) }

// Rebind returns q: the placeholders are ?.
func (Driver) Rebind(q string) string { return q }

// GenerationBack is "": the generation comes back with RETURNING.
func (Driver) GenerationBack(string, string) string { return "" }

// Returning is " RETURNING " + cols (SQLite 3.35+).
func (Driver) Returning(cols string) string { return " RETURNING " + cols }

// ForUpdate is "": a transaction's first write locks the whole database.
func (Driver) ForUpdate() string { return "" }

// InsertIgnore is ON CONFLICT (key) DO NOTHING.
func (Driver) InsertIgnore(keyCol string) string { return " ON CONFLICT (" + keyCol + ") DO NOTHING" }

// Pairs writes ? placeholders, each key given twice; SQLite takes a row
// value IN only from a subquery, hence VALUES before the row list.
func (Driver) Pairs(keys []any, toks []string, gens []int64) (string, string, []any) {
	kl, pl, args := driver.PairsPositional(keys, toks, gens)
	return kl, "VALUES " + pl, args
}

// Causal returns q: SQLite has no cluster.
func (Driver) Causal(q string) string { return q }

// Joint is "": joint writes go one by one.
func (Driver) Joint([]driver.JointPart) string { return "" }

// AcquireCreate is "": the two writes go one by one in the caller's
// transaction.
func (Driver) AcquireCreate(driver.AcquireCreateParams) string { return "" }

// ConfirmPut inserts the row selected only while the grant's row holds
// (INSERT … SELECT … WHERE EXISTS), as an upsert.
func (Driver) ConfirmPut(p driver.PutParams) string {
	return p.Into + " SELECT " + p.Values + " WHERE EXISTS (" + p.Held + ")" + driver.OnConflictUpdate(p.Key, p.Update)
}

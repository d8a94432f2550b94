package mysql

import (
	"strings"
	"time"

	"github.com/rowlease/rowlease/internal/driver"
)

// Driver is the MySQL and MariaDB dialect. Its zero value is ready.
type Driver struct{}

var _ driver.Driver = Driver{}

// Name returns "mysql".
func (Driver) Name() string { return "mysql" }

// Caps: no RETURNING (the generation comes back as LAST_INSERT_ID), a
// multi-table UPDATE for joint writes, victims sent again, a Galera
// cluster allowed.
func (Driver) Caps() driver.Caps {
	return driver.Caps{
		ClockResolution: time.Microsecond,
		Joint:           driver.JointMultiUpdate,
		RetryVictims:    true,
		MultiPrimary:    true,
	}
}

// Quote quotes an identifier with backticks.
func (Driver) Quote(id string) string { return "`" + id + "`" }

// Now is UTC_TIMESTAMP(6): DATETIME(6) columns hold UTC.
func (Driver) Now() string { return "UTC_TIMESTAMP(6)" }

// PlusMicros adds an INTERVAL of micros microseconds.
func (Driver) PlusMicros(t, micros string) string {
	return "(" + t + " + INTERVAL " + micros + " MICROSECOND)"
}

// MicrosUntil is TIMESTAMPDIFF in microseconds.
func (d Driver) MicrosUntil(t string) string {
	return "TIMESTAMPDIFF(MICROSECOND, " + d.Now() + ", " + t + ")"
}

// Compile writes ? placeholders.
func (Driver) Compile(tmpl string) (string, []string) { return driver.CompilePositional(tmpl) }

// Rebind returns q: MySQL's placeholders are ?.
func (Driver) Rebind(q string) string { return q }

// GenerationBack wraps the new generation in LAST_INSERT_ID(expr), so
// that its value comes back in the OK packet. MySQL evaluates SET left to
// right on already-updated values, so the engine makes it the first
// assignment.
func (Driver) GenerationBack(col, expr string) string {
	return col + " = LAST_INSERT_ID(" + expr + ")"
}

// Returning is "": MySQL has no RETURNING.
func (Driver) Returning(string) string { return "" }

// ForUpdate is " FOR UPDATE".
func (Driver) ForUpdate() string { return " FOR UPDATE" }

// InsertIgnore assigns the key to itself on a duplicate: unlike INSERT
// IGNORE, it turns no other error into a warning.
func (Driver) InsertIgnore(keyCol string) string {
	return " ON DUPLICATE KEY UPDATE " + keyCol + " = " + keyCol
}

// Pairs writes ? placeholders, each key given twice.
func (Driver) Pairs(keys []any, toks []string, gens []int64) (string, string, []any) {
	return driver.PairsPositional(keys, toks, gens)
}

// Causal prefixes q with MariaDB's SET STATEMENT wsrep_sync_wait=15 (for
// reads, updates, deletes and inserts), so that the node it runs on first
// applies every write the cluster committed before it. A single server
// has no wsrep_sync_wait to wait on.
func (Driver) Causal(q string) string { return "SET STATEMENT wsrep_sync_wait=15 FOR " + q }

// Joint is a multi-table UPDATE: every part's table under its alias, its
// assignments, and the conjunction of its conditions. MySQL makes all the
// writes or none.
func (Driver) Joint(parts []driver.JointPart) string {
	var b strings.Builder
	sets := make([]string, len(parts))
	wheres := make([]string, len(parts))
	for i, p := range parts {
		if i == 0 {
			b.WriteString("UPDATE ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(p.Table + " AS " + p.Alias)
		sets[i] = p.Set
		wheres[i] = "(" + p.Where + ")"
	}
	b.WriteString(" SET " + strings.Join(sets, ", ") + " WHERE " + strings.Join(wheres, " AND "))
	return b.String()
}

// AcquireCreate is "": MySQL has no data-modifying WITH; the engine makes
// the two writes one by one in the caller's transaction.
func (Driver) AcquireCreate(driver.AcquireCreateParams) string { return "" }

// ConfirmPut is the upsert alone (ON DUPLICATE KEY UPDATE … VALUES(c)),
// sent after a Confirm in the same transaction.
func (Driver) ConfirmPut(p driver.PutParams) string {
	return p.Into + " VALUES (" + p.Values + ") ON DUPLICATE KEY UPDATE " + driver.UpsertSet(p.Update, func(c string) string {
		return "VALUES(" + c + ")"
	})
}

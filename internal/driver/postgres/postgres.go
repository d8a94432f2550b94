package postgres

import (
	"strconv"
	"strings"
	"time"

	"github.com/rowlease/rowlease/internal/driver"
)

// Driver is the PostgreSQL dialect. Its zero value is ready.
type Driver struct{}

var _ driver.Driver = Driver{}

// Name returns "postgres".
func (Driver) Name() string { return "postgres" }

// Caps: RETURNING, data-modifying WITH statements for joint writes,
// AcquireCreate and ConfirmPut, victims sent again.
func (Driver) Caps() driver.Caps {
	return driver.Caps{
		ClockResolution: time.Microsecond,
		Returning:       true,
		Joint:           driver.JointWith,
		AcquireCreate:   true,
		PutInOne:        true,
		RetryVictims:    true,
	}
}

// Quote quotes an identifier with double quotes.
func (Driver) Quote(id string) string { return `"` + id + `"` }

// Now is statement_timestamp(), not now(): now() is the start of the
// transaction, so a lease taken late in a long transaction would get an
// expiry in the past.
func (Driver) Now() string { return "statement_timestamp()" }

// PlusMicros adds micros times a one-microsecond interval.
func (Driver) PlusMicros(t, micros string) string {
	return "(" + t + " + CAST(" + micros + " AS bigint) * INTERVAL '1 microsecond')"
}

// MicrosUntil is the epoch difference in whole microseconds.
func (d Driver) MicrosUntil(t string) string {
	return "CAST(FLOOR(EXTRACT(EPOCH FROM (" + t + " - " + d.Now() + ")) * 1000000) AS bigint)"
}

// Compile writes $n placeholders, one number per name.
func (Driver) Compile(tmpl string) (string, []string) { return driver.CompileNumbered(tmpl) }

// Rebind numbers the ? placeholders of q: $1, $2, …
func (Driver) Rebind(q string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// GenerationBack is "": the generation comes back with RETURNING.
func (Driver) GenerationBack(string, string) string { return "" }

// Returning is " RETURNING " + cols.
func (Driver) Returning(cols string) string { return " RETURNING " + cols }

// ForUpdate is " FOR UPDATE".
func (Driver) ForUpdate() string { return " FOR UPDATE" }

// InsertIgnore is ON CONFLICT (key) DO NOTHING.
func (Driver) InsertIgnore(keyCol string) string { return " ON CONFLICT (" + keyCol + ") DO NOTHING" }

// Pairs numbers its placeholders and names each key once.
func (Driver) Pairs(keys []any, toks []string, gens []int64) (string, string, []any) {
	return driver.PairsNumbered(keys, toks, gens)
}

// Causal returns q: PostgreSQL has no multi-primary cluster here.
func (Driver) Causal(q string) string { return q }

// Joint writes each part as a data-modifying WITH, then one row of their
// generations: (SELECT generation FROM j0), … NULL for a part that
// matched nothing. The parts that matched are made.
func (Driver) Joint(parts []driver.JointPart) string {
	var b strings.Builder
	reads := make([]string, len(parts))
	for i, p := range parts {
		if i == 0 {
			b.WriteString("WITH ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(p.Alias + " AS (" + p.Update + ")")
		reads[i] = "(SELECT " + p.Generation + " FROM " + p.Alias + ")"
	}
	b.WriteString(" SELECT " + strings.Join(reads, ", "))
	return b.String()
}

// AcquireCreate is the acquire (RETURNING the generation) and the insert,
// its values selected from the acquire's row, so that it inserts a row
// only if the acquire matched one; then the generation of each, NULL for
// a write that matched nothing. With p.Unless, a first part reads the
// row, the acquire matches only if that read found none, and the result
// adds a found mark and the row's columns (NULL when there is none): one
// row in every case, through a LEFT JOIN.
func (d Driver) AcquireCreate(p driver.AcquireCreateParams) string {
	ins := "INSERT INTO " + p.CreateTable + " (" + p.CreateColumns + ") SELECT " + p.CreateValues +
		" FROM rowlease_acquired" + d.Returning(p.CreateGeneration)
	where := p.AcquireWhere
	head, found := "WITH ", ""
	if u := p.Unless; u != nil {
		found = ", rowlease_existing.rowlease_found"
		for _, col := range u.Columns {
			found += ", rowlease_existing." + col
		}
		head += "rowlease_existing AS (" + u.Query + "), "
		where += " AND NOT EXISTS (SELECT 1 FROM rowlease_existing)"
	}
	acquire := "UPDATE " + p.AcquireTable + " SET " + p.AcquireSet + " WHERE " + where + d.Returning(p.AcquireGeneration)
	q := head + "rowlease_acquired AS (" + acquire + "), rowlease_created AS (" + ins + ")" +
		" SELECT (SELECT " + p.AcquireGeneration + " FROM rowlease_acquired)," +
		" (SELECT " + p.CreateGeneration + " FROM rowlease_created)" + found
	if p.Unless != nil {
		q += " FROM (SELECT 1) AS rowlease_one LEFT JOIN rowlease_existing ON TRUE"
	}
	return q
}

// ConfirmPut confirms the grant in a data-modifying WITH and upserts the
// row selected from it: no row confirmed, no row written.
func (Driver) ConfirmPut(p driver.PutParams) string {
	return "WITH rowlease_confirm AS (" + p.Confirm + ") " + p.Into + " SELECT " + p.Values + " FROM rowlease_confirm" +
		driver.OnConflictUpdate(p.Key, p.Update)
}

package driver_test

import (
	"errors"
	"fmt"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/rowlease/rowlease/internal/driver"
	"github.com/rowlease/rowlease/internal/driver/mysql"
	"github.com/rowlease/rowlease/internal/driver/postgres"
	"github.com/rowlease/rowlease/internal/driver/sqlite"
)

var all = []driver.Driver{mysql.Driver{}, postgres.Driver{}, sqlite.Driver{}}

// TestCompile pins the placeholders: ? once per parameter written, or $n
// once per name.
func TestCompile(t *testing.T) {
	const tmpl = "a = {x} AND b = {y} AND c = {x}"
	for _, c := range []struct {
		d     driver.Driver
		query string
		names string
	}{
		{mysql.Driver{}, "a = ? AND b = ? AND c = ?", "[x y x]"},
		{postgres.Driver{}, "a = $1 AND b = $2 AND c = $1", "[x y]"},
		{sqlite.Driver{}, "a = ? AND b = ? AND c = ?", "[x y x]"},
	} {
		q, names := c.d.Compile(tmpl)
		if q != c.query || fmt.Sprint(names) != c.names {
			t.Errorf("%s: Compile = %q %v, want %q %s", c.d.Name(), q, names, c.query, c.names)
		}
	}
}

func TestRebind(t *testing.T) {
	const q = "SELECT a FROM t WHERE b = ? AND c = ?"
	for _, d := range all {
		want := q
		if d.Name() == "postgres" {
			want = "SELECT a FROM t WHERE b = $1 AND c = $2"
		}
		if got := d.Rebind(q); got != want {
			t.Errorf("%s: Rebind = %q, want %q", d.Name(), got, want)
		}
	}
}

func TestPairs(t *testing.T) {
	keys, toks, gens := []any{"a", "b"}, []string{"t1", "t2"}, []int64{1, 2}
	for _, c := range []struct {
		d              driver.Driver
		keyList, pairs string
		args           string
	}{
		{mysql.Driver{}, "?, ?", "(?, ?, ?), (?, ?, ?)", "[a b a t1 1 b t2 2]"},
		{postgres.Driver{}, "$1, $4", "($1, $2, $3), ($4, $5, $6)", "[a t1 1 b t2 2]"},
		{sqlite.Driver{}, "?, ?", "VALUES (?, ?, ?), (?, ?, ?)", "[a b a t1 1 b t2 2]"},
	} {
		kl, pl, args := c.d.Pairs(keys, toks, gens)
		if kl != c.keyList || pl != c.pairs || fmt.Sprint(args) != c.args {
			t.Errorf("%s: Pairs = %q %q %v", c.d.Name(), kl, pl, args)
		}
	}
}

type pgErr string

func (e pgErr) Error() string    { return "pg " + string(e) }
func (e pgErr) SQLState() string { return string(e) }

type liteErr int

func (e liteErr) Error() string { return fmt.Sprintf("sqlite %d", int(e)) }
func (e liteErr) Code() int     { return int(e) }

// TestClassify: each driver recognises its own errors, wrapped, and no
// other driver's.
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		d    driver.Driver
		err  error
		kind driver.ErrKind
	}{
		{mysql.Driver{}, &gomysql.MySQLError{Number: 1062}, driver.KindDuplicateKey},
		{mysql.Driver{}, &gomysql.MySQLError{Number: 1213}, driver.KindRetryable},
		{mysql.Driver{}, &gomysql.MySQLError{Number: 1205}, driver.KindTransient},
		{mysql.Driver{}, &gomysql.MySQLError{Number: 1146}, driver.KindOther},
		{postgres.Driver{}, pgErr("23505"), driver.KindDuplicateKey},
		{postgres.Driver{}, pgErr("40001"), driver.KindRetryable},
		{postgres.Driver{}, pgErr("40P01"), driver.KindRetryable},
		{postgres.Driver{}, pgErr("42P01"), driver.KindOther},
		{sqlite.Driver{}, liteErr(2067), driver.KindDuplicateKey},
		{sqlite.Driver{}, liteErr(1555), driver.KindDuplicateKey},
		{sqlite.Driver{}, liteErr(5), driver.KindRetryable},
		{sqlite.Driver{}, liteErr(517), driver.KindRetryable}, // SQLITE_BUSY_SNAPSHOT
		{sqlite.Driver{}, liteErr(6), driver.KindTransient},
		{sqlite.Driver{}, liteErr(1), driver.KindOther},
	} {
		wrapped := fmt.Errorf("op: %w", c.err)
		for _, d := range all {
			k, ok := d.Classify(wrapped)
			if mine := d.Name() == c.d.Name(); ok != mine || (mine && k != c.kind) {
				t.Errorf("%s.Classify(%v) = %d, %v; want %d from %s only", d.Name(), c.err, k, ok, c.kind, c.d.Name())
			}
		}
	}
	for _, d := range all {
		if _, ok := d.Classify(errors.New("plain")); ok {
			t.Errorf("%s recognises a plain error", d.Name())
		}
	}
}

func TestUnavailableNode(t *testing.T) {
	for _, c := range []struct {
		d           driver.Driver
		err         error
		unavailable bool
	}{
		{mysql.Driver{}, gomysql.ErrInvalidConn, true},
		{mysql.Driver{}, &gomysql.MySQLError{Number: 1047}, true},
		{mysql.Driver{}, &gomysql.MySQLError{Number: 1062}, false},
		{postgres.Driver{}, errors.New("conn closed"), true},
		{postgres.Driver{}, errors.New("read only connection"), true},
		{postgres.Driver{}, pgErr("08006"), true},
		{postgres.Driver{}, pgErr("57P03"), true},
		{postgres.Driver{}, pgErr("23505"), false},
		{sqlite.Driver{}, liteErr(14), true},
		{sqlite.Driver{}, liteErr(19), false},
	} {
		u, ok := c.d.UnavailableNode(c.err)
		if !ok || u != c.unavailable {
			t.Errorf("%s.UnavailableNode(%v) = %v, %v; want %v, true", c.d.Name(), c.err, u, ok, c.unavailable)
		}
	}
	// A wrapping error is not a leaf: only its own node is judged.
	if _, ok := (postgres.Driver{}).UnavailableNode(fmt.Errorf("x: %w", errors.New("conn closed"))); ok {
		t.Error("a wrapper of pgx's text was judged as the sentinel")
	}
}

// TestCaps pins what each dialect's statements can do.
func TestCaps(t *testing.T) {
	for _, c := range []struct {
		d    driver.Driver
		want string
	}{
		{mysql.Driver{}, "{ClockResolution:1µs Returning:false Joint:2 AcquireCreate:false PutInOne:false RetryVictims:true PrepareByDefault:false SingleWriter:false MultiPrimary:true}"},
		{postgres.Driver{}, "{ClockResolution:1µs Returning:true Joint:1 AcquireCreate:true PutInOne:true RetryVictims:true PrepareByDefault:false SingleWriter:false MultiPrimary:false}"},
		{sqlite.Driver{}, "{ClockResolution:1ms Returning:true Joint:0 AcquireCreate:false PutInOne:true RetryVictims:false PrepareByDefault:true SingleWriter:true MultiPrimary:false}"},
	} {
		if got := fmt.Sprintf("%+v", c.d.Caps()); got != c.want {
			t.Errorf("%s: Caps = %s, want %s", c.d.Name(), got, c.want)
		}
	}
}

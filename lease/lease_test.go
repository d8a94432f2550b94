//lint:file-ignore SA5009 TestTokenRedactionReflectionPaths formats grants with wrong verbs on purpose: a token must not leak through them either

package lease_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/rowlease/rowlease/internal/conformance"
	"github.com/rowlease/rowlease/internal/countdb"
	"github.com/rowlease/rowlease/internal/testdb"
	"github.com/rowlease/rowlease/lease"
)

// ---- Token ---------------------------------------------------------------

// TestTokenRedaction: a token, a grant holding it, or a value holding a
// grant in an exported field never shows the secret through fmt, slog,
// encoding/json or wrapped errors.
func TestTokenRedaction(t *testing.T) {
	tok, err := lease.NewToken()
	require.NoError(t, err)
	secret := tok.Secret()
	require.Len(t, secret, 36)
	g := lease.Grant[string]{Key: "k", Holder: "alice", Token: tok, Generation: 3, TTL: time.Second}
	type Job struct {
		Name  string
		Grant lease.Grant[string]
		Toks  []lease.Token
		ByKey map[string]lease.Grant[string]
		Any   any
	}
	job := Job{Name: "j", Grant: g, Toks: []lease.Token{tok}, ByKey: map[string]lease.Grant[string]{"k": g}, Any: g}
	type JobPtr struct {
		Name  string
		Grant *lease.Grant[string]
	}
	jobPtr := JobPtr{Name: "j", Grant: &g}

	var outs []string
	for _, verb := range []string{"%v", "%s", "%+v", "%#v", "%q", "%x", "%X", "%d", "%10.3s", "%T"} {
		for _, v := range []any{tok, &tok, g, &g, job, &job, []any{tok, g}, []lease.Grant[string]{g}} {
			outs = append(outs, fmt.Sprintf(verb, v))
		}
	}
	// A pointer to a grant in a field prints as an address with %v.
	for _, verb := range []string{"%v", "%+v", "%#v"} {
		outs = append(outs, fmt.Sprintf(verb, jobPtr))
	}
	outs = append(outs, fmt.Sprint(tok, g, job), fmt.Sprintln(tok, g, job), tok.String(), tok.GoString())
	assert.Equal(t, "[redacted]", fmt.Sprintf("%v", tok))
	assert.Equal(t, "[redacted]", fmt.Sprintf("%s", tok))
	assert.Equal(t, "[redacted]", fmt.Sprintf("%q", tok))
	assert.Equal(t, "[redacted]", fmt.Sprintf("%#v", tok))
	assert.Equal(t, "[redacted]", tok.String())
	assert.Equal(t, "[redacted]", tok.GoString())
	assert.Contains(t, fmt.Sprintf("%+v", g), "Token:[redacted]")

	// slog: JSON and text handlers, the token as a value and inside structs.
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var buf bytes.Buffer
		log := slog.New(h(&buf))
		log.Info("lease", "token", tok, "grant", g, "ptr", &g, "job", job, "jobptr", jobPtr, slog.Group("grp", "tok", tok))
		log.Info("lease", slog.Any("token", tok), slog.String("s", tok.String()))
		log.With("grant", g).Error("failed", "err", fmt.Errorf("renew %v: %w", g, lease.ErrLost))
		require.Contains(t, buf.String(), "[redacted]")
		outs = append(outs, buf.String())
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("lease", "job", job)
	var decoded map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &decoded), "the JSON handler still writes valid JSON")
	assert.Equal(t, "[redacted]", decoded["job"].(map[string]any)["Grant"].(map[string]any)["Token"])

	// encoding/json.
	for _, v := range []any{tok, &tok, g, &g, job, jobPtr, struct{ T lease.Token }{tok}, map[string]lease.Token{"t": tok}} {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		outs = append(outs, string(b))
	}
	b, err := json.Marshal(tok)
	require.NoError(t, err)
	assert.Equal(t, `"[redacted]"`, string(b))
	b, err = json.Marshal(g)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"Token":"[redacted]"`)
	text, err := tok.MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "[redacted]", string(text))

	// Errors that wrap or print a grant.
	base := errors.New("boom")
	for _, e := range []error{
		fmt.Errorf("renew %v: %w", g, base),
		fmt.Errorf("renew %+v: %w", &g, base),
		fmt.Errorf("job %#v: %w", job, base),
		fmt.Errorf("job %+v: %w", jobPtr, base),
		errors.Join(base, fmt.Errorf("token %s", tok)),
		fmt.Errorf("outer: %w", fmt.Errorf("inner %v: %w", tok, &lease.LostError{Key: "k", Op: "renew"})),
	} {
		outs = append(outs, e.Error(), fmt.Sprintf("%+v", e))
	}

	for _, o := range outs {
		assert.NotContains(t, o, secret)
		assert.NotContains(t, o, secret[:8], "nor a piece of it")
	}
	// The raw value is only available on request.
	assert.Equal(t, secret, tok.Secret())
}

// TestTokenRedactionReflectionPaths covers the ways fmt prints a value by
// reflection without calling its methods: a grant in an unexported field,
// and a pointer to a grant printed with a verb that does not suit a
// pointer (fmt's %!s(...) path turns method calls off). Both print the
// secret while Token keeps it in a plain string field.
func TestTokenRedactionReflectionPaths(t *testing.T) {
	tok, err := lease.NewToken()
	require.NoError(t, err)
	g := lease.Grant[string]{Key: "k", Holder: "alice", Token: tok, Generation: 3}
	type worker struct {
		name  string
		grant lease.Grant[string]
	}
	type JobPtr struct{ Grant *lease.Grant[string] }
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("state", "worker", worker{"w", g})
	// Through variables, as a logger's format would be: go vet flags the
	// constant forms of the pointer cases, not these.
	s, d := "%s", "%d"
	outs := map[string]string{
		"%v unexported field":          fmt.Sprintf("%v", worker{"w", g}),
		"%+v unexported field":         fmt.Sprintf("%+v", worker{"w", g}),
		"%#v unexported field":         fmt.Sprintf("%#v", worker{"w", g}),
		"%s pointer field":             fmt.Sprintf(s, JobPtr{&g}),
		"%d pointer field":             fmt.Sprintf(d, JobPtr{&g}),
		"slog text unexported field":   buf.String(),
		"%v unexported token field":    fmt.Sprintf("%v", struct{ t lease.Token }{tok}),
		"%s map of pointers to grants": fmt.Sprintf(s, map[string]*lease.Grant[string]{"k": &g}),
	}
	var leaks []string
	for name, o := range outs {
		if strings.Contains(o, tok.Secret()) {
			leaks = append(leaks, name)
		}
	}
	if len(leaks) > 0 {
		t.Errorf("the token leaks through: %s", strings.Join(leaks, "; "))
	}
}

func TestParseToken(t *testing.T) {
	tok, err := lease.NewToken()
	require.NoError(t, err)
	assert.False(t, tok.IsZero())
	assert.Equal(t, byte('4'), tok.Secret()[14], "a version-4 UUID")
	back, err := lease.ParseToken(tok.Secret())
	require.NoError(t, err)
	assert.True(t, back.Equal(tok))
	assert.Equal(t, tok.Secret(), back.Secret())
	other, err := lease.NewToken()
	require.NoError(t, err)
	assert.False(t, other.Equal(tok), "tokens are random")
	assert.True(t, lease.Token{}.IsZero())
	assert.True(t, lease.Token{}.Equal(lease.Token{}))

	s := tok.Secret()
	for _, bad := range []string{
		"",
		"not-a-uuid",
		strings.ToUpper(s),
		"{" + s + "}",
		"urn:uuid:" + s,
		strings.ReplaceAll(s, "-", ""),
		" " + s,
		s + " ",
		s[:35],
		s + "0",
	} {
		got, err := lease.ParseToken(bad)
		var ve *lease.ValidationError
		require.ErrorAs(t, err, &ve, "%q", bad)
		assert.Equal(t, "token", ve.Field)
		assert.ErrorIs(t, err, lease.ErrInvalid)
		assert.True(t, got.IsZero(), "%q", bad)
		if bad != "" {
			assert.NotContains(t, err.Error(), bad, "the rejected input is not echoed")
		}
		assert.NotContains(t, err.Error(), s[:8])
	}
}

// ---- Table ---------------------------------------------------------------

var tableTestCols = lease.Columns{Key: "k", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation"}

func TestNewTable(t *testing.T) {
	long := strings.Repeat("a", 64)
	maxName := strings.Repeat("a", 63)
	badNames := []string{"", "1a", "a b", "a;b", `a"b`, "a`b", "a.b.c", long, "a." + long, long + ".a", ".a", "a.", "a-b", "a'b", "é", "a\x00"}
	for _, name := range badNames {
		_, err := lease.NewTable(name, tableTestCols)
		var ve *lease.ValidationError
		require.ErrorAs(t, err, &ve, "%q", name)
		assert.Equal(t, "table name", ve.Field, "%q", name)
		assert.ErrorIs(t, err, lease.ErrInvalid)
	}
	for _, name := range []string{"lease_item", "schema.table", "_x", "A1", maxName, maxName + "." + maxName} {
		tbl, err := lease.NewTable(name, tableTestCols)
		require.NoError(t, err, "%q", name)
		assert.Equal(t, name, tbl.Name())
		assert.Equal(t, tableTestCols, tbl.Columns())
	}

	withCol := func(f func(*lease.Columns)) lease.Columns {
		c := tableTestCols
		f(&c)
		return c
	}
	badCols := map[string]struct {
		cols  lease.Columns
		field string
	}{
		"missing Key":          {withCol(func(c *lease.Columns) { c.Key = "" }), "column Key"},
		"missing Holder":       {withCol(func(c *lease.Columns) { c.Holder = "" }), "column Holder"},
		"missing Token":        {withCol(func(c *lease.Columns) { c.Token = "" }), "column Token"},
		"missing ExpiresAt":    {withCol(func(c *lease.Columns) { c.ExpiresAt = "" }), "column ExpiresAt"},
		"missing Generation":   {withCol(func(c *lease.Columns) { c.Generation = "" }), "column Generation"},
		"bad Key":              {withCol(func(c *lease.Columns) { c.Key = "a b" }), "column Key"},
		"qualified Holder":     {withCol(func(c *lease.Columns) { c.Holder = "t.holder" }), "column Holder"},
		"injected Token":       {withCol(func(c *lease.Columns) { c.Token = "token; DROP TABLE x" }), "column Token"},
		"quoted ExpiresAt":     {withCol(func(c *lease.Columns) { c.ExpiresAt = "`e`" }), "column ExpiresAt"},
		"long Generation":      {withCol(func(c *lease.Columns) { c.Generation = long }), "column Generation"},
		"bad State":            {withCol(func(c *lease.Columns) { c.State = "1state" }), "column State"},
		"bad UpdatedAt":        {withCol(func(c *lease.Columns) { c.UpdatedAt = `u"` }), "column UpdatedAt"},
		"duplicate":            {withCol(func(c *lease.Columns) { c.Holder = "token" }), "column Token"},
		"duplicate other case": {withCol(func(c *lease.Columns) { c.Token = "HOLDER" }), "column Token"},
		"duplicate State":      {withCol(func(c *lease.Columns) { c.State = "Expires_At" }), "column State"},
		"duplicate UpdatedAt":  {withCol(func(c *lease.Columns) { c.UpdatedAt = "K" }), "column UpdatedAt"},
	}
	for name, c := range badCols {
		_, err := lease.NewTable("t", c.cols)
		var ve *lease.ValidationError
		require.ErrorAs(t, err, &ve, name)
		assert.Equal(t, c.field, ve.Field, name)
		assert.ErrorIs(t, err, lease.ErrInvalid, name)
	}
	_, err := lease.NewTable("t", withCol(func(c *lease.Columns) { c.State = "state"; c.UpdatedAt = "updated_at" }))
	require.NoError(t, err, "optional columns")

	assert.Panics(t, func() { lease.MustTable("a b", tableTestCols) })
	assert.NotPanics(t, func() { lease.MustTable("s.t", tableTestCols) })
}

// ---- Dialect -------------------------------------------------------------

func TestParseDialect(t *testing.T) {
	cases := map[string]lease.Dialect{
		"mysql": lease.MySQL, "MySQL": lease.MySQL, "mariadb": lease.MySQL,
		"postgres": lease.Postgres, "postgresql": lease.Postgres, "pgx": lease.Postgres, "pgx/v5": lease.Postgres, " PGX ": lease.Postgres,
		"sqlite": lease.SQLite, "sqlite3": lease.SQLite, "SQLite": lease.SQLite,
	}
	for name, want := range cases {
		got, err := lease.ParseDialect(name)
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}
	for _, name := range []string{"", "oracle", "pq", "mysql8", "sqlite4"} {
		_, err := lease.ParseDialect(name)
		var ve *lease.ValidationError
		assert.ErrorAs(t, err, &ve, name)
		assert.ErrorIs(t, err, lease.ErrInvalid, name)
	}
	assert.Equal(t, "mysql", lease.MySQL.String())
	assert.Equal(t, "postgres", lease.Postgres.String())
	assert.Equal(t, "sqlite", lease.SQLite.String())
	assert.Equal(t, "Dialect(0)", lease.Dialect(0).String())
	assert.Equal(t, "Dialect(7)", lease.Dialect(7).String())
	for _, d := range mockDialects {
		back, err := lease.ParseDialect(d.String())
		require.NoError(t, err)
		assert.Equal(t, d, back)
	}
}

func TestDetectDialect(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.db")
	lite, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer lite.Close()
	litex, err := sqlx.Open("sqlite", path)
	require.NoError(t, err)
	defer litex.Close()
	// Neither of these connects: sql.Open only records the DSN.
	my, err := sql.Open("mysql", "u:p@tcp(127.0.0.1:1)/db")
	require.NoError(t, err)
	defer my.Close()
	pg, err := sql.Open("pgx", "postgres://u:p@127.0.0.1:1/db")
	require.NoError(t, err)
	defer pg.Close()
	myx := sqlx.NewDb(my, "mysql")
	pgxx := sqlx.NewDb(pg, "pgx")

	for name, c := range map[string]struct {
		db   any
		want lease.Dialect
	}{
		"sqlite *sql.DB":  {lite, lease.SQLite},
		"sqlite *sqlx.DB": {litex, lease.SQLite},
		"mysql *sql.DB":   {my, lease.MySQL},
		"mysql *sqlx.DB":  {myx, lease.MySQL},
		"pgx *sql.DB":     {pg, lease.Postgres},
		"pgx *sqlx.DB":    {pgxx, lease.Postgres},
	} {
		got, err := lease.DetectDialect(c.db)
		require.NoError(t, err, name)
		assert.Equal(t, c.want, got, name)
	}

	// *sqlx.Tx knows its driver name too.
	tx, err := litex.Beginx()
	require.NoError(t, err)
	got, err := lease.DetectDialect(tx)
	require.NoError(t, err)
	assert.Equal(t, lease.SQLite, got)
	require.NoError(t, tx.Rollback())

	mockDB, _, err := sqlmock.New()
	require.NoError(t, err)
	defer mockDB.Close()
	var nilDB *sql.DB
	for name, db := range map[string]any{
		"unknown driver": mockDB,
		"nil":            nil,
		"typed nil":      nilDB,
		"not a db":       "mysql",
		"unknown sqlx":   sqlx.NewDb(mockDB, "oracle"),
		"*sql.Tx has no driver name": func() any {
			tx, err := lite.Begin()
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback() })
			return tx
		}(),
	} {
		_, err := lease.DetectDialect(db)
		var ve *lease.ValidationError
		assert.ErrorAs(t, err, &ve, name)
		assert.ErrorIs(t, err, lease.ErrInvalid, name)
	}
}

// ---- New and options -----------------------------------------------------

func TestNewValidation(t *testing.T) {
	tbl := lease.MustTable("t", tableTestCols)
	for name, c := range map[string]struct {
		d     lease.Dialect
		tbl   lease.Table
		opts  lease.Options
		field string
	}{
		"zero dialect":        {0, tbl, lease.Options{}, "dialect"},
		"unknown dialect":     {lease.Dialect(4), tbl, lease.Options{}, "dialect"},
		"negative dialect":    {lease.Dialect(-1), tbl, lease.Options{}, "dialect"},
		"zero table":          {lease.SQLite, lease.Table{}, lease.Options{}, "table"},
		"negative margin":     {lease.SQLite, tbl, lease.Options{SafetyMargin: -time.Nanosecond}, "safety margin"},
		"margin at MaxTTL":    {lease.SQLite, tbl, lease.Options{SafetyMargin: lease.MaxTTL}, "safety margin"},
		"margin above MaxTTL": {lease.Postgres, tbl, lease.Options{SafetyMargin: 2 * lease.MaxTTL}, "safety margin"},
		"resolution 2s":       {lease.MySQL, tbl, lease.Options{ExpiryResolution: 2 * time.Second}, "expiry resolution"},
		"resolution 3ms":      {lease.MySQL, tbl, lease.Options{ExpiryResolution: 3 * time.Millisecond}, "expiry resolution"},
		"resolution 1ns":      {lease.Postgres, tbl, lease.Options{ExpiryResolution: time.Nanosecond}, "expiry resolution"},
		"resolution negative": {lease.MySQL, tbl, lease.Options{ExpiryResolution: -time.Second}, "expiry resolution"},
	} {
		l, err := lease.New[string](c.d, c.tbl, c.opts)
		assert.Nil(t, l, name)
		var ve *lease.ValidationError
		require.ErrorAs(t, err, &ve, name)
		assert.Equal(t, c.field, ve.Field, name)
		assert.ErrorIs(t, err, lease.ErrInvalid, name)
	}
	for _, d := range mockDialects {
		l, err := lease.New[int64](d, tbl, lease.Options{SafetyMargin: time.Second})
		require.NoError(t, err)
		assert.Equal(t, d, l.Dialect())
		assert.Equal(t, tbl, l.Table())
	}
	// Resolution: the database clock's step, or a coarser declared column.
	for _, c := range []struct {
		d        lease.Dialect
		declared time.Duration
		want     time.Duration
	}{
		{lease.MySQL, 0, time.Microsecond},
		{lease.Postgres, 0, time.Microsecond},
		{lease.SQLite, 0, time.Millisecond},
		{lease.MySQL, time.Second, time.Second},
		{lease.Postgres, 10 * time.Millisecond, 10 * time.Millisecond},
		{lease.SQLite, 10 * time.Microsecond, time.Millisecond},
		{lease.MySQL, time.Microsecond, time.Microsecond},
	} {
		l, err := lease.New[string](c.d, tbl, lease.Options{ExpiryResolution: c.declared})
		require.NoError(t, err)
		assert.Equal(t, c.want, l.Resolution(), "%s, declared %s", c.d, c.declared)
	}
}

// TestSafetyMargin: a TTL not above the margin is rejected before any SQL
// is sent, on every operation that takes a TTL.
func TestSafetyMargin(t *testing.T) {
	ctx := context.Background()
	db, _ := newMock(t) // no expectations: any statement fails the test
	l, err := lease.New[string](lease.SQLite, mockTable, lease.Options{SafetyMargin: 2 * time.Second})
	require.NoError(t, err)
	g := mockGrant(t)
	for _, ttl := range []time.Duration{time.Millisecond, time.Second, 2 * time.Second} {
		errs := []error{}
		_, err := l.Acquire(ctx, db, "k", "a", ttl)
		errs = append(errs, err)
		_, err = l.Renew(ctx, db, g, ttl)
		errs = append(errs, err)
		_, err = l.Create(ctx, db, "k", "a", ttl, lease.CreateOptions{})
		errs = append(errs, err)
		_, err = l.Transition(ctx, db, g, lease.ChangeOptions{Keep: true, TTL: ttl})
		errs = append(errs, err)
		for i, err := range errs {
			var ve *lease.ValidationError
			require.ErrorAs(t, err, &ve, "ttl %s, call %d", ttl, i)
			assert.Equal(t, "ttl", ve.Field)
			assert.Contains(t, err.Error(), "2s")
		}
	}

	// The clock's resolution counts too: on SQLite (1ms) a TTL of the
	// margin + 1ms is refused, and just above it passes validation (and
	// reaches the database).
	require.Equal(t, time.Millisecond, l.Resolution())
	_, err = l.Acquire(ctx, db, "k", "a", 2*time.Second+time.Millisecond)
	assert.ErrorIs(t, err, lease.ErrInvalid)
	db2, mock, err := sqlmock.New() // regexp matching: any UPDATE
	require.NoError(t, err)
	defer db2.Close()
	mock.ExpectQuery(`^UPDATE `).WillReturnError(errors.New("reached the database"))
	_, err = l.Acquire(ctx, db2, "k", "a", 2*time.Second+time.Millisecond+time.Microsecond)
	assert.EqualError(t, err, "reached the database")

	// The default margin is TTL/10: every legal TTL is above it.
	def, err := lease.New[string](lease.SQLite, mockTable, lease.Options{})
	require.NoError(t, err)
	for _, ttl := range []time.Duration{lease.MinTTL - time.Nanosecond, 0, -time.Second, lease.MaxTTL + time.Nanosecond} {
		_, err := def.Acquire(ctx, db, "k", "a", ttl)
		assert.ErrorIs(t, err, lease.ErrInvalid, "ttl %s", ttl)
	}
}

// stepClock hands out base, base+1h, base+2h, … and records, for each
// reading, how many statements had been sent at that moment.
type stepClock struct {
	mu      sync.Mutex
	base    time.Time
	calls   int
	counter *countdb.Counter
	sentAt  []int64
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.base.Add(time.Duration(c.calls) * time.Hour)
	c.calls++
	c.sentAt = append(c.sentAt, c.counter.Count())
	return t
}

// last returns the time of the latest reading and the statement count
// then.
func (c *stepClock) last() (time.Time, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Add(time.Duration(c.calls-1) * time.Hour), c.sentAt[len(c.sentAt)-1]
}

// TestDeadline: Grant.Deadline is the local clock reading taken before the
// statement was sent, + TTL − margin − resolution (SQLite's clock: 1ms),
// exactly; one reading per operation.
func TestDeadline(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		margin time.Duration
		// marginFor gives the margin applied to a TTL.
		marginFor func(time.Duration) time.Duration
	}{
		{"default margin", 0, func(ttl time.Duration) time.Duration { return ttl / 10 }},
		{"explicit margin", 1500 * time.Millisecond, func(time.Duration) time.Duration { return 1500 * time.Millisecond }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var counter countdb.Counter
			clock := &stepClock{base: time.Date(2030, 5, 6, 7, 8, 9, 123456789, time.UTC), counter: &counter}
			e := conformance.Setup(t, testdb.Open(t, lease.SQLite), lease.Options{SafetyMargin: c.margin, Clock: clock})
			db := counter.Wrap(e.DB)
			require.NoError(t, e.Lease.Ensure(ctx, db, "k", lease.CreateOptions{}))

			check := func(op string, g lease.Grant[string], ttl time.Duration) {
				t.Helper()
				sent, count := clock.last()
				assert.Equal(t, counter.Count()-1, count, "%s: the clock is read before the statement is sent", op)
				assert.Equal(t, sent.Add(ttl-c.marginFor(ttl)-time.Millisecond), g.Deadline, op)
				assert.Equal(t, ttl, g.TTL, op)
				assert.True(t, g.Trusted(g.Deadline.Add(-time.Nanosecond)), op)
				assert.False(t, g.Trusted(g.Deadline), op)
			}

			g, err := e.Lease.Acquire(ctx, db, "k", "alice", 10*time.Second)
			require.NoError(t, err)
			check("acquire", g, 10*time.Second)
			assert.Equal(t, 1, clock.calls)

			g, err = e.Lease.Renew(ctx, db, g, 4*time.Second)
			require.NoError(t, err)
			check("renew", g, 4*time.Second)
			assert.Equal(t, 2, clock.calls)

			g, err = e.Lease.AcquireWith(ctx, db, "k", "alice", 20*time.Second, lease.AcquireOptions{Token: g.Token})
			require.NoError(t, err)
			check("reentry", g, 20*time.Second)

			g, err = e.Lease.Transition(ctx, db, g, lease.ChangeOptions{Keep: true, TTL: 3 * time.Second, To: "processing"})
			require.NoError(t, err)
			check("transition keep", g, 3*time.Second)

			gc, err := e.Lease.Create(ctx, db, "c", "carol", 6*time.Second, lease.CreateOptions{})
			require.NoError(t, err)
			check("create", gc, 6*time.Second)

			// Released: the deadline is the send time (no longer trusted).
			calls := clock.calls
			g2, err := e.Lease.Transition(ctx, db, g, lease.ChangeOptions{To: "done"})
			require.NoError(t, err)
			sent, _ := clock.last()
			assert.Equal(t, calls+1, clock.calls)
			assert.Equal(t, sent, g2.Deadline)
			assert.False(t, g2.Trusted(sent))

			// Operations that grant nothing do not read the clock.
			calls = clock.calls
			_, _ = e.Lease.Verify(ctx, db, gc, false)
			_, _ = e.Lease.Inspect(ctx, db, "c")
			require.NoError(t, e.Lease.Release(ctx, db, gc))
			assert.Equal(t, calls, clock.calls)

			// A failed renew (the row was released above) reads the clock but
			// hands back the grant, deadline included, as it was.
			g3, err := e.Lease.Renew(ctx, db, g, 5*time.Second)
			require.ErrorIs(t, err, lease.ErrLost)
			assert.Equal(t, g, g3)
		})
	}
}

// ---- Errors --------------------------------------------------------------

func TestErrorMessagesAndIs(t *testing.T) {
	sentinels := []error{lease.ErrHeld, lease.ErrLost, lease.ErrNotFound, lease.ErrExists, lease.ErrState, lease.ErrInvalid}
	driverErr := &mysql.MySQLError{Number: 1062, Message: "Duplicate entry 'k' for key 'PRIMARY'"}
	cases := []struct {
		err  error
		is   error
		text string
	}{
		{&lease.ConflictError{Key: "k", Holder: "alice", Generation: 3, Remaining: 1500*time.Millisecond + 400*time.Microsecond},
			lease.ErrHeld, `lease: held by another holder (key "k", holder "alice", generation 3, 1.5s left)`},
		{&lease.ConflictError{Key: "k"}, lease.ErrHeld, `lease: held by another holder (key "k", holder "", generation 0, 0s left)`},
		{&lease.LostError{Key: "k", Op: "renew"}, lease.ErrLost,
			`lease: lost (key "k", renew: token no longer matches: taken over, released or in another state)`},
		{&lease.StateError{Key: "k", State: "success", Want: []string{"queued", "error"}}, lease.ErrState,
			`lease: row in another state (key "k", state "success", want one of ["queued" "error"])`},
		{&lease.ValidationError{Field: "ttl", Reason: "must be positive"}, lease.ErrInvalid, `lease: invalid ttl: must be positive`},
		{&lease.ValidationError{Package: "request", Field: "session key", Reason: "empty"}, lease.ErrInvalid, `request: invalid session key: empty`},
		{&lease.DuplicateKeyError{Key: "k", Err: driverErr}, lease.ErrExists,
			`lease: already exists (key "k"): Error 1062: Duplicate entry 'k' for key 'PRIMARY'`},
	}
	for _, c := range cases {
		assert.Equal(t, c.text, c.err.Error())
		for _, wrapped := range []error{c.err, fmt.Errorf("op: %w", c.err), errors.Join(errors.New("x"), c.err)} {
			for _, s := range sentinels {
				assert.Equal(t, s == c.is, errors.Is(wrapped, s), "%v is %v", wrapped, s)
			}
		}
	}
	// Concrete types are reachable through wrapping.
	var ce *lease.ConflictError
	require.ErrorAs(t, fmt.Errorf("w: %w", &lease.ConflictError{Key: "k", Holder: "h"}), &ce)
	assert.Equal(t, "h", ce.Holder)
	var de *lease.DuplicateKeyError
	err := fmt.Errorf("w: %w", &lease.DuplicateKeyError{Key: "k", Err: driverErr})
	require.ErrorAs(t, err, &de)
	var my *mysql.MySQLError
	require.ErrorAs(t, err, &my, "unwraps to the driver error")
	assert.Equal(t, uint16(1062), my.Number)

	// Sentinel texts.
	assert.Equal(t, "lease: held by another holder", lease.ErrHeld.Error())
	assert.Equal(t, "lease: lost", lease.ErrLost.Error())
	assert.Equal(t, "lease: not found", lease.ErrNotFound.Error())
	assert.Equal(t, "lease: already exists", lease.ErrExists.Error())
	assert.Equal(t, "lease: row in another state", lease.ErrState.Error())
	assert.Equal(t, "lease: invalid input", lease.ErrInvalid.Error())

	// IsDuplicateKey.
	assert.False(t, lease.IsDuplicateKey(nil))
	assert.False(t, lease.IsDuplicateKey(errors.New("duplicate key")), "text is not enough")
	assert.True(t, lease.IsDuplicateKey(lease.ErrExists))
	assert.True(t, lease.IsDuplicateKey(fmt.Errorf("x: %w", driverErr)))
	assert.False(t, lease.IsDuplicateKey(&mysql.MySQLError{Number: 1452}))
	assert.True(t, lease.IsDuplicateKey(&fakePgError{"23505"}))
	assert.False(t, lease.IsDuplicateKey(&fakePgError{"40001"}))
	assert.True(t, lease.IsDuplicateKey(&fakeSQLiteError{2067}))
	assert.True(t, lease.IsDuplicateKey(&fakeSQLiteError{1555}))
	assert.False(t, lease.IsDuplicateKey(&fakeSQLiteError{19}), "a plain SQLITE_CONSTRAINT is not a duplicate")
	assert.False(t, lease.IsDuplicateKey(&lease.ConflictError{}))
}

type sqlStateErr string

func (e sqlStateErr) Error() string    { return "pg error " + string(e) }
func (e sqlStateErr) SQLState() string { return string(e) }

func TestIsRetryable(t *testing.T) {
	cases := map[string]struct {
		err  error
		want bool
	}{
		"nil":                 {nil, false},
		"mysql deadlock":      {&mysql.MySQLError{Number: 1213}, true},
		"wrapped deadlock":    {fmt.Errorf("x: %w", &mysql.MySQLError{Number: 1213}), true},
		"mysql duplicate":     {&mysql.MySQLError{Number: 1062}, false},
		"pg serialization":    {sqlStateErr("40001"), true},
		"pg deadlock":         {sqlStateErr("40P01"), true},
		"pg unique violation": {sqlStateErr("23505"), false},
		"plain":               {errors.New("boom"), false},
	}
	for name, c := range cases {
		assert.Equal(t, c.want, lease.IsRetryable(c.err), name)
	}
}

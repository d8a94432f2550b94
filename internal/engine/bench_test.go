package engine_test

// Benchmarks of the lease operations on every dialect, against the
// hand-written two-UPDATE compare-and-swap pair an application would write
// itself. Run them with
//
//	go test -run '^$' -bench . -benchmem ./lease/
//
// (MySQL and PostgreSQL run when ROWLEASE_MYSQL_DSN / ROWLEASE_POSTGRES_DSN
// are set; `make bench` starts throwaway servers.) Every benchmark reports
// stmts/op, the statements executed per iteration, counted at the driver
// (countdb), and prepares/op. BenchmarkAcquireRelease runs
// <dialect>/handwritten, <dialect>/handwritten_prepared, <dialect>/library,
// <dialect>/library_text and <dialect>/interleaved; the last reports
// x-handwritten, the library pair's time over the hand-written pair's
// (1.00 = same speed), measured in the same loop.

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

const (
	benchHolder = "bench-holder"
	benchTTL    = time.Minute
)

// benchEach runs fn as a sub-benchmark per dialect, each run on a fresh
// database holding the conformance item table, counted at the driver.
func benchEach(b *testing.B, fn func(b *testing.B, e conformance.Env, c *countdb.Counter)) {
	b.Helper()
	for _, d := range testdb.Dialects() {
		b.Run(d.String(), func(b *testing.B) {
			e, c := benchEnv(b, d, engine.Options{})
			fn(b, e, c)
		})
	}
}

// benchEnv opens a fresh counted database of dialect d with the item table.
// The Lease's one-time first-use check of the database runs here, before
// any counted section.
func benchEnv(b *testing.B, d engine.Dialect, opts engine.Options) (conformance.Env, *countdb.Counter) {
	c := &countdb.Counter{}
	db := openCounted(b, d, c)
	e := conformance.Setup(b, db, opts)
	if err := engine.Check(context.Background(), e.Lease, db); err != nil {
		b.Fatal(err)
	}
	return e, c
}

// benchKeys returns n distinct keys.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	return keys
}

// insertFree inserts a free row for each key, in multi-row INSERTs inside
// one transaction, so the setup of a large b.N stays fast.
func insertFree(b *testing.B, db *sqlx.DB, keys []string) {
	b.Helper()
	const batch = 500
	ctx := context.Background()
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for len(keys) > 0 {
		n := min(batch, len(keys))
		q := "INSERT INTO " + conformance.ItemTable + " (item_key, generation) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, 0), ", n), ", ")
		args := make([]any, n)
		for i, k := range keys[:n] {
			args[i] = k
		}
		if _, err := tx.ExecContext(ctx, db.Rebind(q), args...); err != nil {
			b.Fatalf("insert free rows: %v", err)
		}
		keys = keys[n:]
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// reportStmts reports the statements executed and prepared per iteration.
func reportStmts(b *testing.B, c *countdb.Counter) {
	st := c.Stats()
	b.ReportMetric(float64(st.Statements)/float64(b.N), "stmts/op")
	b.ReportMetric(float64(st.Prepares)/float64(b.N), "prepares/op")
}

// BenchmarkAcquire acquires a free row per iteration: b.N distinct free rows
// are inserted before the timer starts.
func BenchmarkAcquire(b *testing.B) {
	benchEach(b, func(b *testing.B, e conformance.Env, c *countdb.Counter) {
		ctx := context.Background()
		keys := benchKeys(b.N)
		insertFree(b, e.DB, keys)
		db := e.DB
		c.Reset()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := e.Lease.Acquire(ctx, db, keys[i], benchHolder, benchTTL); err != nil {
				b.Fatalf("acquire %s: %v", keys[i], err)
			}
		}
		b.StopTimer()
		reportStmts(b, c)
	})
}

// BenchmarkRenew renews one held lease b.N times.
func BenchmarkRenew(b *testing.B) {
	benchEach(b, func(b *testing.B, e conformance.Env, c *countdb.Counter) {
		ctx := context.Background()
		insertFree(b, e.DB, []string{"k"})
		g, err := e.Lease.Acquire(ctx, e.DB, "k", benchHolder, benchTTL)
		if err != nil {
			b.Fatal(err)
		}
		db := e.DB
		c.Reset()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if g, err = e.Lease.Renew(ctx, db, g, benchTTL); err != nil {
				b.Fatalf("renew: %v", err)
			}
		}
		b.StopTimer()
		reportStmts(b, c)
	})
}

// BenchmarkRelease releases a held row per iteration: b.N held rows are
// created (Create, in one transaction) before the timer starts.
func BenchmarkRelease(b *testing.B) {
	benchEach(b, func(b *testing.B, e conformance.Env, c *countdb.Counter) {
		ctx := context.Background()
		grants := make([]engine.Grant[string], b.N)
		tx, err := e.DB.BeginTxx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for i, k := range benchKeys(b.N) {
			if grants[i], err = e.Lease.Create(ctx, tx, k, benchHolder, benchTTL, engine.CreateOptions{}); err != nil {
				_ = tx.Rollback()
				b.Fatalf("create %s: %v", k, err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		db := e.DB
		c.Reset()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := e.Lease.Release(ctx, db, grants[i]); err != nil {
				b.Fatalf("release %s: %v", grants[i].Key, err)
			}
		}
		b.StopTimer()
		reportStmts(b, c)
	})
}

// BenchmarkAcquireRelease acquires and releases one row per iteration, side
// by side:
//
//   - <dialect>/handwritten: the hand-written pair an application would
//     write, sent as text (the same code as BenchmarkHandWrittenPair);
//   - <dialect>/handwritten_prepared: the same pair, prepared once;
//   - <dialect>/library: Lease.Acquire then Lease.Release with the default
//     options (statements prepared and kept on SQLite, text elsewhere);
//   - <dialect>/library_text: the same with PrepareNever;
//   - <dialect>/interleaved: one pair of each kind per iteration, in
//     rotating order, each timed separately. It reports x-handwritten
//     (library over handwritten; 1.10 = 10% slower), text-x-handwritten and
//     x-handwritten-prepared. Interleaving exposes all of them to the same
//     load, so the ratios hold on a busy machine where separate runs drift.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, d := range testdb.Dialects() {
		b.Run(d.String(), func(b *testing.B) {
			b.Run("handwritten", func(b *testing.B) {
				e, c := benchEnv(b, d, engine.Options{})
				benchHandWritten(b, e, c, false)
			})
			b.Run("handwritten_prepared", func(b *testing.B) {
				e, c := benchEnv(b, d, engine.Options{})
				benchHandWritten(b, e, c, true)
			})
			b.Run("library", func(b *testing.B) {
				e, c := benchEnv(b, d, engine.Options{})
				benchLibraryPair(b, e, c)
			})
			b.Run("library_text", func(b *testing.B) {
				e, c := benchEnv(b, d, engine.Options{Prepare: engine.PrepareNever})
				benchLibraryPair(b, e, c)
			})
			b.Run("interleaved", func(b *testing.B) {
				e, _ := benchEnv(b, d, engine.Options{})
				benchInterleaved(b, e)
			})
		})
	}
}

// BenchmarkHandWrittenPair is the hand-written acquire/release pair alone.
func BenchmarkHandWrittenPair(b *testing.B) {
	benchEach(b, func(b *testing.B, e conformance.Env, c *countdb.Counter) { benchHandWritten(b, e, c, false) })
}

func benchLibraryPair(b *testing.B, e conformance.Env, c *countdb.Counter) {
	insertFree(b, e.DB, []string{"k"})
	c.Reset()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		libraryPair(b, e.Lease, e.DB)
	}
	b.StopTimer()
	reportStmts(b, c)
}

// libraryPair acquires and releases row "k" with the library.
func libraryPair(b *testing.B, l *engine.Lease[string], db engine.DB) {
	ctx := context.Background()
	g, err := l.Acquire(ctx, db, "k", benchHolder, benchTTL)
	if err != nil {
		b.Fatalf("acquire: %v", err)
	}
	if err := l.Release(ctx, db, g); err != nil {
		b.Fatalf("release: %v", err)
	}
}

// handWritten is the compare-and-swap pair an application would write by
// hand for the item table: take the row when it is free or expired (by the
// database clock), then give it back if the token still matches.
type handWritten struct{ acquire, release string }

var handWrittenSQL = map[engine.Dialect]handWritten{
	engine.MySQL: {
		acquire: "UPDATE lease_item SET holder = ?, token = ?, " +
			"expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, generation = generation + 1 " +
			"WHERE item_key = ? AND (token IS NULL OR expires_at <= UTC_TIMESTAMP(6))",
		release: "UPDATE lease_item SET holder = NULL, token = NULL, expires_at = NULL " +
			"WHERE item_key = ? AND token = ?",
	},
	engine.Postgres: {
		acquire: "UPDATE lease_item SET holder = $1, token = $2, " +
			"expires_at = statement_timestamp() + $3 * interval '1 microsecond', generation = generation + 1 " +
			"WHERE item_key = $4 AND (token IS NULL OR expires_at <= statement_timestamp())",
		release: "UPDATE lease_item SET holder = NULL, token = NULL, expires_at = NULL " +
			"WHERE item_key = $1 AND token = $2",
	},
	engine.SQLite: {
		acquire: "UPDATE lease_item SET holder = ?, token = ?, " +
			"expires_at = (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000) + ?, " +
			"generation = generation + 1 " +
			"WHERE item_key = ? AND (token IS NULL OR " +
			"expires_at <= (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000))",
		release: "UPDATE lease_item SET holder = NULL, token = NULL, expires_at = NULL " +
			"WHERE item_key = ? AND token = ?",
	},
}

func benchHandWritten(b *testing.B, e conformance.Env, c *countdb.Counter, prepared bool) {
	insertFree(b, e.DB, []string{"k"})
	var db engine.DB = e.DB
	if prepared {
		db = newStmtCache(b, e.DB)
	}
	c.Reset()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		handWrittenPair(b, e.Dialect, db)
	}
	b.StopTimer()
	reportStmts(b, c)
}

// handWrittenPair acquires and releases row "k" with the hand-written pair,
// with a fresh random token as an application would draw.
func handWrittenPair(b *testing.B, d engine.Dialect, db engine.DB) {
	ctx := context.Background()
	q := handWrittenSQL[d]
	tok := uuid.NewString()
	res, err := db.ExecContext(ctx, q.acquire, benchHolder, tok, benchTTL.Microseconds(), "k")
	if err != nil {
		b.Fatalf("acquire: %v", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		b.Fatalf("acquire: %d rows affected, %v", n, err)
	}
	if res, err = db.ExecContext(ctx, q.release, "k", tok); err != nil {
		b.Fatalf("release: %v", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		b.Fatalf("release: %d rows affected, %v", n, err)
	}
}

// benchInterleaved runs, per iteration and in rotating order, the
// hand-written pair as text and prepared, and the library pair with
// default options and with PrepareNever, on the same row, timing each.
func benchInterleaved(b *testing.B, e conformance.Env) {
	insertFree(b, e.DB, []string{"k"})
	cache := newStmtCache(b, e.DB)
	text, err := engine.New[string](e.Dialect, engine.TableOf(e.Lease), engine.Options{Prepare: engine.PrepareNever})
	if err != nil {
		b.Fatal(err)
	}
	pairs := [4]func(){
		func() { handWrittenPair(b, e.Dialect, e.DB) },
		func() { handWrittenPair(b, e.Dialect, cache) },
		func() { libraryPair(b, e.Lease, e.DB) },
		func() { libraryPair(b, text, e.DB) },
	}
	var took [4]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range pairs {
			k := (i + j) % len(pairs)
			t0 := time.Now()
			pairs[k]()
			took[k] += time.Since(t0)
		}
	}
	b.StopTimer()
	hand, handPrep, lib, libText := took[0], took[1], took[2], took[3]
	b.ReportMetric(float64(hand.Nanoseconds())/float64(b.N), "handwritten-ns/op")
	b.ReportMetric(float64(lib.Nanoseconds())/float64(b.N), "library-ns/op")
	b.ReportMetric(float64(lib)/float64(hand), "x-handwritten")
	b.ReportMetric(float64(libText)/float64(hand), "text-x-handwritten")
	b.ReportMetric(float64(lib)/float64(handPrep), "x-handwritten-prepared")
}

// stmtCache is a engine.DB that prepares each distinct statement once and
// runs it as a *sql.Stmt: what a hand-written pair looks like when its
// author also prepares it.
type stmtCache struct {
	db *sqlx.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmtCache(b *testing.B, db *sqlx.DB) *stmtCache {
	c := &stmtCache{db: db, m: map[string]*sql.Stmt{}}
	b.Cleanup(func() { // runs before testdb closes db
		for _, st := range c.m {
			st.Close()
		}
	})
	return c
}

func (c *stmtCache) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[q]; ok {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	c.m[q] = st
	return st, nil
}

func (c *stmtCache) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := c.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (c *stmtCache) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := c.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (c *stmtCache) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := c.stmt(ctx, q)
	if err != nil {
		return c.db.QueryRowContext(ctx, q, args...) // reports the same error
	}
	return st.QueryRowContext(ctx, args...)
}

package engine_test

// BenchmarkPgxPool measures the lock path on PostgreSQL through the
// handles a pgx user has, at 1 and 16 goroutines:
//
//   - pool_adapter: a lease's Acquire and Release (lease.New, default
//     options) on the *sql.DB that stdlib.OpenDBFromPool makes of a
//     *pgxpool.Pool, which takes a connection from the pool for every
//     statement and gives it back after;
//   - pgx_dsn: the same on sql.Open("pgx", dsn);
//   - native_pgxpool: the two statements the lease sends (their text and
//     arguments recorded from the lease itself), sent through the pool
//     with QueryRow / Exec: what a driver on pgx's own API, without
//     database/sql, would cost at best.
//
// Every goroutine works on a lease (a row) of its own; ns/op is wall time
// over the pairs done by all goroutines (the inverse of the throughput).
// Both pools allow testdb.PoolMaxConns connections and keep as many idle,
// so neither dials during the run. Run it with
//
//	go test -run '^$' -bench BenchmarkPgxPool -benchmem -count 5 ./internal/engine/
//
// (ROWLEASE_POSTGRES_DSN set; `make bench` starts a throwaway server.)

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/proccpu"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

func BenchmarkPgxPool(b *testing.B) {
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			b.Run("pool_adapter", func(b *testing.B) { parallelPairs(b, g, adapterPair(b, g)) })
			b.Run("pgx_dsn", func(b *testing.B) { parallelPairs(b, g, dsnPair(b, g)) })
			b.Run("native_pgxpool", func(b *testing.B) { parallelPairs(b, g, nativePoolPair(b, g)) })
			b.Run("interleaved", func(b *testing.B) {
				interleavedPairs(b, g, [3]pairFunc{adapterPair(b, g), dsnPair(b, g), nativePoolPair(b, g)})
			})
		})
	}
}

// pairFunc acquires and releases the lease of key once.
type pairFunc func(ctx context.Context, key string) error

// adapterPair is the lease's pair on the *sql.DB of stdlib.OpenDBFromPool,
// on a fresh schema with n free rows.
func adapterPair(b *testing.B, n int) pairFunc {
	db, _ := testdb.OpenPgxPool(b)
	l := pgxBenchLease(b, db.DB, n)
	return func(ctx context.Context, key string) error { return leasePair(ctx, l, db.DB, key) }
}

// dsnPair is the lease's pair on sql.Open("pgx", dsn), on a fresh schema
// with n free rows.
func dsnPair(b *testing.B, n int) pairFunc {
	db := testdb.Open(b, engine.Postgres)
	db.SetMaxIdleConns(testdb.PoolMaxConns) // database/sql keeps 2 by default
	l := pgxBenchLease(b, db.DB, n)
	return func(ctx context.Context, key string) error { return leasePair(ctx, l, db.DB, key) }
}

// nativePoolPair is the lease's two statements sent on a pgxpool.Pool
// (nativePair), on a fresh schema with n free rows.
func nativePoolPair(b *testing.B, n int) pairFunc {
	db, pool := testdb.OpenPgxPool(b)
	return nativePair(b, pgxBenchLease(b, db.DB, n), db.DB, pool)
}

// interleavedPairs runs b.N pairs of each of the three ways (pool
// adapter, plain DSN, native pool), g goroutines
// at a time, in phases of pgxPhase pairs that rotate over the ways, and
// reports each way's wall time per pair and their ratios: every way sees
// the same load, so the ratios hold on a busy machine where separate runs
// drift. Its ns/op is the three pairs together.
func interleavedPairs(b *testing.B, g int, ways [3]pairFunc) {
	b.Helper()
	for _, w := range ways {
		if err := runPairs(g, int64(10*g), w); err != nil {
			b.Fatal(err)
		}
	}
	var took [3]time.Duration
	b.ResetTimer()
	for round, done := 0, 0; done < b.N; round++ {
		n := min(pgxPhase, b.N-done)
		for j := range ways {
			k := (round + j) % len(ways)
			t0 := time.Now()
			if err := runPairs(g, int64(n), ways[k]); err != nil {
				b.Fatal(err)
			}
			took[k] += time.Since(t0)
		}
		done += n
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(took[0]), "adapter-ns/pair")
	b.ReportMetric(per(took[1]), "dsn-ns/pair")
	b.ReportMetric(per(took[2]), "native-ns/pair")
	b.ReportMetric(float64(took[0])/float64(took[1]), "adapter-x-dsn")
	b.ReportMetric(float64(took[2])/float64(took[1]), "native-x-dsn")
}

// pgxPhase is the number of pairs a way runs before the next way's turn.
const pgxPhase = 64

// pgxBenchLease creates the item table on db with n free rows (benchKeys)
// and returns a lease of it, built as a user builds one, and checked on
// db (the first-use check) before any timed section.
func pgxBenchLease(b *testing.B, db engine.TxBeginner, n int) *lease.Lease[string] {
	b.Helper()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, conformance.ItemDDL[engine.Postgres]); err != nil {
		b.Fatal(err)
	}
	l, err := lease.New[string](lease.Postgres, engine.MustTable(conformance.ItemTable, conformance.ItemColumns), lease.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range benchKeys(n) {
		if _, err := db.ExecContext(ctx, "INSERT INTO "+conformance.ItemTable+" (item_key, generation) VALUES ($1, 0)", k); err != nil {
			b.Fatal(err)
		}
	}
	if err := engine.Check(ctx, l, db); err != nil {
		b.Fatal(err)
	}
	return l
}

// leasePair acquires the lease of key and releases it.
func leasePair(ctx context.Context, l *lease.Lease[string], db engine.DB, key string) error {
	g, err := l.Acquire(ctx, db, key, benchHolder, benchTTL)
	if err != nil {
		return fmt.Errorf("acquire %s: %w", key, err)
	}
	if err := l.Release(ctx, db, g); err != nil {
		return fmt.Errorf("release %s: %w", key, err)
	}
	return nil
}

// parallelPairs runs pair b.N times in all, g goroutines at a time (see
// runPairs), after an untimed warm-up of ten pairs per goroutine (every
// connection the run will use has the statements in pgx's cache). It
// reports allocs/op and client-cpu-µs/op, the CPU time this process used
// per pair (user + system: what the way costs the client, whatever else
// runs on the machine); ns/op is the wall time over b.N.
func parallelPairs(b *testing.B, g int, pair pairFunc) {
	b.Helper()
	if err := runPairs(g, int64(10*g), pair); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := proccpu.Used()
	b.ResetTimer()
	err := runPairs(g, int64(b.N), pair)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64((proccpu.Used()-cpu0).Nanoseconds())/1e3/float64(b.N), "client-cpu-µs/op")
}

// runPairs runs pair n times in all, spread over g goroutines that each
// pass a key of their own (benchKeys(g)), and returns their errors.
func runPairs(g int, n int64, pair pairFunc) error {
	ctx := context.Background()
	keys := benchKeys(g)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, g)
	for w := range g {
		wg.Go(func() {
			for next.Add(1) <= n {
				if err := pair(ctx, keys[w]); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sent is one statement a lease sent: the DB method, the text, the arguments.
type sent struct {
	method string
	query  string
	args   []any
}

// recordingDB records what is sent through it to db. It is neither a
// pool nor a transaction to the lease: statements go through it as sent.
type recordingDB struct {
	db  engine.DB
	log []sent
}

func (r *recordingDB) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	r.log = append(r.log, sent{"exec", q, args})
	return r.db.ExecContext(ctx, q, args...)
}

func (r *recordingDB) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	r.log = append(r.log, sent{"query", q, args})
	return r.db.QueryContext(ctx, q, args...)
}

func (r *recordingDB) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	r.log = append(r.log, sent{"queryrow", q, args})
	return r.db.QueryRowContext(ctx, q, args...)
}

// nativePair records the statements of one Acquire and one Release of l
// on db and returns a pair that sends the same text with the same
// arguments through pool (a fresh token per pair, the goroutine's key,
// the generation the acquire handed back), checking each took effect.
func nativePair(b *testing.B, l *lease.Lease[string], db engine.DB, pool *pgxpool.Pool) pairFunc {
	b.Helper()
	ctx := context.Background()
	const key = "k0"
	rec := &recordingDB{db: db}
	if err := leasePair(ctx, l, rec, key); err != nil { // the first-use check of rec
		b.Fatal(err)
	}
	rec.log = nil
	g, err := l.Acquire(ctx, rec, key, benchHolder, benchTTL)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Release(ctx, rec, g); err != nil {
		b.Fatal(err)
	}
	if len(rec.log) != 2 || rec.log[0].method != "queryrow" {
		b.Fatalf("expected the acquire as one QueryRow and the release as one statement; recorded %+v", rec.log)
	}
	acq, rel := rec.log[0], rec.log[1]
	// at returns the index of the one argument of s equal to v.
	at := func(s sent, what string, v any) int {
		i := slices.Index(s.args, v)
		if i < 0 || slices.Index(s.args[i+1:], v) >= 0 {
			b.Fatalf("%s: not exactly one %s among the arguments of %s", s.query, what, s.query)
		}
		return i
	}
	aKey, aTok := at(acq, "key", key), at(acq, "token", engine.Secret(g.Token))
	rKey, rTok, rGen := at(rel, "key", key), at(rel, "token", engine.Secret(g.Token)), at(rel, "generation", g.Generation)

	return func(ctx context.Context, key string) error {
		tok, err := engine.NewToken()
		if err != nil {
			return err
		}
		args := slices.Clone(acq.args)
		args[aKey], args[aTok] = key, engine.Secret(tok)
		var gen int64
		if err := pool.QueryRow(ctx, acq.query, args...).Scan(&gen); err != nil {
			return fmt.Errorf("acquire %s: %w", key, err)
		}
		args = slices.Clone(rel.args)
		args[rKey], args[rTok], args[rGen] = key, engine.Secret(tok), gen
		if rel.method == "queryrow" {
			var back int64
			if err := pool.QueryRow(ctx, rel.query, args...).Scan(&back); err != nil {
				return fmt.Errorf("release %s: %w", key, err)
			}
			return nil
		}
		tag, err := pool.Exec(ctx, rel.query, args...)
		if err != nil {
			return fmt.Errorf("release %s: %w", key, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("release %s: %d rows", key, tag.RowsAffected())
		}
		return nil
	}
}

package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/lease"
)

// The lock implementations compared.
const (
	kindLibrary = "rowlease"
	kindPair    = "two-UPDATE pair"
	kindGetLock = "GET_LOCK"
	kindPgLock  = "pg_advisory_lock"
)

func kindsFor(d lease.Dialect) []string {
	switch d {
	case lease.MySQL:
		return []string{kindLibrary, kindPair, kindGetLock}
	case lease.Postgres:
		return []string{kindLibrary, kindPair, kindPgLock}
	}
	return []string{kindLibrary, kindPair}
}

// lockPoint is one measurement: workers goroutines, each acquiring and
// releasing its own lock in a loop.
type lockPoint struct {
	Dialect    string
	Kind       string
	Workers    int
	Pairs      int
	PerSec     float64
	P50Micros  int64
	P99Micros  int64
	ElapsedSec float64
}

// pairSQL is the compare-and-swap pair an application would write by
// hand (the same as lease/bench_test.go's): take the row when it is free
// or expired, give it back if the token still matches.
var pairSQL = map[lease.Dialect][2]string{
	lease.MySQL: {
		"UPDATE lease_item SET holder = ?, token = ?, expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, generation = generation + 1 " +
			"WHERE item_key = ? AND (token IS NULL OR expires_at <= UTC_TIMESTAMP(6))",
		"UPDATE lease_item SET holder = NULL, token = NULL, expires_at = NULL WHERE item_key = ? AND token = ?",
	},
	lease.Postgres: {
		"UPDATE lease_item SET holder = $1, token = $2, expires_at = statement_timestamp() + $3 * interval '1 microsecond', generation = generation + 1 " +
			"WHERE item_key = $4 AND (token IS NULL OR expires_at <= statement_timestamp())",
		"UPDATE lease_item SET holder = NULL, token = NULL, expires_at = NULL WHERE item_key = $1 AND token = $2",
	},
	lease.SQLite: {
		"UPDATE lease_item SET holder = ?, token = ?, expires_at = (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000) + ?, " +
			"generation = generation + 1 WHERE item_key = ? AND (token IS NULL OR " +
			"expires_at <= (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000))",
		"UPDATE lease_item SET holder = NULL, token = NULL, expires_at = NULL WHERE item_key = ? AND token = ?",
	},
}

func measureLocks(ctx context.Context, d lease.Dialect, kind string, workers int, dur time.Duration) (lockPoint, error) {
	db, done, err := fresh(ctx, d, nil)
	if err != nil {
		return lockPoint{}, err
	}
	defer done()
	if _, err := db.ExecContext(ctx, conformance.ItemDDL[d]); err != nil {
		return lockPoint{}, err
	}
	l, err := lease.New[string](d, engine.MustTable(conformance.ItemTable, conformance.ItemColumns), lease.Options{})
	if err != nil {
		return lockPoint{}, err
	}
	for w := range workers {
		if err := l.Ensure(ctx, db, "k"+strconv.Itoa(w), lease.CreateOptions{}); err != nil {
			return lockPoint{}, err
		}
	}
	const ttl = time.Minute
	// one returns the function of one worker: acquire and release once.
	one := func(w int) (func() error, func(), error) {
		key := "k" + strconv.Itoa(w)
		switch kind {
		case kindLibrary:
			return func() error {
				g, err := l.Acquire(ctx, db, key, "bench", ttl)
				if err != nil {
					return err
				}
				return l.Release(ctx, db, g)
			}, func() {}, nil
		case kindPair:
			q := pairSQL[d]
			return func() error {
				tok, err := engine.NewToken()
				if err != nil {
					return err
				}
				res, err := db.ExecContext(ctx, q[0], "bench", engine.Secret(tok), ttl.Microseconds(), key)
				if err != nil {
					return err
				}
				if n, _ := res.RowsAffected(); n != 1 {
					return fmt.Errorf("hand-written acquire matched %d rows", n)
				}
				_, err = db.ExecContext(ctx, q[1], key, engine.Secret(tok))
				return err
			}, func() {}, nil
		case kindGetLock, kindPgLock:
			// A session lock belongs to one connection.
			conn, err := db.Conn(ctx)
			if err != nil {
				return nil, nil, err
			}
			lock, unlock := "SELECT GET_LOCK(?, 10)", "SELECT RELEASE_LOCK(?)"
			var arg any = "rowlease-bench-" + key
			if kind == kindPgLock {
				lock, unlock = "SELECT pg_advisory_lock($1)", "SELECT pg_advisory_unlock($1)"
				arg = int64(w + 1)
			}
			return func() error {
				var ok sql.NullInt64
				if err := conn.QueryRowContext(ctx, lock, arg).Scan(&ok); err != nil && kind == kindGetLock {
					return err
				}
				var un sql.NullBool
				return conn.QueryRowContext(ctx, unlock, arg).Scan(&un)
			}, func() { conn.Close() }, nil
		}
		return nil, nil, fmt.Errorf("unknown kind %q", kind)
	}
	fns := make([]func() error, workers)
	for w := range workers {
		f, closeFn, err := one(w)
		if err != nil {
			return lockPoint{}, err
		}
		defer closeFn()
		fns[w] = f
		if err := f(); err != nil { // warm: connections open, statements prepared
			return lockPoint{}, err
		}
	}
	lat := make([][]int64, workers)
	errs := make([]error, workers)
	start := time.Now()
	stop := start.Add(dur)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				t0 := time.Now()
				if err := fns[w](); err != nil {
					errs[w] = err
					return
				}
				lat[w] = append(lat[w], time.Since(t0).Microseconds())
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []int64
	for w := range workers {
		if errs[w] != nil {
			return lockPoint{}, errs[w]
		}
		all = append(all, lat[w]...)
	}
	slices.Sort(all)
	return lockPoint{Dialect: d.String(), Kind: kind, Workers: workers, Pairs: len(all),
		PerSec: float64(len(all)) / elapsed.Seconds(), P50Micros: quantile(all, 0.50), P99Micros: quantile(all, 0.99),
		ElapsedSec: elapsed.Seconds()}, nil
}

// quantile of sorted values (nearest rank).
func quantile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

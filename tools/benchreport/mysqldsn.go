package main

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/rowlease/rowlease/internal/conformance"
	"github.com/rowlease/rowlease/internal/countdb"
	"github.com/rowlease/rowlease/lease"
)

// mysqlDSNPoint is the library's acquire+release pair on MySQL with and
// without interpolateParams=true in the DSN. Without it, go-sql-driver
// declines to run a statement with arguments directly, and database/sql
// prepares it, runs it and closes it: more round trips per operation.
type mysqlDSNPoint struct {
	Interpolate bool
	Workers     int
	Pairs       int
	PerSec      float64
	P50Micros   int64
	P99Micros   int64
	RoundTrips  float64 // per pair: statements, prepares, BEGIN, COMMIT, ROLLBACK
	Prepares    float64 // per pair
}

func measureMySQLDSN(ctx context.Context, dur time.Duration) ([]mysqlDSNPoint, error) {
	var out []mysqlDSNPoint
	for _, workers := range []int{1, 16} {
		// Interleaved, twice each, so a drift of the machine falls on both.
		for _, interp := range []bool{false, true, false, true} {
			p, err := measureMySQLDSNPoint(ctx, interp, workers, dur/2)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	// Merge the two halves of each configuration.
	var merged []mysqlDSNPoint
	for _, p := range out {
		i := slices.IndexFunc(merged, func(m mysqlDSNPoint) bool { return m.Interpolate == p.Interpolate && m.Workers == p.Workers })
		if i < 0 {
			merged = append(merged, p)
			continue
		}
		m := &merged[i]
		m.PerSec = (m.PerSec + p.PerSec) / 2
		m.P50Micros, m.P99Micros = (m.P50Micros+p.P50Micros)/2, max(m.P99Micros, p.P99Micros)
		m.RoundTrips = (m.RoundTrips*float64(m.Pairs) + p.RoundTrips*float64(p.Pairs)) / float64(m.Pairs+p.Pairs)
		m.Prepares = (m.Prepares*float64(m.Pairs) + p.Prepares*float64(p.Pairs)) / float64(m.Pairs+p.Pairs)
		m.Pairs += p.Pairs
	}
	return merged, nil
}

func measureMySQLDSNPoint(ctx context.Context, interp bool, workers int, dur time.Duration) (mysqlDSNPoint, error) {
	c := &countdb.Counter{}
	db, done, err := freshWith(ctx, lease.MySQL, c, func(cfg *mysql.Config) { cfg.InterpolateParams = interp })
	if err != nil {
		return mysqlDSNPoint{}, err
	}
	defer done()
	if _, err := db.ExecContext(ctx, conformance.ItemDDL[lease.MySQL]); err != nil {
		return mysqlDSNPoint{}, err
	}
	l, err := lease.New[string](lease.MySQL, lease.MustTable(conformance.ItemTable, conformance.ItemColumns), lease.Options{})
	if err != nil {
		return mysqlDSNPoint{}, err
	}
	pair := func(key string) error {
		g, err := l.Acquire(ctx, db, key, "bench", time.Minute)
		if err != nil {
			return err
		}
		return l.Release(ctx, db, g)
	}
	for w := range workers {
		key := "k" + strconv.Itoa(w)
		if err := l.Ensure(ctx, db, key, lease.CreateOptions{}); err != nil {
			return mysqlDSNPoint{}, err
		}
		if err := pair(key); err != nil { // warm: connections, first-use check
			return mysqlDSNPoint{}, err
		}
	}
	c.Reset()
	lat := make([][]int64, workers)
	errs := make([]error, workers)
	start := time.Now()
	stop := start.Add(dur)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			key := "k" + strconv.Itoa(w)
			for time.Now().Before(stop) {
				t0 := time.Now()
				if err := pair(key); err != nil {
					errs[w] = err
					return
				}
				lat[w] = append(lat[w], time.Since(t0).Microseconds())
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	st := c.Stats()
	var all []int64
	for w := range workers {
		if errs[w] != nil {
			return mysqlDSNPoint{}, errs[w]
		}
		all = append(all, lat[w]...)
	}
	slices.Sort(all)
	n := float64(max(len(all), 1))
	return mysqlDSNPoint{Interpolate: interp, Workers: workers, Pairs: len(all), PerSec: float64(len(all)) / elapsed.Seconds(),
		P50Micros: quantile(all, 0.5), P99Micros: quantile(all, 0.99),
		RoundTrips: float64(st.Statements+st.Prepares+st.Begins+st.Commits+st.Rollbacks) / n,
		Prepares:   float64(st.Prepares) / n}, nil
}

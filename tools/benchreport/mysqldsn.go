package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/lease"
)

// The MySQL settings compared: go-sql-driver's DSN with
// interpolateParams=true (what the library's documentation asks for), its
// default DSN (interpolateParams off), and each with the Lease keeping
// its statements prepared (lease.Options.Prepare = lease.PrepareAlways).
const (
	dsnInterpolate         = "interpolateParams=true"
	dsnDefault             = "default DSN"
	dsnPrepared            = "default DSN + PrepareAlways"
	dsnInterpolatePrepared = "interpolateParams=true + PrepareAlways"
)

var dsnModes = []string{dsnInterpolate, dsnDefault, dsnPrepared, dsnInterpolatePrepared}

// flowKindOf is the end-to-end kind that measures mode.
var flowKindOf = map[string]string{dsnInterpolate: flowLibrary, dsnDefault: flowLibraryNoInterp, dsnPrepared: flowLibraryPrepared,
	dsnInterpolatePrepared: flowLibraryInterpPrepared}

// mysqlDSNPoint is the library's acquire+release pair on MySQL under one
// of dsnModes. Without interpolateParams, go-sql-driver declines to run a
// statement with arguments directly, and database/sql prepares it, runs
// it and closes it: a prepare is a round trip more per statement (the
// close is a message with no reply). Kept prepared statements are
// prepared once per connection and then run in one round trip.
type mysqlDSNPoint struct {
	Mode        string
	Interpolate bool
	Workers     int
	Pairs       int
	PerSec      float64
	P50Micros   int64
	P99Micros   int64
	RoundTrips  float64 // per pair: statements, prepares, BEGIN, COMMIT, ROLLBACK
	Prepares    float64 // per pair
	ElapsedSec  float64
}

// measureMySQLDSN measures the pair under each of dsnModes at 1 and 16
// workers, dur/2 per slice; then new messages through Runner.Handle
// under each mode at 1 and 16 sessions, flowDur per slice. Each point is
// measured in dsnSlices slices, the modes interleaved, so that a drift of
// a shared machine falls on all of them alike.
func measureMySQLDSN(ctx context.Context, dur, flowDur time.Duration) ([]mysqlDSNPoint, []throughputPoint, error) {
	var out []mysqlDSNPoint
	for _, workers := range []int{1, 16} {
		for range dsnSlices {
			for _, mode := range dsnModes {
				p, err := measureMySQLDSNPoint(ctx, mode, workers, dur/2)
				if err != nil {
					return nil, nil, fmt.Errorf("%s x%d: %w", mode, workers, err)
				}
				out = append(out, p)
			}
		}
	}
	// Merge the slices of each configuration.
	var merged []mysqlDSNPoint
	for _, p := range out {
		i := slices.IndexFunc(merged, func(m mysqlDSNPoint) bool { return m.Mode == p.Mode && m.Workers == p.Workers })
		if i < 0 {
			merged = append(merged, p)
			continue
		}
		m := &merged[i]
		m.P50Micros = int64((float64(m.P50Micros)*m.ElapsedSec + float64(p.P50Micros)*p.ElapsedSec) / (m.ElapsedSec + p.ElapsedSec))
		m.P99Micros = max(m.P99Micros, p.P99Micros)
		m.RoundTrips = (m.RoundTrips*float64(m.Pairs) + p.RoundTrips*float64(p.Pairs)) / float64(max(m.Pairs+p.Pairs, 1))
		m.Prepares = (m.Prepares*float64(m.Pairs) + p.Prepares*float64(p.Pairs)) / float64(max(m.Pairs+p.Pairs, 1))
		m.Pairs += p.Pairs
		m.ElapsedSec += p.ElapsedSec
		m.PerSec = float64(m.Pairs) / m.ElapsedSec
	}
	var flow []throughputPoint
	for range dsnSlices {
		for _, mode := range dsnModes {
			pts, err := measureThroughput(ctx, lease.MySQL, flowKindOf[mode], []int{1, 16}, flowDur)
			if err != nil {
				return nil, nil, fmt.Errorf("flow %s: %w", mode, err)
			}
			for _, p := range pts {
				flow = mergeThroughput(flow, p)
			}
		}
	}
	kindAt := func(k string) int {
		return slices.IndexFunc(dsnModes, func(m string) bool { return flowKindOf[m] == k })
	}
	slices.SortStableFunc(flow, func(a, b throughputPoint) int {
		if a.Sessions != b.Sessions {
			return a.Sessions - b.Sessions
		}
		return kindAt(a.Kind) - kindAt(b.Kind)
	})
	return merged, flow, nil
}

// dsnSlices is how many slices each point of the MySQL settings is
// measured in (a pair's slice is half the point's time, a message's
// slice the whole: a stall of a second on a shared machine would weigh
// too much in half a second at 16 sessions).
const dsnSlices = 4

// mergeThroughput adds p to the point of pts with its dialect, kind and
// sessions, or appends it: the rate over the slices' messages and time,
// p50 averaged over the slices by time, p99 the highest, counts per
// message weighted by messages.
func mergeThroughput(pts []throughputPoint, p throughputPoint) []throughputPoint {
	i := slices.IndexFunc(pts, func(m throughputPoint) bool {
		return m.Dialect == p.Dialect && m.Kind == p.Kind && m.Sessions == p.Sessions
	})
	if i < 0 {
		return append(pts, p)
	}
	m := &pts[i]
	byMsg := func(a, b float64) float64 {
		return (a*float64(m.Messages) + b*float64(p.Messages)) / float64(max(m.Messages+p.Messages, 1))
	}
	m.P50Micros = int64((float64(m.P50Micros)*m.ElapsedSec + float64(p.P50Micros)*p.ElapsedSec) / (m.ElapsedSec + p.ElapsedSec))
	m.P99Micros = max(m.P99Micros, p.P99Micros)
	m.Statements, m.RoundTrips, m.ClientCPUMicros = byMsg(m.Statements, p.Statements), byMsg(m.RoundTrips, p.RoundTrips), byMsg(m.ClientCPUMicros, p.ClientCPUMicros)
	m.Messages += p.Messages
	m.ElapsedSec += p.ElapsedSec
	m.PerSec = float64(m.Messages) / m.ElapsedSec
	return pts
}

func measureMySQLDSNPoint(ctx context.Context, mode string, workers int, dur time.Duration) (mysqlDSNPoint, error) {
	c := &countdb.Counter{}
	interp := mode == dsnInterpolate || mode == dsnInterpolatePrepared
	db, done, err := freshWith(ctx, lease.MySQL, c, func(cfg *mysql.Config) { cfg.InterpolateParams = interp })
	if err != nil {
		return mysqlDSNPoint{}, err
	}
	defer done()
	if _, err := db.ExecContext(ctx, conformance.ItemDDL[lease.MySQL]); err != nil {
		return mysqlDSNPoint{}, err
	}
	opts := lease.Options{}
	if mode == dsnPrepared || mode == dsnInterpolatePrepared {
		opts.Prepare = lease.PrepareAlways
	}
	l, err := lease.New[string](lease.MySQL, engine.MustTable(conformance.ItemTable, conformance.ItemColumns), opts)
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
	return mysqlDSNPoint{Mode: mode, Interpolate: interp, Workers: workers, Pairs: len(all), PerSec: float64(len(all)) / elapsed.Seconds(), ElapsedSec: elapsed.Seconds(),
		P50Micros: quantile(all, 0.5), P99Micros: quantile(all, 0.99),
		RoundTrips: float64(st.Statements+st.Prepares+st.Begins+st.Commits+st.Rollbacks) / n,
		Prepares:   float64(st.Prepares) / n}, nil
}

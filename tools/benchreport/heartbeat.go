package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// heartbeatPoint is what keeping runs in flight costs per heartbeat
// interval, counted at the driver.
type heartbeatPoint struct {
	Dialect string
	Batched bool
	Runs    int
	// StepsPerRun is how many steps (request.Run.Step) each run recorded
	// per interval while it was counted: 0 for runs that only wait (a
	// model call in progress), 1 for runs that record a model round per
	// interval.
	StepsPerRun int
	Statements  float64 // per interval
	RoundTrips  float64 // statements, BEGIN, COMMIT, ROLLBACK, prepares per interval
	// Chunks is how many statements per table a batched round needs for
	// Runs leases: ⌈Runs / engine.MaxBatch⌉ (0 unbatched).
	Chunks int
	// StartSec is how long the runs added for this point took to start.
	StartSec float64
	// RoundMillis is how long the last counted round took, from its first
	// statement to the interrupt read that ends it (batched only).
	RoundMillis float64
}

// The heartbeat of the measured Runners. The TTL leaves a run most of
// half a minute over the interval: the measurement counts statements, and
// on a loaded machine (or on SQLite, where ten thousand starts queue on
// one write lock with the renewals) a short TTL would lose runs that are
// merely slow to be renewed. The count per interval does not depend on
// the TTL.
const (
	heartbeatTTL      = 30 * time.Second
	heartbeatInterval = 2 * time.Second
	heartbeatRounds   = 3 // intervals counted per point
)

// stepOutput is what a counted step records: a model's decision.
var stepOutput = json.RawMessage(`{"tool":"write","arguments":{"amount":35},"note":"lunch at noon"}`)

// measureHeartbeat starts runs on one Runner (batched: one heartbeat.Batcher
// for all, the default; or a heartbeat per run) and counts what keeping
// them in flight costs per interval, at each of sizes runs in flight (in
// increasing order: the fleet grows from one point to the next). Batched,
// at stepsAt runs in flight, it counts a second time while every run
// records one step per interval.
func measureHeartbeat(ctx context.Context, d lease.Dialect, sizes []int, batched bool, stepsAt int) ([]heartbeatPoint, error) {
	c := &countdb.Counter{}
	db, done, err := fresh(ctx, d, c)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := schema.Apply(ctx, db, d); err != nil {
		return nil, err
	}
	r, err := request.New(request.Config{DB: db, Dialect: d, TTL: heartbeatTTL, HeartbeatInterval: heartbeatInterval, SeparateHeartbeats: !batched,
		Session: session.Config{AutoCreate: true}, ReleaseTimeout: time.Minute})
	if err != nil {
		return nil, err
	}
	defer r.Close(context.Background())
	f := newFleet(ctx, r, c, sizes[len(sizes)-1])
	f.batched = batched
	f.marks = watchRounds(c)
	var out []heartbeatPoint
	for _, n := range sizes {
		t0 := time.Now()
		if err := f.grow(n); err != nil {
			return nil, errors.Join(err, f.stop())
		}
		p := heartbeatPoint{Dialect: d.String(), Batched: batched, Runs: n, StartSec: time.Since(t0).Seconds()}
		if batched {
			p.Chunks = (n + engine.MaxBatch - 1) / engine.MaxBatch
		}
		steps := []int{0}
		if batched && n == stepsAt {
			steps = append(steps, 1)
		}
		for _, s := range steps {
			q := p
			q.StepsPerRun = s
			var round time.Duration
			if q.Statements, q.RoundTrips, round, err = f.count(s > 0); err != nil {
				return nil, errors.Join(err, f.stop())
			}
			if s == 0 {
				q.RoundMillis = float64(round.Microseconds()) / 1000
			}
			log.Printf("heartbeat %-8s batched=%-5v runs=%-5d steps/run=%d %7.1f statements, %7.1f round trips per interval (runs started in %.1fs, a round took %v)",
				d, batched, n, s, q.Statements, q.RoundTrips, q.StartSec, round.Round(time.Millisecond))
			out = append(out, q)
		}
	}
	return out, f.stop()
}

// fleet is a number of runs in flight on one Runner, one session each,
// whose agents wait until the fleet stops (a model call in progress) and
// record a step when asked.
type fleet struct {
	ctx      context.Context
	r        *request.Runner
	c        *countdb.Counter
	release  chan struct{}
	started  chan struct{}
	ended    chan error    // a run's Handle returned
	starting chan struct{} // runs start a few at a time
	stepDone chan error
	steps    []chan struct{} // one per run: record a step
	marks    *roundMarks     // the ends of the heartbeat's rounds
	batched  bool
	wg       sync.WaitGroup
	stopped  bool
}

func newFleet(ctx context.Context, r *request.Runner, c *countdb.Counter, most int) *fleet {
	return &fleet{ctx: ctx, r: r, c: c, release: make(chan struct{}), started: make(chan struct{}, most),
		ended: make(chan error, most), starting: make(chan struct{}, 8), stepDone: make(chan error, most)}
}

// grow starts runs until n are in flight. Runs start eight at a time, as
// traffic arrives, not thousands in the same instant: on SQLite every
// start is a write transaction, and thousands of writers queued on its
// one lock would starve the renewals of the runs already in flight.
func (f *fleet) grow(n int) error {
	from := len(f.steps)
	for i := from; i < n; i++ {
		step := make(chan struct{}, 1)
		f.steps = append(f.steps, step)
		f.wg.Go(func() {
			f.starting <- struct{}{}
			var once sync.Once
			up := func() { once.Do(func() { <-f.starting }) }
			_, err := f.r.Handle(f.ctx, request.Message{SessionKey: "s" + strconv.Itoa(i), ClientRequestID: "c", Content: "x"},
				func(ctx context.Context, run *request.Run) (request.Answer, error) {
					up()
					f.started <- struct{}{}
					for round := 0; ; round++ {
						select {
						case <-f.release:
							return request.Answer{Reply: "ok"}, nil
						case <-step:
							_, err := run.Step(ctx, "round-"+strconv.Itoa(round), func(context.Context) (json.RawMessage, error) { return stepOutput, nil })
							f.stepDone <- err
							if err != nil {
								return request.Answer{}, err
							}
						case <-ctx.Done():
							return request.Answer{}, context.Cause(ctx)
						}
					}
				})
			up()
			f.ended <- err
		})
	}
	for range n - from {
		select {
		case <-f.started:
		case err := <-f.ended:
			return fmt.Errorf("a run ended before its agent started: %v", err)
		}
	}
	return nil
}

// count counts the statements and round trips of heartbeatRounds
// rounds of the heartbeat, per round (one interval); with steps, every
// run records one step per interval meanwhile. Batched, the window is
// aligned on the Batcher's rounds (see roundMarks): it spans
// heartbeatRounds whole rounds, from the end of one to the end of the
// third after it, and count also returns how long the last of them took.
// Runs with a heartbeat each renew at instants of their own: the window
// is heartbeatRounds intervals long, and the count is scaled to one
// round of every run by the runs' rounds seen in it.
func (f *fleet) count(steps bool) (stmts, trips float64, round time.Duration, err error) {
	stepAll := func() error {
		for _, s := range f.steps {
			s <- struct{}{}
		}
		for range f.steps {
			select {
			case err := <-f.stepDone:
				if err != nil {
					return fmt.Errorf("recording a step: %w", err)
				}
			case err := <-f.ended:
				return fmt.Errorf("a run ended while it was counted: %v", err)
			}
		}
		return nil
	}
	var st countdb.Stats
	if f.batched {
		from, err := f.marks.next(true)
		if err != nil {
			return 0, 0, 0, err
		}
		to := from
		for range heartbeatRounds {
			if steps {
				if err := stepAll(); err != nil {
					return 0, 0, 0, err
				}
			}
			if to, err = f.marks.next(false); err != nil {
				return 0, 0, 0, err
			}
		}
		st, round = to.stats.minus(from.stats), to.took
	} else {
		f.c.Reset()
		reads0 := f.marks.runReads.Load()
		start := time.Now()
		for r := range heartbeatRounds {
			wait(start.Add(time.Duration(r) * heartbeatInterval))
			if steps {
				if err := stepAll(); err != nil {
					return 0, 0, 0, err
				}
			}
		}
		wait(start.Add(heartbeatRounds * heartbeatInterval))
		st = f.c.Stats()
		// A run's renewals end with its interrupt read: the window holds
		// reads whole rounds of single runs (give or take the one a run was
		// in the middle of at either edge), each run renews once per
		// interval, so that an interval costs len(f.steps) of them.
		reads := f.marks.runReads.Load() - reads0
		if reads == 0 {
			return 0, 0, 0, errors.New("no run's interrupt read was seen (is it still sent after each renewal, as isRunInterruptRead expects?)")
		}
		scale := float64(len(f.steps)) / float64(reads)
		st = countdb.Stats{Statements: scaled(st.Statements, scale*heartbeatRounds), Begins: scaled(st.Begins, scale*heartbeatRounds),
			Commits: scaled(st.Commits, scale*heartbeatRounds), Rollbacks: scaled(st.Rollbacks, scale*heartbeatRounds), Prepares: scaled(st.Prepares, scale*heartbeatRounds)}
	}
	select {
	case err := <-f.ended:
		return 0, 0, 0, fmt.Errorf("a run ended while it was counted (its leases were not kept): %v", err)
	default:
	}
	n := float64(heartbeatRounds)
	return float64(st.Statements) / n, float64(st.Statements+st.Begins+st.Commits+st.Rollbacks+st.Prepares) / n, round, nil
}

func wait(until time.Time) {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	<-t.C
}

// roundMarks finds the ends of the Batcher's rounds in the statements a
// counted pool sends: after each round the Runner reads, with one
// statement, which of its runs were asked to stop (the interrupt read,
// heartbeat.BatchConfig.AfterRound); no other statement of the fleet reads
// the interrupted_by column of every processing request. At each such read
// it takes the counts (its own included) and how long the round took, from
// its first statement to that read.
type roundMarks struct {
	c        *countdb.Counter
	runReads atomic.Int64 // interrupt reads of single runs (isRunInterruptRead)
	mu       sync.Mutex
	first    time.Time // the first statement after the last mark
	ch       chan roundMark
}

type roundMark struct {
	stats countStats
	took  time.Duration
}

// countStats is countdb.Stats, which can be subtracted.
type countStats countdb.Stats

func (a countStats) minus(b countStats) countdb.Stats {
	return countdb.Stats{Statements: a.Statements - b.Statements, Begins: a.Begins - b.Begins, Commits: a.Commits - b.Commits,
		Rollbacks: a.Rollbacks - b.Rollbacks, Prepares: a.Prepares - b.Prepares}
}

// isInterruptRead tells the interrupt read by its text: a read of
// interrupted_by over every processing request, with no argument.
func isInterruptRead(q string) bool {
	return strings.HasPrefix(q, "SELECT id, interrupted_by FROM ") && strings.Contains(q, "interrupted_by IS NOT NULL") && !strings.ContainsAny(q, "?$")
}

// isRunInterruptRead tells the interrupt read of a run with a heartbeat
// of its own, sent after each renewal of its leases: a read of one
// request's interrupted_by.
func isRunInterruptRead(q string) bool {
	return strings.HasPrefix(q, "SELECT COALESCE(interrupted_by, '') FROM ")
}

// scaled is n × f, rounded.
func scaled(n int64, f float64) int64 { return int64(math.Round(float64(n) * f)) }

// watchRounds observes every statement the counter sees (through
// Counter.FailAfter, whose function lets every result through).
func watchRounds(c *countdb.Counter) *roundMarks {
	m := &roundMarks{c: c, ch: make(chan roundMark, 16)}
	c.FailAfter(func(q string) error {
		if isRunInterruptRead(q) {
			m.runReads.Add(1)
		}
		now := time.Now()
		m.mu.Lock()
		defer m.mu.Unlock()
		if !isInterruptRead(q) {
			if m.first.IsZero() {
				m.first = now
			}
			return nil
		}
		mark := roundMark{stats: countStats(c.Stats()), took: now.Sub(m.first)}
		m.first = time.Time{}
		select {
		case m.ch <- mark:
		default: // nobody is counting: drop the oldest
			<-m.ch
			m.ch <- mark
		}
		return nil
	})
	return m
}

// next returns the next round's mark; fresh drops the marks of rounds
// that ended before the call.
func (m *roundMarks) next(fresh bool) (roundMark, error) {
	if fresh {
		for len(m.ch) > 0 {
			<-m.ch
		}
	}
	// A round of 10,000 renewals on PostgreSQL took 0.4–2.1 s in the runs
	// on the 2-core machine, and once more than three intervals: wait long
	// enough that only a round that never comes fails the report.
	const patience = 10 * heartbeatInterval
	t := time.NewTimer(patience)
	defer t.Stop()
	select {
	case mark := <-m.ch:
		return mark, nil
	case <-t.C:
		return roundMark{}, fmt.Errorf("no round of the heartbeat ended within %v (is the interrupt read still sent after each round, as isInterruptRead expects?)", patience)
	}
}

// stop lets every run finish and joins them; it returns the first error a
// run ended with.
func (f *fleet) stop() error {
	if f.stopped {
		return nil
	}
	f.stopped = true
	close(f.release)
	f.wg.Wait()
	close(f.ended)
	var errs []error
	for err := range f.ended {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d runs failed, the first: %w", len(errs), errs[0])
	}
	return nil
}

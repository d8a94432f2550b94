// Command benchreport measures rowlease against the alternatives on real
// servers and draws the charts of the README (SVG, with gonum.org/v1/plot)
// under docs/:
//
//   - lease acquire+release throughput and p99 latency against concurrency
//     (1–64 workers) for the library, the hand-written two-UPDATE pair,
//     and the database's native lock (GET_LOCK, pg_advisory_lock), per
//     dialect;
//   - heartbeat statements and round trips per interval against runs in
//     flight, batched (heartbeat.Batcher, request.Runner's default; 10 to
//     10,000 runs, past engine.MaxBatch) and with a heartbeat per run (10
//     to 1,000); at 1,000 runs also with every run recording one step
//     (request.Run.Step) per interval;
//   - the lock-path latency of one request (two model rounds, one tool
//     call);
//   - end to end: new messages per second through request.Runner.Handle
//     (no model latency, one tool call writing one ledger row) at 1–256
//     concurrent sessions, beside the article's design written by hand
//     (its statements, tables of its shape) and the floor (the ledger row
//     alone in one transaction, no lock), with p50/p99 latency,
//     statements and round trips per message and the client's CPU per
//     message (-flow-point, -flow-sessions size it);
//   - with a network: the same three designs end to end on MariaDB and
//     PostgreSQL, the pool dialling a proxy that delays every chunk by
//     half a round-trip time each way (-network-rtts, 0.2, 0.5 and 1 ms,
//     and 0: loopback, in the same run;
//     -network-sessions, 1, 16 and 64), in two rounds, the designs in one
//     order and then the reverse;
//   - MySQL: the library's acquire+release pair, and one new message
//     through Runner.Handle, with interpolateParams=true in the DSN, with
//     go-sql-driver's default DSN (interpolateParams off), and with the
//     default DSN and lease.PrepareAlways (round trips, prepares, rate).
//
// -only runs some parts alone (report.md then holds those alone);
// -flow-kinds measures some designs of the end-to-end part alone, and
// -flow-cpuprofile writes a CPU profile of each design's end-to-end points
// (go tool pprof), to see where the client's CPU goes per message.
//
// It reads ROWLEASE_MYSQL_DSN and ROWLEASE_POSTGRES_DSN (as the tests do;
// make bench-report starts throwaway servers and sets them) and always
// runs SQLite. Every figure of one run comes from the same machine in the
// same minutes: compare them as ratios. It is a module of its own so that
// the plotting library stays out of rowlease's dependencies.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rowlease/rowlease/lease"
)

func main() {
	out := flag.String("out", "docs", "directory for the SVG charts and report.json")
	point := flag.Duration("point", 1500*time.Millisecond, "measuring time of one throughput point")
	quick := flag.Bool("quick", false, "fewer points (a smoke run)")
	from := flag.String("from", "", "draw the charts of this report.json instead of measuring")
	flowPoint := flag.Duration("flow-point", time.Second, "measuring time of one end-to-end throughput point (messages per second)")
	flowSessions := flag.String("flow-sessions", "1,4,16,64,256", "concurrent sessions of the end-to-end throughput points")
	only := flag.String("only", "", "measure only these parts, comma-separated: locks, heartbeat, lockpath, flow, network, mysqldsn (default all)")
	networkRTTs := flag.String("network-rtts", "0,0.2ms,0.5ms,1ms", "round-trip times of the network points (MySQL and PostgreSQL through a delaying proxy; 0: loopback, no proxy)")
	networkSessions := flag.String("network-sessions", "1,16,64", "concurrent sessions of the network points")
	flowKindsFlag := flag.String("flow-kinds", "", "measure only these designs end to end, comma-separated: rowlease, article, floor (default all)")
	flowProfile := flag.String("flow-cpuprofile", "", "write a CPU profile of each design's end-to-end points to PREFIX-<dialect>-<design>.prof")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	if *from != "" {
		b, err := os.ReadFile(*from)
		if err != nil {
			log.Fatal(err)
		}
		var rep report
		if err := json.Unmarshal(b, &rep); err != nil {
			log.Fatal(err)
		}
		if err := draw(*out, rep); err != nil {
			log.Fatal(err)
		}
		return
	}
	dialects := []lease.Dialect{lease.SQLite}
	if os.Getenv("ROWLEASE_MYSQL_DSN") != "" {
		dialects = append(dialects, lease.MySQL)
	}
	if os.Getenv("ROWLEASE_POSTGRES_DSN") != "" {
		dialects = append(dialects, lease.Postgres)
	}
	conc := []int{1, 2, 4, 8, 16, 32, 64}
	// Runs in flight: with a heartbeat each up to 1,000; batched (the
	// default) up to 10,000, past engine.MaxBatch, where a round needs more
	// than one statement per table. At stepsAt, counted again with a step
	// recorded per run and interval.
	runs, batchedRuns, stepsAt := []int{10, 100, 1000}, []int{10, 100, 1000, 2000, 5000, 10000}, 1000
	requests := 300
	if *quick {
		conc, runs, batchedRuns, stepsAt, requests = []int{1, 8}, []int{10, 100}, []int{10, 100}, 100, 30
		*point = 300 * time.Millisecond
	}
	sessions, err := parseInts(*flowSessions)
	if err != nil {
		log.Fatalf("-flow-sessions: %v", err)
	}
	rtts, err := parseDurations(*networkRTTs)
	if err != nil {
		log.Fatalf("-network-rtts: %v", err)
	}
	netSessions, err := parseInts(*networkSessions)
	if err != nil {
		log.Fatalf("-network-sessions: %v", err)
	}
	if *quick {
		sessions, *flowPoint = []int{1, 16}, 300*time.Millisecond
		rtts, netSessions = rtts[len(rtts)-1:], []int{1, 16}
	}
	want := func(part string) bool {
		return *only == "" || slices.Contains(strings.Split(*only, ","), part)
	}
	ctx := context.Background()
	var rep report
	rep.Started = time.Now().UTC()
	for _, d := range dialects {
		if !want("locks") {
			break
		}
		for _, k := range kindsFor(d) {
			for _, c := range conc {
				p, err := measureLocks(ctx, d, k, c, *point)
				if err != nil {
					log.Fatalf("%s %s x%d: %v", d, k, c, err)
				}
				log.Printf("locks %-8s %-18s x%-2d %8.0f pairs/s  p99 %v", d, k, c, p.PerSec, time.Duration(p.P99Micros)*time.Microsecond)
				rep.Locks = append(rep.Locks, p)
			}
		}
	}
	for _, d := range dialects {
		if !want("heartbeat") {
			break
		}
		for _, batched := range []bool{true, false} {
			sizes := runs
			if batched {
				sizes = batchedRuns
			}
			pts, err := measureHeartbeat(ctx, d, sizes, batched, stepsAt)
			if err != nil {
				log.Fatalf("%s heartbeat (batched %v): %v", d, batched, err)
			}
			rep.Heartbeat = append(rep.Heartbeat, pts...)
		}
	}
	for _, d := range dialects {
		if !want("lockpath") {
			break
		}
		p, err := measureLockPath(ctx, d, requests)
		if err != nil {
			log.Fatalf("%s lock path: %v", d, err)
		}
		log.Printf("lockpath %-8s p50 %v p99 %v, %.1f statements", d, time.Duration(p.P50Micros)*time.Microsecond, time.Duration(p.P99Micros)*time.Microsecond, p.Statements)
		rep.LockPath = append(rep.LockPath, p)
	}
	for _, d := range dialects {
		if !want("flow") {
			break
		}
		for _, k := range flowKinds {
			if !wantFlow(*flowKindsFlag, k) {
				continue
			}
			stopProfile, err := startProfile(*flowProfile, d, k)
			if err != nil {
				log.Fatal(err)
			}
			pts, err := measureThroughput(ctx, d, k, sessions, *flowPoint)
			stopProfile()
			if err != nil {
				log.Fatalf("%s flow %s: %v", d, k, err)
			}
			for _, p := range pts {
				log.Printf("flow %-8s %-17s x%-3d %7.0f msg/s  p50 %v p99 %v  %.1f statements (%.1f round trips)  CPU per msg: client %.0fµs server %.0fµs", d, k, p.Sessions, p.PerSec,
					time.Duration(p.P50Micros)*time.Microsecond, time.Duration(p.P99Micros)*time.Microsecond, p.Statements, p.RoundTrips, p.ClientCPUMicros, p.ServerCPUMicros)
			}
			rep.Throughput = append(rep.Throughput, pts...)
		}
	}
	for _, d := range dialects {
		if !want("network") || d == lease.SQLite {
			continue
		}
		var kinds []string
		for _, k := range flowKinds {
			if wantFlow(*flowKindsFlag, k) {
				kinds = append(kinds, k)
			}
		}
		pts, err := measureNetwork(ctx, d, rtts, netSessions, *flowPoint, kinds)
		if err != nil {
			log.Fatalf("%s network: %v", d, err)
		}
		for _, p := range pts {
			log.Printf("network %-8s rtt %-6v (ping %v) round %d %-17s x%-3d %7.0f msg/s  p50 %v p99 %v  %.1f round trips", d,
				time.Duration(p.RTTMicros)*time.Microsecond, time.Duration(p.PingMicros)*time.Microsecond, p.Round, p.Kind, p.Sessions, p.PerSec,
				time.Duration(p.P50Micros)*time.Microsecond, time.Duration(p.P99Micros)*time.Microsecond, p.RoundTrips)
		}
		rep.Network = append(rep.Network, pts...)
	}
	if want("mysqldsn") && slices.Contains(dialects, lease.MySQL) {
		pts, flow, err := measureMySQLDSN(ctx, *point, *flowPoint)
		if err != nil {
			log.Fatalf("mysql dsn: %v", err)
		}
		for _, p := range pts {
			log.Printf("mysqldsn %-27s x%-2d %8.0f pairs/s  p50 %v  %.1f round trips per pair (%.1f prepares)", p.Mode, p.Workers, p.PerSec,
				time.Duration(p.P50Micros)*time.Microsecond, p.RoundTrips, p.Prepares)
		}
		for _, p := range flow {
			log.Printf("mysqldsn flow %-45s x%-2d %7.0f msg/s  p50 %v p99 %v  %.1f statements (%.1f round trips)", p.Kind, p.Sessions, p.PerSec,
				time.Duration(p.P50Micros)*time.Microsecond, time.Duration(p.P99Micros)*time.Microsecond, p.Statements, p.RoundTrips)
		}
		rep.MySQLDSN, rep.MySQLDSNFlow = pts, flow
	}
	rep.Finished = time.Now().UTC()
	if err := draw(*out, rep); err != nil {
		log.Fatal(err)
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*out, "report.json"), append(b, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Print(summary(rep))
}

// report is every figure of one run.
type report struct {
	Started, Finished time.Time
	Locks             []lockPoint
	Heartbeat         []heartbeatPoint
	LockPath          []lockPathPoint
	Throughput        []throughputPoint
	MySQLDSN          []mysqlDSNPoint
	MySQLDSNFlow      []throughputPoint // one new message under each MySQL setting
	Network           []networkPoint    // the end-to-end designs with the server a round trip away
}

// wantFlow reports whether the -flow-kinds list (empty: all) names kind,
// by the first word of its name.
func wantFlow(list, kind string) bool {
	if list == "" {
		return true
	}
	first, _, _ := strings.Cut(kind, " ")
	return slices.Contains(strings.Split(list, ","), strings.TrimSuffix(first, ","))
}

// startProfile starts a CPU profile of kind on d written to
// prefix-<dialect>-<kind>.prof, and returns what stops it; with no
// prefix, nothing.
func startProfile(prefix string, d lease.Dialect, kind string) (func(), error) {
	if prefix == "" {
		return func() {}, nil
	}
	first, _, _ := strings.Cut(kind, " ")
	f, err := os.Create(prefix + "-" + d.String() + "-" + strings.TrimSuffix(first, ",") + ".prof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

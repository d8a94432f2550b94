package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/rowlease/rowlease/internal/engine"
)

var dialectOrder = []string{"sqlite", "mysql", "postgres"}

var dialectTitle = map[string]string{"sqlite": "SQLite (WAL file)", "mysql": "MariaDB 10.11", "postgres": "PostgreSQL 15"}

// draw writes every chart of rep under dir, and report.md.
func draw(dir string, rep report) error {
	for _, d := range dialectOrder {
		if err := lockCharts(dir, d, rep.Locks); err != nil {
			return err
		}
	}
	if err := heartbeatChart(dir, rep.Heartbeat); err != nil {
		return err
	}
	if err := heartbeatChunksChart(dir, rep.Heartbeat); err != nil {
		return err
	}
	if err := lockPathChart(dir, rep.LockPath); err != nil {
		return err
	}
	for _, d := range dialectOrder {
		if err := throughputChart(dir, d, rep.Throughput); err != nil {
			return err
		}
		if err := networkChart(dir, d, rep.Network); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(summary(rep)), 0o644)
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Add(plotter.NewGrid())
	return p
}

func lockCharts(dir, d string, pts []lockPoint) error {
	byKind := map[string]plotter.XYs{}
	p99 := map[string]plotter.XYs{}
	var kinds []string
	for _, pt := range pts {
		if pt.Dialect != d {
			continue
		}
		if _, ok := byKind[pt.Kind]; !ok {
			kinds = append(kinds, pt.Kind)
		}
		byKind[pt.Kind] = append(byKind[pt.Kind], plotter.XY{X: float64(pt.Workers), Y: pt.PerSec})
		p99[pt.Kind] = append(p99[pt.Kind], plotter.XY{X: float64(pt.Workers), Y: float64(pt.P99Micros) / 1000})
	}
	if len(kinds) == 0 {
		return nil
	}
	tp := newPlot("acquire+release throughput, "+dialectTitle[d], "concurrent workers (each its own lock)", "pairs per second")
	lp := newPlot("acquire+release p99 latency, "+dialectTitle[d], "concurrent workers (each its own lock)", "p99 (ms)")
	for _, p := range []*plot.Plot{tp, lp} {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = powersOfTwo{}
	}
	var a, b []any
	for _, k := range kinds {
		a = append(a, k, byKind[k])
		b = append(b, k, p99[k])
	}
	if err := plotutil.AddLinePoints(tp, a...); err != nil {
		return err
	}
	if err := plotutil.AddLinePoints(lp, b...); err != nil {
		return err
	}
	tp.Legend.YOffs, lp.Legend.YOffs = -vg.Points(6), -vg.Points(6)
	tp.Y.Min, tp.Y.Max = 0, tp.Y.Max*1.35 // room for the legend
	lp.Y.Min, lp.Y.Max = 0, lp.Y.Max*1.35
	if err := tp.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, "locks-throughput-"+d+".svg")); err != nil {
		return err
	}
	return lp.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, "locks-p99-"+d+".svg"))
}

// powersOfTwo ticks 1, 2, 4, … on a log axis.
type powersOfTwo struct{}

func (powersOfTwo) Ticks(min, max float64) []plot.Tick {
	var t []plot.Tick
	for v := 1.0; v <= max*1.0001; v *= 2 {
		if v >= min*0.9999 {
			t = append(t, plot.Tick{Value: v, Label: fmt.Sprint(v)})
		}
	}
	return t
}

func heartbeatChart(dir string, pts []heartbeatPoint) error {
	p := newPlot("heartbeat cost of runs in flight (one process)", "runs in flight (session + request lease each)", "statements per heartbeat interval")
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	var args []any
	for _, d := range dialectOrder {
		for _, batched := range []bool{true, false} {
			var xy plotter.XYs
			for _, pt := range pts {
				if pt.Dialect == d && pt.Batched == batched && pt.StepsPerRun == 0 {
					xy = append(xy, plotter.XY{X: float64(pt.Runs), Y: max(pt.Statements, 0.5)})
				}
			}
			if len(xy) == 0 {
				continue
			}
			name := d + " batched"
			if !batched {
				name = d + " one heartbeat per run"
			}
			args = append(args, name, xy)
		}
	}
	if len(args) == 0 {
		return nil
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	// The target was set for 1,000 runs; past engine.MaxBatch a round
	// needs a statement more per table per chunk (heartbeat-chunks.svg).
	target := plotter.NewFunction(func(float64) float64 { return 10 })
	target.XMin, target.XMax = p.X.Min, 1000
	target.Color = color.RGBA{R: 200, A: 255}
	target.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(target)
	p.Legend.Add("target up to 1,000 runs: 10", target)
	p.Y.Min, p.Y.Max = 1, p.Y.Max*30 // room for the legend above the lines
	p.Legend.YOffs = -vg.Points(16)
	return p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "heartbeat.svg"))
}

// heartbeatChunksChart draws the batched heartbeat from 1,000 runs in
// flight up, on linear axes, with the statements a round needs by
// construction (one per table per engine.MaxBatch leases, and the interrupt
// read): heartbeat-chunks.svg.
func heartbeatChunksChart(dir string, pts []heartbeatPoint) error {
	p := newPlot("batched heartbeat of many runs in flight (one process)", "runs in flight (session + request lease each)", "per heartbeat interval")
	var args []any
	most := 0
	for _, d := range dialectOrder {
		var st, rt plotter.XYs
		for _, pt := range pts {
			if pt.Dialect == d && pt.Batched && pt.StepsPerRun == 0 && pt.Runs >= engine.MaxBatch {
				st = append(st, plotter.XY{X: float64(pt.Runs), Y: pt.Statements})
				rt = append(rt, plotter.XY{X: float64(pt.Runs), Y: pt.RoundTrips})
				most = max(most, pt.Runs)
			}
		}
		if len(st) == 0 {
			continue
		}
		args = append(args, d+" statements", st)
		if d == "mysql" { // elsewhere round trips = statements
			args = append(args, d+" round trips (BEGIN/COMMIT per renewal)", rt)
		}
	}
	if len(args) == 0 {
		return nil
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	target := plotter.NewFunction(func(x float64) float64 { return 2*math.Ceil(x/engine.MaxBatch) + 1 })
	target.Samples = 4 * most / engine.MaxBatch * 50
	target.Color = color.RGBA{R: 200, A: 255}
	target.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(target)
	p.Legend.Add(fmt.Sprintf("by construction: 2 × ⌈runs / %d⌉ + 1", engine.MaxBatch), target)
	p.X.Min, p.X.Max = 0, float64(most)*1.02
	p.Y.Min, p.Y.Max = 0, p.Y.Max*1.5 // room for the legend
	p.Legend.YOffs = -vg.Points(6)
	return p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "heartbeat-chunks.svg"))
}

func lockPathChart(dir string, pts []lockPathPoint) error {
	if len(pts) == 0 {
		return nil
	}
	p := newPlot("one new request: two model rounds, one tool call (lock path)", "", "latency (ms)")
	var names []string
	p50, p90, p99 := plotter.Values{}, plotter.Values{}, plotter.Values{}
	for _, d := range dialectOrder {
		for _, pt := range pts {
			if pt.Dialect == d {
				names = append(names, dialectTitle[d])
				p50 = append(p50, float64(pt.P50Micros)/1000)
				p90 = append(p90, float64(pt.P90Micros)/1000)
				p99 = append(p99, float64(pt.P99Micros)/1000)
			}
		}
	}
	w := vg.Points(18)
	for i, s := range []struct {
		name string
		v    plotter.Values
	}{{"p50", p50}, {"p90", p90}, {"p99", p99}} {
		b, err := plotter.NewBarChart(s.v, w)
		if err != nil {
			return err
		}
		b.Color = plotutil.Color(i)
		b.Offset = vg.Length(i-1) * w
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	p.NominalX(names...)
	p.Y.Min, p.Y.Max = 0, p.Y.Max*1.4
	return p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, "lockpath.svg"))
}

// throughputChart draws messages per second against concurrent sessions
// for the three designs on dialect d (flow-throughput-d.svg).
func throughputChart(dir, d string, pts []throughputPoint) error {
	byKind := map[string]plotter.XYs{}
	sessions := map[int]bool{}
	for _, pt := range pts {
		if pt.Dialect == d {
			byKind[pt.Kind] = append(byKind[pt.Kind], plotter.XY{X: float64(pt.Sessions), Y: pt.PerSec})
			sessions[pt.Sessions] = true
		}
	}
	if len(sessions) < 2 {
		return nil // no line to draw (and a log axis of one value has no width: -flow-sessions 1)
	}
	p := newPlot("new messages per second, one tool call each, "+dialectTitle[d], "concurrent sessions (each its own)", "messages per second (log)")
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = powersOfTwo{}, plot.LogTicks{Prec: -1}
	var args []any
	for _, k := range flowKinds {
		if xy, ok := byKind[k]; ok {
			args = append(args, k, xy)
		}
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	p.Y.Max *= 8 // room for the legend above the lines
	p.Legend.YOffs = -vg.Points(6)
	return p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, "flow-throughput-"+d+".svg"))
}

// flowSummary is the end-to-end table and its ratios.
func flowSummary(b *strings.Builder, rep report) {
	if len(rep.Throughput) == 0 {
		return
	}
	find := func(d, k string, s int) *throughputPoint {
		for i := range rep.Throughput {
			if p := &rep.Throughput[i]; p.Dialect == d && p.Kind == k && p.Sessions == s {
				return p
			}
		}
		return nil
	}
	ratio := func(a, o *throughputPoint) string {
		if a == nil || o == nil || o.PerSec == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f", a.PerSec/o.PerSec)
	}
	b.WriteString("\n## End to end: new messages per second through Runner.Handle\n\n" +
		"Each session sends one new message after another; the agent has no model latency and makes one tool call " +
		"that writes one ledger row. *article* is the article's design written by hand (its statements, tables of its shape, " +
		"two model rounds each between two ownership checks); *floor* is the ledger row alone in one transaction, no lock. " +
		"Client CPU is this process's CPU time per message (SQLite's engine included); server CPU is the database server's, all its processes " +
		"(the servers share the machine with the client: where client and server CPU together are near the machine's cores divided by the rate, " +
		"CPU bounds the throughput). Statistics are refreshed (ANALYZE) before each point, as autovacuum has them on a database in service, and each point follows an unmeasured warm-up at its concurrency (a quarter of its length, at least 250 ms), so that the pool's connections are open and have prepared their statements, as in a service in steady state.\n\n" +
		"| dialect | sessions | rowlease msg/s | ÷ article | ÷ floor | p50 / p99 rowlease | p50 / p99 article | p50 / p99 floor | statements (round trips) per message: rowlease / article / floor | client CPU per message: rowlease / article / floor | server CPU per message: rowlease / article / floor |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|\n")
	ms := func(p *throughputPoint) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprintf("%.2f / %.2f ms", float64(p.P50Micros)/1000, float64(p.P99Micros)/1000)
	}
	st := func(p *throughputPoint) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprintf("%.1f (%.1f)", p.Statements, p.RoundTrips)
	}
	cpu := func(p *throughputPoint) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprintf("%.0f", p.ClientCPUMicros)
	}
	srv := func(p *throughputPoint) string {
		if p == nil || p.ServerCPUMicros == 0 {
			return "—"
		}
		return fmt.Sprintf("%.0f", p.ServerCPUMicros)
	}
	for _, d := range dialectOrder {
		for _, pt := range rep.Throughput {
			if pt.Dialect != d || pt.Kind != flowLibrary {
				continue
			}
			a, f := find(d, flowArticle, pt.Sessions), find(d, flowFloor, pt.Sessions)
			fmt.Fprintf(b, "| %s | %d | %.0f | %s | %s | %s | %s | %s | %s / %s / %s | %s / %s / %s µs | %s / %s / %s µs |\n", d, pt.Sessions, pt.PerSec, ratio(&pt, a), ratio(&pt, f),
				ms(&pt), ms(a), ms(f), st(&pt), st(a), st(f), cpu(&pt), cpu(a), cpu(f), srv(&pt), srv(a), srv(f))
		}
	}
	var lines []string
	for _, d := range []string{"mysql", "postgres"} {
		l, a := find(d, flowLibrary, 64), find(d, flowArticle, 64)
		if l != nil && a != nil {
			lines = append(lines, fmt.Sprintf("%s %s", d, ratio(l, a)))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintf(b, "\nrowlease ÷ article at 64 sessions: %s.\n", strings.Join(lines, ", "))
	}
}

// mysqlDSNSummary is the interpolateParams tables: the lease pair and
// the whole flow under each MySQL setting.
func mysqlDSNSummary(b *strings.Builder, rep report) {
	if len(rep.MySQLDSN) == 0 {
		return
	}
	b.WriteString("\n## MySQL DSN: interpolateParams\n\n" +
		"go-sql-driver's default DSN leaves interpolateParams off: every statement with arguments is then prepared, run and closed " +
		"(a prepare is one round trip more; the close is a message with no reply). *PrepareAlways* keeps the Lease's statements " +
		"prepared instead (once per connection and statement, on the server, against max_prepared_stmt_count). " +
		"÷ is the rate over interpolateParams=true's at the same concurrency.\n\n" +
		"The rowlease acquire+release pair:\n\n" +
		"| workers | MySQL setting | pairs/s | ÷ interpolateParams | p50 | p99 | round trips per pair | of which prepares |\n|---|---|---|---|---|---|---|---|\n")
	for _, p := range rep.MySQLDSN {
		base := "—"
		for _, o := range rep.MySQLDSN {
			if o.Workers == p.Workers && o.Mode == dsnInterpolate && o.PerSec > 0 {
				base = fmt.Sprintf("%.2f", p.PerSec/o.PerSec)
			}
		}
		mode := p.Mode
		if mode == "" { // a report.json from before the modes
			mode = map[bool]string{true: dsnInterpolate, false: dsnDefault}[p.Interpolate]
		}
		fmt.Fprintf(b, "| %d | %s | %.0f | %s | %.2f ms | %.2f ms | %.1f | %.1f |\n", p.Workers, mode, p.PerSec, base,
			float64(p.P50Micros)/1000, float64(p.P99Micros)/1000, p.RoundTrips, p.Prepares)
	}
	if len(rep.MySQLDSNFlow) == 0 {
		return
	}
	b.WriteString("\nOne new message through Runner.Handle (one tool call writing one ledger row):\n\n" +
		"| sessions | MySQL setting | msg/s | ÷ interpolateParams | p50 / p99 | statements (round trips) per message |\n|---|---|---|---|---|---|\n")
	for _, p := range rep.MySQLDSNFlow {
		mode := ""
		for m, k := range flowKindOf {
			if k == p.Kind {
				mode = m
			}
		}
		base := "—"
		for _, o := range rep.MySQLDSNFlow {
			if o.Sessions == p.Sessions && o.Kind == flowLibrary && o.PerSec > 0 {
				base = fmt.Sprintf("%.2f", p.PerSec/o.PerSec)
			}
		}
		fmt.Fprintf(b, "| %d | %s | %.0f | %s | %.2f / %.2f ms | %.1f (%.1f) |\n", p.Sessions, mode, p.PerSec, base,
			float64(p.P50Micros)/1000, float64(p.P99Micros)/1000, p.Statements, p.RoundTrips)
	}
}

// summary is the run's figures as Markdown: ratios first, as the README
// quotes them.
func summary(rep report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark report\n\nOne run of tools/benchreport (`make bench-report`), %s to %s (UTC), on one machine: compare the figures as ratios.\n\n",
		rep.Started.Format("2006-01-02 15:04"), rep.Finished.Format("15:04"))
	if len(rep.Locks) > 0 {
		b.WriteString("## Acquire+release, each worker its own lock\n\n| dialect | workers | rowlease pairs/s | ÷ two-UPDATE pair | ÷ native lock | rowlease p99 | pair p99 | native p99 |\n|---|---|---|---|---|---|---|---|\n")
	}
	find := func(d, k string, w int) *lockPoint {
		for i := range rep.Locks {
			if p := &rep.Locks[i]; p.Dialect == d && p.Kind == k && p.Workers == w {
				return p
			}
		}
		return nil
	}
	for _, d := range dialectOrder {
		for _, pt := range rep.Locks {
			if pt.Dialect != d || pt.Kind != kindLibrary {
				continue
			}
			pair := find(d, kindPair, pt.Workers)
			native := find(d, kindGetLock, pt.Workers)
			if native == nil {
				native = find(d, kindPgLock, pt.Workers)
			}
			ratio := func(o *lockPoint) string {
				if o == nil || o.PerSec == 0 {
					return "—"
				}
				return fmt.Sprintf("%.2f", pt.PerSec/o.PerSec)
			}
			p99 := func(o *lockPoint) string {
				if o == nil {
					return "—"
				}
				return fmt.Sprintf("%.2f ms", float64(o.P99Micros)/1000)
			}
			fmt.Fprintf(&b, "| %s | %d | %.0f | %s | %s | %s | %s | %s |\n", d, pt.Workers, pt.PerSec, ratio(pair), ratio(native), p99(&pt), p99(pair), p99(native))
		}
	}
	if len(rep.Heartbeat) > 0 {
		b.WriteString("\n## Heartbeat: statements (round trips) per interval\n\n| dialect | runs in flight | batched | one heartbeat per run | ratio |\n|---|---|---|---|---|\n")
	}
	for _, d := range dialectOrder {
		for _, bp := range rep.Heartbeat {
			if bp.Dialect != d || !bp.Batched || bp.StepsPerRun != 0 {
				continue
			}
			for _, up := range rep.Heartbeat {
				if up.Dialect == d && !up.Batched && up.Runs == bp.Runs && up.StepsPerRun == 0 {
					fmt.Fprintf(&b, "| %s | %d | %.1f (%.1f) | %.1f (%.1f) | 1 : %.0f |\n", d, bp.Runs, bp.Statements, bp.RoundTrips,
						up.Statements, up.RoundTrips, up.Statements/max(bp.Statements, 0.5))
				}
			}
		}
	}
	heartbeatSummary(&b, rep)
	if len(rep.LockPath) > 0 {
		b.WriteString("\n## Lock path of one new request (two model rounds, one tool call)\n\n| dialect | p50 | p90 | p99 | statements (side effect included) |\n|---|---|---|---|---|\n")
	}
	for _, d := range dialectOrder {
		for _, pt := range rep.LockPath {
			if pt.Dialect == d {
				fmt.Fprintf(&b, "| %s | %.2f ms | %.2f ms | %.2f ms | %.1f |\n", d, float64(pt.P50Micros)/1000, float64(pt.P90Micros)/1000, float64(pt.P99Micros)/1000, pt.Statements)
			}
		}
	}
	flowSummary(&b, rep)
	networkSummary(&b, rep)
	mysqlDSNSummary(&b, rep)
	return b.String()
}

// heartbeatSummary is the table of the batched heartbeat from 1,000 runs
// in flight up, and what steps add.
func heartbeatSummary(b *strings.Builder, rep report) {
	var sizes []int
	for _, p := range rep.Heartbeat {
		if p.Batched && p.StepsPerRun == 0 && p.Runs >= engine.MaxBatch && !slices.Contains(sizes, p.Runs) {
			sizes = append(sizes, p.Runs)
		}
	}
	if len(sizes) == 0 {
		return
	}
	slices.Sort(sizes)
	fmt.Fprintf(b, "\n## Runs in flight in one process, batched: statements / round trips per interval\n\n"+
		"A round renews the session and the request lease of every run with one statement per table per engine.MaxBatch (%d) leases, "+
		"and reads which runs were asked to stop once: 2 × ⌈runs / %d⌉ + 1 statements. On MySQL each renewal statement runs in a "+
		"READ COMMITTED transaction of its own (BEGIN and COMMIT: two round trips more). A recorded step (request.Run.Step) is one "+
		"UPDATE of the request row, no transaction: the last column has every run record one step per interval.\n\n", engine.MaxBatch, engine.MaxBatch)
	b.WriteString("| dialect |")
	for _, n := range sizes {
		fmt.Fprintf(b, " %d runs |", n)
	}
	b.WriteString(" with one step per run and interval |\n|---|")
	for range sizes {
		b.WriteString("---|")
	}
	b.WriteString("---|\n| statements per table per round (⌈runs / MaxBatch⌉) |")
	for _, n := range sizes {
		fmt.Fprintf(b, " %d |", (n+engine.MaxBatch-1)/engine.MaxBatch)
	}
	b.WriteString(" |\n")
	for _, d := range dialectOrder {
		find := func(n, steps int) *heartbeatPoint {
			for i := range rep.Heartbeat {
				if p := &rep.Heartbeat[i]; p.Dialect == d && p.Batched && p.Runs == n && p.StepsPerRun == steps {
					return p
				}
			}
			return nil
		}
		if find(sizes[0], 0) == nil {
			continue
		}
		fmt.Fprintf(b, "| %s |", d)
		for _, n := range sizes {
			if p := find(n, 0); p != nil {
				fmt.Fprintf(b, " %.1f / %.1f |", p.Statements, p.RoundTrips)
			} else {
				b.WriteString(" — |")
			}
		}
		step := "—"
		for _, p := range rep.Heartbeat {
			if p.Dialect != d || !p.Batched || p.StepsPerRun == 0 {
				continue
			}
			if base := find(p.Runs, 0); base != nil {
				per := (p.Statements - base.Statements) / float64(p.Runs*p.StepsPerRun)
				step = fmt.Sprintf("%d runs: %.1f / %.1f (%+.2f statements per step)", p.Runs, p.Statements, p.RoundTrips, per)
			}
		}
		fmt.Fprintf(b, " %s |\n", step)
	}
}

// networkChart draws, for dialect d, the library's messages per second
// divided by the article design's against the round-trip time, a line per
// concurrency, with the goal of 2.5 (flow-network-d.svg).
func networkChart(dir, d string, pts []networkPoint) error {
	means := networkMeans(pts)
	bySessions := map[int]plotter.XYs{}
	var order []int
	for _, p := range pts {
		if p.Dialect != d || p.Kind != flowLibrary || p.Round != 0 {
			continue
		}
		l := means[networkKey(d, p.RTTMicros, flowLibrary, p.Sessions)]
		a := means[networkKey(d, p.RTTMicros, flowArticle, p.Sessions)]
		if l == nil || a == nil || a.perSec == 0 {
			continue
		}
		if _, ok := bySessions[p.Sessions]; !ok {
			order = append(order, p.Sessions)
		}
		bySessions[p.Sessions] = append(bySessions[p.Sessions], plotter.XY{X: float64(p.RTTMicros) / 1000, Y: l.perSec / a.perSec})
	}
	if len(order) == 0 {
		return nil
	}
	slices.Sort(order)
	p := newPlot("rowlease ÷ article, messages per second, "+dialectTitle[d]+", with a network",
		"round-trip time added to the database (ms)", "rowlease ÷ article")
	var args []any
	for _, s := range order {
		xy := bySessions[s]
		sort.Slice(xy, func(i, j int) bool { return xy[i].X < xy[j].X })
		label := fmt.Sprintf("%d sessions", s)
		if s == 1 {
			label = "1 session"
		}
		args = append(args, label, xy)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	goal := plotter.NewFunction(func(float64) float64 { return 2.5 })
	goal.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(goal)
	p.Legend.Add("goal 2.5", goal)
	p.Y.Min = 0
	p.Y.Max = max(p.Y.Max, 2.5) * 1.4 // room for the legend above the lines
	return p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, "flow-network-"+d+".svg"))
}

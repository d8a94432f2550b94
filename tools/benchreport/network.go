package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/rowlease/rowlease/internal/testkit/netdelay"
	"github.com/rowlease/rowlease/lease"
)

// networkPoint is one end-to-end point (the designs of the flow part)
// measured with the database server a network away: the pool dials a
// proxy that delays every chunk of bytes by half the round-trip time each
// way (internal/testkit/netdelay).
type networkPoint struct {
	throughputPoint
	// RTTMicros is the round-trip time the proxy adds.
	RTTMicros int64
	// PingMicros is the median time of SELECT 1 through the proxy (the
	// round trip a statement gets: the added RTT, the timers' lateness and
	// the server's answer), DirectPingMicros without it.
	PingMicros, DirectPingMicros int64
	// Round is the round of the run (0 or 1): the designs are measured in
	// one order in the first and the reverse order in the second, so that
	// no design always goes first on a warm or cold machine.
	Round int
}

// serverAddr is the host:port of d's server, from the DSN the tests use.
func serverAddr(d lease.Dialect) (string, error) {
	switch d {
	case lease.MySQL:
		cfg, err := mysql.ParseDSN(os.Getenv("ROWLEASE_MYSQL_DSN"))
		if err != nil {
			return "", err
		}
		return cfg.Addr, nil
	case lease.Postgres:
		u, err := url.Parse(os.Getenv("ROWLEASE_POSTGRES_DSN"))
		if err != nil {
			return "", err
		}
		return u.Host, nil
	}
	return "", fmt.Errorf("%s has no server to put a network in front of", d)
}

// ping is the median time of n SELECT 1 on one connection dialling via
// ("" for the server itself).
func ping(ctx context.Context, d lease.Dialect, via string, n int) (time.Duration, error) {
	db, done, err := freshVia(ctx, d, nil, nil, via)
	if err != nil {
		return 0, err
	}
	defer done()
	db.SetMaxOpenConns(1)
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil { // opens the connection
		return 0, err
	}
	ts := make([]time.Duration, n)
	for i := range ts {
		t0 := time.Now()
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			return 0, err
		}
		ts[i] = time.Since(t0)
	}
	slices.Sort(ts)
	return ts[n/2], nil
}

// measureNetwork measures the flow's designs (flowKinds) on d through a
// proxy with each round-trip time of rtts, at each concurrency of
// sessions, in two rounds (the designs in one order, then the reverse).
func measureNetwork(ctx context.Context, d lease.Dialect, rtts []time.Duration, sessions []int, dur time.Duration, kinds []string) ([]networkPoint, error) {
	target, err := serverAddr(d)
	if err != nil {
		return nil, err
	}
	direct, err := ping(ctx, d, "", 200)
	if err != nil {
		return nil, fmt.Errorf("ping: %w", err)
	}
	var out []networkPoint
	for _, rtt := range rtts {
		pts, err := func() ([]networkPoint, error) {
			// RTT 0: the server itself, on loopback, measured in the same
			// run.
			via := ""
			if rtt > 0 {
				p, err := netdelay.Listen(target, rtt)
				if err != nil {
					return nil, err
				}
				defer p.Close()
				via = p.Addr()
			}
			through, err := ping(ctx, d, via, 200)
			if err != nil {
				return nil, fmt.Errorf("ping through the proxy: %w", err)
			}
			var pts []networkPoint
			for round := range 2 {
				order := slices.Clone(kinds)
				if round == 1 {
					slices.Reverse(order)
				}
				for _, k := range order {
					tps, err := measureThroughputVia(ctx, d, k, sessions, dur, via)
					if err != nil {
						return nil, fmt.Errorf("%s, rtt %v, round %d: %w", k, rtt, round, err)
					}
					for _, tp := range tps {
						pts = append(pts, networkPoint{throughputPoint: tp, RTTMicros: rtt.Microseconds(),
							PingMicros: through.Microseconds(), DirectPingMicros: direct.Microseconds(), Round: round})
					}
				}
			}
			return pts, nil
		}()
		if err != nil {
			return nil, err
		}
		out = append(out, pts...)
	}
	return out, nil
}

// parseDurations reads a comma-separated list of durations ("0,0.5ms,1ms").
func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		v, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a duration of 0 or more", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// networkMean is the mean of the rounds of one design at one point.
type networkMean struct {
	perSec, roundTrips float64
	p50, p99           float64 // milliseconds
	perRound           []float64
}

// networkMeans averages the rounds of each (dialect, RTT, kind, sessions).
func networkMeans(pts []networkPoint) map[string]*networkMean {
	out := map[string]*networkMean{}
	for _, p := range pts {
		k := networkKey(p.Dialect, p.RTTMicros, p.Kind, p.Sessions)
		m := out[k]
		if m == nil {
			m = &networkMean{}
			out[k] = m
		}
		m.perRound = append(m.perRound, p.PerSec)
		n := float64(len(m.perRound))
		m.perSec += (p.PerSec - m.perSec) / n
		m.roundTrips += (p.RoundTrips - m.roundTrips) / n
		m.p50 += (float64(p.P50Micros)/1000 - m.p50) / n
		m.p99 += (float64(p.P99Micros)/1000 - m.p99) / n
	}
	return out
}

func networkKey(d string, rtt int64, kind string, sessions int) string {
	return fmt.Sprintf("%s|%d|%s|%d", d, rtt, kind, sessions)
}

// networkSummary is the table of the network points: per dialect, RTT
// and concurrency, the library's rate (mean of the two rounds), its ratio
// to the article's design and to the floor (the ratio of the means, and
// each round's), latencies and round trips per message.
func networkSummary(b *strings.Builder, rep report) {
	if len(rep.Network) == 0 {
		return
	}
	means := networkMeans(rep.Network)
	type row struct {
		d        string
		rtt      int64
		sessions int
	}
	var rows []row
	pings := map[string][2]int64{}
	seen := map[row]bool{}
	for _, p := range rep.Network {
		r := row{p.Dialect, p.RTTMicros, p.Sessions}
		if p.Kind == flowLibrary && !seen[r] {
			seen[r] = true
			rows = append(rows, r)
		}
		pings[fmt.Sprintf("%s|%d", p.Dialect, p.RTTMicros)] = [2]int64{p.PingMicros, p.DirectPingMicros}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, c := rows[i], rows[j]
		if a.d != c.d {
			return slices.Index(dialectOrder, a.d) < slices.Index(dialectOrder, c.d)
		}
		if a.rtt != c.rtt {
			return a.rtt < c.rtt
		}
		return a.sessions < c.sessions
	})
	b.WriteString("\n## With a network: the database a round trip away\n\n" +
		"The three end-to-end designs (rowlease, the article's by hand, the floor; RTT 0: on loopback, in the same run), and with the pool dialling a proxy on loopback that delays every chunk of bytes by half the " +
		"round-trip time (RTT) each way, as a network between a service and its database would (internal/testkit/netdelay; " +
		"the proxy runs in the client's process, so CPU is not reported here). *ping* is the median SELECT 1 through the proxy " +
		"(and without it): the round trip a statement gets. Each point is the mean of two rounds, the designs measured in one order, " +
		"then the reverse; the ratio columns give the ratio of the means, then each round's.\n\n" +
		"| dialect | RTT (ping) | sessions | rowlease msg/s | ÷ article (rounds) | ÷ floor | p50 / p99 rowlease | p50 / p99 article | round trips per message: rowlease / article / floor |\n" +
		"|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		l := means[networkKey(r.d, r.rtt, flowLibrary, r.sessions)]
		a := means[networkKey(r.d, r.rtt, flowArticle, r.sessions)]
		f := means[networkKey(r.d, r.rtt, flowFloor, r.sessions)]
		ratio := func(o *networkMean) string {
			if o == nil || o.perSec == 0 {
				return "—"
			}
			s := fmt.Sprintf("%.2f", l.perSec/o.perSec)
			if len(o.perRound) == len(l.perRound) && len(o.perRound) > 1 {
				var each []string
				for i := range o.perRound {
					each = append(each, fmt.Sprintf("%.2f", l.perRound[i]/o.perRound[i]))
				}
				s += " (" + strings.Join(each, ", ") + ")"
			}
			return s
		}
		lat := func(m *networkMean) string {
			if m == nil {
				return "—"
			}
			return fmt.Sprintf("%.2f / %.2f ms", m.p50, m.p99)
		}
		rt := func(m *networkMean) string {
			if m == nil {
				return "—"
			}
			return fmt.Sprintf("%.1f", m.roundTrips)
		}
		pg := pings[fmt.Sprintf("%s|%d", r.d, r.rtt)]
		fmt.Fprintf(b, "| %s | %.1f ms (%.2f; direct %.2f) | %d | %.0f | %s | %s | %s | %s | %s / %s / %s |\n", r.d, float64(r.rtt)/1000,
			float64(pg[0])/1000, float64(pg[1])/1000, r.sessions, l.perSec, ratio(a), ratio(f), lat(l), lat(a), rt(l), rt(a), rt(f))
	}
}

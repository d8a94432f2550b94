package faults

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rowlease/rowlease/internal/retry"
)

// Kind is a kind of fault, as counted in a Report.
type Kind string

// The fault kinds.
const (
	// CutStatement: the next statement sent is cut. Either it reaches the
	// server and the connection is reset before the answer comes back (the
	// statement may have run), or the connection is reset before it is
	// forwarded (it did not run). The client cannot tell which.
	CutStatement Kind = "cut-statement"
	// CutCommit: the same for the next COMMIT.
	CutCommit Kind = "cut-commit"
	// Latency: every chunk in both directions is delayed for a while by a
	// fixed latency plus a random jitter.
	Latency Kind = "latency"
	// Blackhole: for a while nothing passes in either direction and new
	// connections hang (a partition); then traffic flows again (heal).
	Blackhole Kind = "blackhole"
	// Reset: every open connection is reset at once (a server that closed
	// them, a load balancer that dropped them).
	Reset Kind = "reset"
	// Restart: the database server is killed with SIGKILL and started again
	// on the same data (see Server).
	Restart Kind = "restart"
	// Cancel: an operation's context ends while its statement runs (the
	// fault a caller can inject on every dialect, SQLite included).
	Cancel Kind = "cancel"
	// Kill, Pause: a holder process is killed with SIGKILL, or stopped with
	// SIGSTOP past its TTL and continued (the crash matrix).
	Kill  Kind = "kill"
	Pause Kind = "pause"
)

// Proxy forwards TCP connections to a database server and injects faults
// into them on command (CutNextStatement, CutNextCommit, SetLatency,
// Blackhole, ResetAll) or at random (Injector). It counts the faults that
// took effect. Close stops it and joins every goroutine it started.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	links   map[*link]struct{}
	closed  bool
	heal    chan struct{} // non-nil while blackholed; closed on heal
	latency time.Duration
	jitter  time.Duration

	cutStmt, cutCommit atomic.Int64 // armed cuts

	counts sync.Map // Kind → *atomic.Int64
	wg     sync.WaitGroup
}

// link is one proxied connection: the client's and the server's side.
type link struct {
	client net.Conn
	once   sync.Once
	done   chan struct{}
	// mute drops everything the server sends from the moment a cut
	// fires: the answer to a cut statement never reaches the client.
	mute atomic.Bool

	mu     sync.Mutex
	server net.Conn // set once dialled
}

// connect sets the server side; it reports false (and closes it) when the
// link was reset meanwhile.
func (l *link) connect(server net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.done:
		server.Close()
		return false
	default:
	}
	l.server = server
	return true
}

// reset closes both sides with a TCP reset.
func (l *link) reset() {
	l.once.Do(func() {
		l.mu.Lock()
		close(l.done)
		server := l.server
		l.mu.Unlock()
		for _, c := range []net.Conn{l.client, server} {
			if c == nil {
				continue
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
		}
	})
}

// Listen starts a proxy on a free loopback port that forwards to target
// (host:port).
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, links: map[*link]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		l := &link{client: c, done: make(chan struct{})}
		if !p.track(l) {
			l.reset()
			continue
		}
		p.wg.Go(func() { p.serve(l) })
	}
}

func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

func (p *Proxy) serve(l *link) {
	defer p.untrack(l)
	defer l.reset()
	if !p.pass(l) { // a new connection hangs while blackholed
		return
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	server, err := d.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !l.connect(server) {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.forward(l, server, l.client, true) })
	wg.Go(func() { p.forward(l, l.client, server, false) })
	wg.Wait()
}

// pass waits while the proxy is blackholed. It reports false when the link
// was reset meanwhile.
func (p *Proxy) pass(l *link) bool {
	p.mu.Lock()
	heal := p.heal
	p.mu.Unlock()
	if heal == nil {
		return true
	}
	select {
	case <-heal:
		return true
	case <-l.done:
		return false
	}
}

func (p *Proxy) delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.latency
	if p.jitter > 0 {
		d += rand.N(p.jitter)
	}
	return d
}

// forward copies src to dst chunk by chunk, applying the faults. up is the
// client-to-server direction, where statements are recognised.
func (p *Proxy) forward(l *link, dst, src net.Conn, up bool) {
	defer l.reset()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if d := p.delay(); d > 0 {
				select {
				case <-time.After(d):
				case <-l.done:
					return
				}
			}
			if !p.pass(l) {
				return
			}
			if !up && l.mute.Load() {
				return
			}
			if up {
				if cut, kind := p.cutFor(chunk); cut {
					p.count(kind)
					l.mute.Store(true)
					if rand.IntN(2) == 0 {
						// Forward it: the server may run it; the answer is lost.
						_, _ = dst.Write(chunk)
						time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
					}
					return
				}
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

var (
	commitWord = []byte("commit")
	stmtWords  = [][]byte{[]byte("update"), []byte("insert"), []byte("select"), []byte("delete")}
)

// cutFor reports whether an armed cut applies to chunk, and disarms it.
func (p *Proxy) cutFor(chunk []byte) (bool, Kind) {
	if p.cutCommit.Load() == 0 && p.cutStmt.Load() == 0 {
		return false, ""
	}
	lower := bytes.ToLower(chunk)
	if bytes.Contains(lower, commitWord) && take(&p.cutCommit) {
		return true, CutCommit
	}
	for _, w := range stmtWords {
		if bytes.Contains(lower, w) && take(&p.cutStmt) {
			return true, CutStatement
		}
	}
	return false, ""
}

func take(n *atomic.Int64) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

func (p *Proxy) count(k Kind) { Count(&p.counts, k) }

// Count adds one to kind k in m (a map of Kind to *atomic.Int64).
func Count(m *sync.Map, k Kind) {
	v, _ := m.LoadOrStore(k, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// Counts returns how many faults of each kind took effect.
func (p *Proxy) Counts() map[Kind]int64 { return Snapshot(&p.counts) }

// Snapshot copies a map of Kind to *atomic.Int64.
func Snapshot(m *sync.Map) map[Kind]int64 {
	out := map[Kind]int64{}
	m.Range(func(k, v any) bool {
		out[k.(Kind)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// CutNextStatement arms a cut of the next statement (UPDATE, INSERT,
// SELECT or DELETE) that any connection sends.
func (p *Proxy) CutNextStatement() { p.cutStmt.Add(1) }

// CutNextCommit arms a cut of the next COMMIT that any connection sends.
func (p *Proxy) CutNextCommit() { p.cutCommit.Add(1) }

// Disarm drops the cuts armed and not yet taken.
func (p *Proxy) Disarm() {
	p.cutStmt.Store(0)
	p.cutCommit.Store(0)
}

// SetLatency delays every chunk by latency plus a random jitter below
// jitter; zeros switch it off.
func (p *Proxy) SetLatency(latency, jitter time.Duration) {
	p.mu.Lock()
	p.latency, p.jitter = latency, jitter
	p.mu.Unlock()
	if latency > 0 || jitter > 0 {
		p.count(Latency)
	}
}

// Blackhole stops all traffic, and new connections, until Heal.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.heal == nil && !p.closed {
		p.heal = make(chan struct{})
		Count(&p.counts, Blackhole)
	}
}

// Heal lets traffic through again after Blackhole.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.heal != nil {
		close(p.heal)
		p.heal = nil
	}
}

// ResetAll resets every open connection; new ones are accepted.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.reset()
	}
	p.count(Reset)
}

// Close stops the proxy: it heals, resets every connection, stops
// listening, and returns when every goroutine it started has ended. It is
// safe to call more than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.ln.Close()
	}
	if p.heal != nil {
		close(p.heal)
		p.heal = nil
	}
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.reset()
	}
	p.wg.Wait()
}

// InjectorConfig says how often an Injector strikes.
type InjectorConfig struct {
	// Every is the mean pause between two faults; default 100ms.
	Every time.Duration
	// Blackhole is the longest partition; default 400ms.
	Blackhole time.Duration
	// Restart, when set, restarts the database server now and then (one
	// fault in RestartOneIn); it must return when the server is up.
	Restart      func() error
	RestartOneIn int
}

// Inject strikes p with random faults until ctx ends, then heals it and
// switches latency off. Run it in a goroutine the caller owns and joins.
// It returns the first error of cfg.Restart, if any.
func (p *Proxy) Inject(ctx context.Context, cfg InjectorConfig) error {
	if cfg.Every <= 0 {
		cfg.Every = 100 * time.Millisecond
	}
	if cfg.Blackhole <= 0 {
		cfg.Blackhole = 400 * time.Millisecond
	}
	defer func() {
		p.Heal()
		p.SetLatency(0, 0)
		p.Disarm()
	}()
	sleep := func(d time.Duration) bool { return retry.Sleep(ctx, d) }
	for sleep(cfg.Every/2 + rand.N(cfg.Every)) {
		if cfg.Restart != nil && cfg.RestartOneIn > 0 && rand.IntN(cfg.RestartOneIn) == 0 {
			if err := cfg.Restart(); err != nil {
				return err
			}
			p.count(Restart)
			continue
		}
		switch rand.IntN(6) {
		case 0, 1:
			p.CutNextStatement()
		case 2:
			p.CutNextCommit()
		case 3:
			p.SetLatency(time.Duration(1+rand.IntN(5))*time.Millisecond, 5*time.Millisecond)
			ok := sleep(cfg.Every)
			p.SetLatency(0, 0)
			if !ok {
				return nil
			}
		case 4:
			p.Blackhole()
			ok := sleep(cfg.Blackhole/4 + rand.N(cfg.Blackhole))
			p.Heal()
			if !ok {
				return nil
			}
		case 5:
			p.ResetAll()
		}
	}
	return nil
}

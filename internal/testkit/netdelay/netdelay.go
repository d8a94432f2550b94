package netdelay

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Proxy forwards connections made to Addr to its target, each chunk
// delayed by half of RTT in each direction. Close stops it and joins its
// goroutines.
type Proxy struct {
	ln     net.Listener
	target string
	oneWay time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // accept, serve and the pipes' readers

	// line is the delay line: every chunk read, of every connection and
	// direction, in the order it was read. As every chunk waits the same
	// time, that is also the order in which they fall due, and one
	// goroutine (deliver) writes them all.
	line      chan chunk
	delivered chan struct{}
}

// chunk is bytes read from one side, to write to dst when due; with end
// set, dst is closed instead (its source has ended), after every chunk
// before it.
type chunk struct {
	dst net.Conn
	b   []byte
	due time.Time
	end bool
}

// Listen starts a proxy on a free loopback port that forwards to target
// (host:port) with the round-trip time rtt (0: no delay). rtt must not be
// negative.
func Listen(target string, rtt time.Duration) (*Proxy, error) {
	if rtt < 0 {
		return nil, errors.New("netdelay: negative round-trip time")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, oneWay: rtt / 2, conns: map[net.Conn]struct{}{},
		line: make(chan chunk, 1<<16), delivered: make(chan struct{})}
	go p.deliver()
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port, to dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// RTT is the round-trip time the proxy adds.
func (p *Proxy) RTT() time.Duration { return 2 * p.oneWay }

// Close stops accepting, closes every connection both ways, and waits for
// the proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	close(p.line)
	<-p.delivered
	return err
}

// track registers c to be closed by Close; false once Close has begun.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(client) {
			_ = client.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

// serve connects client to the target and reads each side into the delay
// line until both have ended. The connections are closed by the delay
// line (after what was read before the end) or by Close.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	defer p.untrack(server)
	var readers sync.WaitGroup
	readers.Go(func() { p.read(server, client) })
	readers.Go(func() { p.read(client, server) })
	readers.Wait()
}

// read puts what src sends on the delay line, for dst, each chunk due
// oneWay after it was read; when src ends (or fails), dst is closed once
// the chunks before have been written.
func (p *Proxy) read(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.line <- chunk{dst: dst, b: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.oneWay)}
		}
		if err != nil {
			p.line <- chunk{dst: dst, end: true, due: time.Now().Add(p.oneWay)}
			return
		}
	}
}

// deliver writes the delay line's chunks as they fall due. It sleeps with
// nanosleep(2), not a Go timer: the runtime's timers may wake a
// sub-millisecond sleep up to a millisecond late (the poller's timeout is
// in milliseconds), which would make a 0.2 ms round trip a 2 ms one. A
// chunk whose connection has failed is dropped, and the connection closed
// (the reader of its other direction then ends too).
func (p *Proxy) deliver() {
	defer close(p.delivered)
	// Its own thread, with a timer slack of 1 ns instead of the default
	// 50 µs, which every sleep would add.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	for c := range p.line {
		sleepUntil(c.due)
		if c.end {
			_ = c.dst.Close()
			continue
		}
		if _, err := c.dst.Write(c.b); err != nil {
			_ = c.dst.Close()
		}
	}
}

// prSetTimerSlack is prctl(2)'s PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// sleepUntil blocks its thread until t, to within the thread's timer
// slack.
func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(d.Nanoseconds())
		if err := syscall.Nanosleep(&ts, nil); err != nil && !errors.Is(err, syscall.EINTR) {
			return
		}
	}
}

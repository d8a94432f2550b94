package faults

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// echo starts a TCP echo server; it stops at cleanup.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back within d.
func roundTrip(c net.Conn, msg string, d time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

// TestProxyFaults checks each fault on an echo server: traffic passes;
// an armed cut resets the connection that sends the next statement (and
// only once); a blackhole holds traffic until Heal; ResetAll resets every
// connection; latency delays; the counts say what took effect.
func TestProxyFaults(t *testing.T) {
	p, err := Listen(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	c := dial(t, p)
	if got, err := roundTrip(c, "ping", 5*time.Second); err != nil || got != "ping" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}

	p.CutNextStatement()
	if _, err := roundTrip(c, "hello", 5*time.Second); err != nil {
		t.Fatalf("a cut armed for a statement hit other traffic: %v", err)
	}
	if _, err := roundTrip(c, "UPDATE t SET x = 1", 5*time.Second); err == nil {
		t.Fatal("the armed cut did not cut the statement")
	}
	c = dial(t, p)
	if got, err := roundTrip(c, "SELECT 1", 5*time.Second); err != nil || got != "SELECT 1" {
		t.Fatalf("a cut fired twice: %q, %v", got, err)
	}

	p.CutNextCommit()
	if _, err := roundTrip(c, "COMMIT", 5*time.Second); err == nil {
		t.Fatal("the armed cut did not cut the commit")
	}

	c = dial(t, p)
	p.Blackhole()
	if _, err := roundTrip(c, "lost?", 100*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackholed traffic came through: %v", err)
	}
	p.Heal()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || !bytes.Equal(buf, []byte("lost?")) {
		t.Fatalf("after Heal: %q, %v", buf, err)
	}

	p.SetLatency(50*time.Millisecond, time.Millisecond)
	start := time.Now()
	if _, err := roundTrip(c, "slow", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("latency of 50ms each way, round trip took %s", took)
	}
	p.SetLatency(0, 0)

	c2 := dial(t, p)
	if _, err := roundTrip(c2, "up", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.ResetAll()
	for _, cc := range []net.Conn{c, c2} {
		if _, err := roundTrip(cc, "gone?", 5*time.Second); err == nil {
			t.Fatal("a connection survived ResetAll")
		}
	}

	got := p.Counts()
	for k, want := range map[Kind]int64{CutStatement: 1, CutCommit: 1, Blackhole: 1, Latency: 1, Reset: 1} {
		if got[k] != want {
			t.Errorf("count of %s: %d, want %d (all: %v)", k, got[k], want, got)
		}
	}
}

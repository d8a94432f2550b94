package netdelay

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain checks, after every test and its clean-ups, that no goroutine
// of a proxy (or of the echo servers) is left.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is a server that writes back what it reads, until Close.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// TestRoundTripTakesTheRTT: a request and its answer through the proxy
// take at least the round-trip time, and bytes arrive as sent, in order,
// however they are cut into chunks.
func TestRoundTripTakesTheRTT(t *testing.T) {
	const rtt = 20 * time.Millisecond
	p, err := Listen(echo(t), rtt)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()
	require.Equal(t, rtt, p.RTT())
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	buf := make([]byte, 4)
	for range 3 {
		t0 := time.Now()
		_, err = c.Write([]byte("ping"))
		require.NoError(t, err)
		_, err = io.ReadFull(c, buf)
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(t0), rtt)
		require.Equal(t, "ping", string(buf))
	}
	// Many writes in a row: their delays overlap (the whole takes about
	// one round trip, not one per write), and the order is kept.
	var sent bytes.Buffer
	t0 := time.Now()
	for i := range 200 {
		b := []byte{byte(i), byte(i >> 8), 'x'}
		sent.Write(b)
		_, err := c.Write(b)
		require.NoError(t, err)
	}
	got := make([]byte, sent.Len())
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, sent.Bytes(), got)
	require.Less(t, time.Since(t0), 100*rtt, "the delays of chunks in flight overlap")
}

// TestCloseEndsConnections: Close ends the connections in flight and
// joins every goroutine (TestMain); a negative RTT is refused.
func TestCloseEndsConnections(t *testing.T) {
	_, err := Listen("127.0.0.1:1", -time.Millisecond)
	require.Error(t, err)
	p, err := Listen(echo(t), time.Millisecond)
	require.NoError(t, err)
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("x"))
	require.NoError(t, err)
	require.NoError(t, p.Close())
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(c)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the connection was ended, not left open: %v", err)
}

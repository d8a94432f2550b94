// Package outage gives tests a real database that they can make
// unreachable and reachable again: MySQL/MariaDB and PostgreSQL behind a
// TCP proxy that the test cuts (listener closed, every connection reset,
// new connections refused), SQLite in a directory that the test moves
// away (every new connection fails to open the file, SQLITE_CANTOPEN).
package outage

import (
	"database/sql"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// Proxy forwards TCP connections to a server. Its goroutines end when it
// is cut; Start cuts it at the test's cleanup.
type Proxy struct {
	t      testing.TB
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target
// (host:port).
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{t: t, target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("outage: listen: %v", err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.Cut)
	return p
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.pipe(c) })
		}
	})
}

// track registers c, or closes it and reports false once the proxy is cut.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) pipe(client net.Conn) {
	if !p.track(client) {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(server) {
		client.Close()
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(server, client)
	go cp(client, server)
	<-done
	client.Close()
	server.Close()
	<-done
}

// Cut makes the server unreachable: the listener closes (new connections
// are refused) and every open connection is reset, as by a server killed
// with SIGKILL. It returns when the proxy's goroutines have ended. It is
// safe to call more than once.
func (p *Proxy) Cut() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with a reset
		}
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	p.wg.Wait()
}

// Restore makes the server reachable again, on the same address.
func (p *Proxy) Restore() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("outage: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// DB is a fresh test database that can be cut off.
type DB struct {
	*sqlx.DB
	// Cut makes the database unreachable; Restore makes it reachable
	// again. Call them from the test's goroutine.
	Cut, Restore func()
}

// Open returns a fresh test database of dialect d (see testdb.Open) that
// the test can cut off: MySQL and PostgreSQL through a Proxy; SQLite in a
// directory that Cut moves away and Restore brings back, with no idle
// connections kept, so that every statement opens the file anew.
func Open(t testing.TB, d engine.Dialect) DB {
	t.Helper()
	var out DB
	open := func(driver, dsn string) (*sql.DB, error) {
		switch d {
		case engine.MySQL:
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				return nil, err
			}
			p := Start(t, cfg.Addr)
			cfg.Addr = p.Addr()
			out.Cut, out.Restore = p.Cut, p.Restore
			return sql.Open(driver, cfg.FormatDSN())
		case engine.Postgres:
			u, err := url.Parse(dsn)
			if err != nil {
				return nil, err
			}
			p := Start(t, u.Host)
			u.Host = p.Addr()
			out.Cut, out.Restore = p.Cut, p.Restore
			return sql.Open(driver, u.String())
		}
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		away := dir + ".away"
		out.Cut = func() {
			if err := os.Rename(dir, away); err != nil {
				t.Fatalf("outage: %v", err)
			}
		}
		out.Restore = func() {
			if err := os.Rename(away, dir); err != nil {
				t.Fatalf("outage: %v", err)
			}
		}
		db, err := sql.Open(driver, testdb.SQLiteDSN(filepath.Join(dir, "test.db")))
		if err != nil {
			return nil, err
		}
		db.SetMaxIdleConns(0)
		return db, nil
	}
	out.DB = testdb.OpenWith(t, d, open)
	return out
}

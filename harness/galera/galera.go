// Package galera opens databases on a throwaway MariaDB Galera cluster
// (scripts/galera.sh, make test-galera) with clients spread across its
// nodes, as a load balancer in front of a multi-primary cluster spreads
// them:
//
//   - PerConnection: each new pooled connection goes to the next node, so
//     concurrent goroutines (and consecutive statements that get different
//     connections) reach different nodes;
//   - PerStatement: every connection holds one connection to each node and
//     sends each statement outside a transaction to the next node in turn;
//     a transaction stays on the node it began on.
//
// The cluster's nodes are named by ROWLEASE_GALERA_DSNS: go-sql-driver
// DSNs, comma-separated, of a user that may create databases. Unset, the
// tests that need it skip.
package galera

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
)

// Env names the nodes' DSNs.
const Env = "ROWLEASE_GALERA_DSNS"

// Spread says how a pool's statements reach the nodes.
type Spread int

// The ways to spread.
const (
	PerConnection Spread = iota + 1
	PerStatement
)

// String returns "per-connection" or "per-statement".
func (s Spread) String() string {
	if s == PerStatement {
		return "per-statement"
	}
	return "per-connection"
}

// DSNs returns the nodes' DSNs, skipping the test when Env is unset.
func DSNs(t testing.TB) []string {
	t.Helper()
	v := os.Getenv(Env)
	if v == "" {
		t.Skipf("galera: %s not set (make test-galera starts a cluster)", Env)
	}
	return strings.Split(v, ",")
}

// Database creates a fresh database on the cluster (DDL replicates to
// every node before it returns) and returns each node's parsed DSN for
// it, with parseTime and interpolateParams, and extra settings (such as
// wsrep_sync_wait) added to every connection. It is dropped at cleanup.
func Database(t testing.TB, params map[string]string) []*mysql.Config {
	t.Helper()
	dsns := DSNs(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "rlg_" + hex.EncodeToString(b)
	admin, err := sql.Open("mysql", dsns[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("galera: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
		admin.Close()
	})
	// DDL replicates to every node before it commits, but a node may apply
	// it a moment later: wait until each node has.
	for _, d := range dsns {
		node, err := sql.Open("mysql", d)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		err = node.QueryRowContext(ctx, "SET STATEMENT wsrep_sync_wait=15 FOR SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n)
		node.Close()
		if err != nil || n != 1 {
			t.Fatalf("galera: database %s on %s: %d, %v", name, d, n, err)
		}
	}
	cfgs := make([]*mysql.Config, len(dsns))
	for i, d := range dsns {
		cfg, err := mysql.ParseDSN(d)
		if err != nil {
			t.Fatalf("galera: %s: %v", Env, err)
		}
		cfg.DBName = name
		cfg.ParseTime = true
		cfg.InterpolateParams = true
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		for k, v := range params {
			cfg.Params[k] = v
		}
		cfgs[i] = cfg
	}
	return cfgs
}

// Sync waits until every node has applied what the cluster committed so
// far (DDL included): one causal read on each.
func Sync(t testing.TB, cfgs []*mysql.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, cfg := range cfgs {
		node, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		var one int
		err = node.QueryRowContext(ctx, "SET STATEMENT wsrep_sync_wait=15 FOR SELECT 1").Scan(&one)
		node.Close()
		if err != nil {
			t.Fatalf("galera: sync %s: %v", cfg.Addr, err)
		}
	}
}

// Open returns a pool on the nodes of cfgs, spread as s, closed at cleanup.
func Open(t testing.TB, cfgs []*mysql.Config, s Spread) *sqlx.DB {
	t.Helper()
	cs := make([]driver.Connector, len(cfgs))
	for i, cfg := range cfgs {
		c, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	var conn driver.Connector = &perConnection{nodes: cs}
	if s == PerStatement {
		conn = &perStatement{nodes: cs}
	}
	db := sqlx.NewDb(sql.OpenDB(conn), "mysql")
	db.SetMaxOpenConns(40)
	t.Cleanup(func() { db.Close() })
	return db
}

// OpenNode returns a pool on node i alone.
func OpenNode(t testing.TB, cfgs []*mysql.Config, i int) *sqlx.DB {
	t.Helper()
	c, err := mysql.NewConnector(cfgs[i])
	if err != nil {
		t.Fatal(err)
	}
	db := sqlx.NewDb(sql.OpenDB(c), "mysql")
	db.SetMaxOpenConns(40)
	t.Cleanup(func() { db.Close() })
	return db
}

// perConnection sends each new connection to the next node.
type perConnection struct {
	nodes []driver.Connector
	next  atomic.Uint64
}

func (p *perConnection) Connect(ctx context.Context) (driver.Conn, error) {
	n := p.next.Add(1)
	return p.nodes[int(n%uint64(len(p.nodes)))].Connect(ctx)
}

func (p *perConnection) Driver() driver.Driver { return p.nodes[0].Driver() }

// perStatement makes connections that hold one connection per node.
type perStatement struct{ nodes []driver.Connector }

func (p *perStatement) Connect(ctx context.Context) (driver.Conn, error) {
	c := &rrConn{tx: -1}
	for _, n := range p.nodes {
		cn, err := n.Connect(ctx)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.conns = append(c.conns, cn)
	}
	return c, nil
}

func (p *perStatement) Driver() driver.Driver { return p.nodes[0].Driver() }

// rrConn sends each statement outside a transaction to the next node; a
// transaction stays on the node it began on. database/sql uses a
// connection from one goroutine at a time; mu guards it anyway.
type rrConn struct {
	mu    sync.Mutex
	conns []driver.Conn
	next  int
	tx    int // the node of the open transaction, or -1
}

func (c *rrConn) pick() driver.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tx >= 0 {
		return c.conns[c.tx]
	}
	k := c.next % len(c.conns)
	c.next++
	return c.conns[k]
}

func (c *rrConn) Prepare(q string) (driver.Stmt, error) { return c.pick().Prepare(q) }

func (c *rrConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	cn := c.pick()
	if p, ok := cn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, q)
	}
	return cn.Prepare(q)
}

func (c *rrConn) Close() error {
	var errs []error
	for _, cn := range c.conns {
		errs = append(errs, cn.Close())
	}
	return errors.Join(errs...)
}

func (c *rrConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *rrConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.mu.Lock()
	k := c.next % len(c.conns)
	c.next++
	c.tx = k
	cn := c.conns[k]
	c.mu.Unlock()
	tx, err := cn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		c.endTx()
		return nil, err
	}
	return &rrTx{c: c, tx: tx}, nil
}

func (c *rrConn) endTx() {
	c.mu.Lock()
	c.tx = -1
	c.mu.Unlock()
}

func (c *rrConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.pick().(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *rrConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.pick().(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *rrConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.conns[0].(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *rrConn) ResetSession(ctx context.Context) error {
	for _, cn := range c.conns {
		if r, ok := cn.(driver.SessionResetter); ok {
			if err := r.ResetSession(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *rrConn) IsValid() bool {
	for _, cn := range c.conns {
		if v, ok := cn.(driver.Validator); ok && !v.IsValid() {
			return false
		}
	}
	return true
}

type rrTx struct {
	c  *rrConn
	tx driver.Tx
}

func (t *rrTx) Commit() error {
	defer t.c.endTx()
	return t.tx.Commit()
}

func (t *rrTx) Rollback() error {
	defer t.c.endTx()
	return t.tx.Rollback()
}

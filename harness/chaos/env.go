package chaos

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/rowlease/rowlease/internal/testkit/faults"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// Env is a fresh test database of one dialect, reachable directly and
// through a fault proxy (MySQL and PostgreSQL).
type Env struct {
	Dialect lease.Dialect
	// Direct reaches the database without faults; Faulty through Proxy
	// (the same pool as Direct on SQLite, which has no proxy).
	Direct, Faulty *sqlx.DB
	Proxy          *faults.Proxy
	// DSN is the faulty pool's DSN, for worker processes (the file's
	// path on SQLite).
	DSN string
	// DirectDSN is Direct's DSN.
	DirectDSN string
	// WorkerDSNs, when set, are the DSNs worker processes of the crash
	// matrix use instead of DirectDSN, one after the other (clients
	// spread over a cluster's nodes, one node per process).
	WorkerDSNs []string
	// MultiPrimary sets lease.Options.MultiPrimary in the workers (a
	// Galera cluster).
	MultiPrimary bool
	nextWorker   atomic.Uint64
	// Quiesce returns nil once the server runs no statement sent by the
	// Faulty pool (a cut connection's statement may outlive the client's
	// error).
	Quiesce func(ctx context.Context) error
	app     string
}

// OpenEnv opens an Env for dialect d (see testdb.Open); everything is
// closed at the test's cleanup.
func OpenEnv(t testing.TB, d lease.Dialect) *Env {
	t.Helper()
	e := &Env{Dialect: d, app: "chaos_" + randHex(6)}
	var faultyDSN string
	e.Direct = testdb.OpenWith(t, d, func(driver, dsn string) (*sql.DB, error) {
		e.DirectDSN = dsn
		switch d {
		case lease.MySQL:
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				return nil, err
			}
			p, err := faults.Listen(cfg.Addr)
			if err != nil {
				return nil, err
			}
			e.Proxy = p
			cfg.Addr = p.Addr()
			faultyDSN = cfg.FormatDSN()
		case lease.Postgres:
			u, err := url.Parse(dsn)
			if err != nil {
				return nil, err
			}
			p, err := faults.Listen(u.Host)
			if err != nil {
				return nil, err
			}
			e.Proxy = p
			u.Host = p.Addr()
			q := u.Query()
			q.Set("application_name", e.app)
			u.RawQuery = q.Encode()
			faultyDSN = u.String()
		default:
			faultyDSN = dsn
		}
		return sql.Open(driver, dsn)
	})
	if e.Proxy != nil {
		t.Cleanup(e.Proxy.Close)
		db, err := sqlx.Open(e.Direct.DriverName(), faultyDSN)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(60)
		t.Cleanup(func() { db.Close() })
		e.Faulty = db
	} else {
		e.Faulty = e.Direct
	}
	e.DSN = faultyDSN
	e.Quiesce = e.quiesce
	return e
}

func (e *Env) quiesce(ctx context.Context) error {
	var q string
	switch e.Dialect {
	case lease.MySQL:
		q = "SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() AND command <> 'Sleep' AND id <> CONNECTION_ID()"
	case lease.Postgres:
		q = "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = '" + e.app + "' AND state <> 'idle'"
	default:
		return nil
	}
	for {
		var n int
		if err := e.Direct.QueryRowContext(ctx, q).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if !sleepCtx(ctx, 10e6) {
			return fmt.Errorf("chaos: %d statements still running: %w", n, ctx.Err())
		}
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

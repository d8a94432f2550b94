package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite"

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// DefaultDB is the database used when -db is not given: an SQLite file in
// the working directory, created on first run.
const DefaultDB = "sqlite:bookkeeper.db"

// SQLiteDSN is the modernc.org/sqlite DSN for a database file: rowlease's
// (WAL, a busy timeout so concurrent writers wait instead of failing,
// BEGIN IMMEDIATE for transactions: one that will write takes the write
// lock first) with a 20 s busy timeout, synchronous=NORMAL and foreign
// keys on, as rowlease's tests run it plus foreign_keys.
func SQLiteDSN(path string) string {
	return schema.SQLiteDSN(path, schema.SQLiteBusyTimeout(20*time.Second), schema.SQLiteSynchronousNormal(), schema.SQLiteForeignKeys())
}

// ParseDSN turns a -db value into a database/sql driver name, its DSN and
// the dialect:
//
//   - "sqlite:PATH" (also "sqlite://PATH" and "sqlite:///abs/path"): an
//     SQLite file, created if missing;
//   - "mysql://user:pass@host:port/db?param=value": MySQL or MariaDB,
//     converted to a go-sql-driver DSN with parseTime=true and
//     interpolateParams=true (other parameters are kept);
//   - "postgres://…" or "postgresql://…": PostgreSQL through pgx, as is.
func ParseDSN(s string) (driver, dsn string, d lease.Dialect, err error) {
	s = strings.TrimSpace(s)
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok {
		return "", "", 0, fmt.Errorf("store: -db %q: want sqlite:PATH, mysql://… or postgres://…", s)
	}
	switch strings.ToLower(scheme) {
	case "sqlite", "sqlite3":
		path := strings.TrimPrefix(rest, "//")
		if path == "" || strings.Contains(path, "?") {
			return "", "", 0, fmt.Errorf("store: -db %q: want sqlite:PATH (a file path without parameters)", s)
		}
		return "sqlite", SQLiteDSN(path), lease.SQLite, nil
	case "mysql", "mariadb":
		dsn, err := mysqlDSN(s)
		if err != nil {
			return "", "", 0, err
		}
		return "mysql", dsn, lease.MySQL, nil
	case "postgres", "postgresql":
		u, err := url.Parse(s)
		if err != nil {
			return "", "", 0, fmt.Errorf("store: -db: %w", err)
		}
		if u.Host == "" && u.Query().Get("host") == "" {
			return "", "", 0, fmt.Errorf("store: -db %q: no host", redact(s))
		}
		return "pgx", s, lease.Postgres, nil
	}
	return "", "", 0, fmt.Errorf("store: -db: unknown scheme %q: want sqlite:PATH, mysql://… or postgres://…", scheme)
}

// mysqlDSN converts mysql://user:pass@host:port/db?params to the
// go-sql-driver/mysql DSN format.
func mysqlDSN(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("store: -db: %w", err)
	}
	if u.Host == "" {
		return "", fmt.Errorf("store: -db %q: no host", redact(s))
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return "", fmt.Errorf("store: -db %q: want mysql://user:pass@host:port/dbname", redact(s))
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "3306")
	}
	cfg := mysql.NewConfig()
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", host, db
	if u.RawQuery != "" {
		// Let the driver parse the extra parameters (tls, charset, …).
		withParams, err := mysql.ParseDSN(cfg.FormatDSN() + "?" + u.RawQuery)
		if err != nil {
			return "", fmt.Errorf("store: -db: parameters: %w", err)
		}
		cfg = withParams
	}
	dsn, err := schema.MySQLDSN(cfg.FormatDSN()) // parseTime and interpolateParams
	if err != nil {
		return "", fmt.Errorf("store: -db: %w", err)
	}
	return dsn, nil
}

// Redact hides the password of a -db value, for logs and errors.
func Redact(s string) string { return redact(s) }

// redact hides a URL's password for error messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}

// Open opens and pings the database named by a -db value (see ParseDSN).
// The caller closes the Store.
func Open(ctx context.Context, dbURL string) (*Store, error) {
	driver, dsn, d, err := ParseDSN(dbURL)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", d, err)
	}
	if d == lease.SQLite {
		// Writers queue on SQLite's one write lock anyway; a bounded pool
		// keeps the number of waiting connections sane.
		db.SetMaxOpenConns(16)
	} else {
		db.SetMaxOpenConns(32)
	}
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		return nil, errors.Join(fmt.Errorf("store: connect to %s: %w", d, err), db.Close())
	}
	return New(db, d), nil
}

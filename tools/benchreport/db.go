package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// fresh is a new database (MySQL), schema (PostgreSQL) or file (SQLite)
// with close, which drops it. With c, every round trip is counted.
func fresh(ctx context.Context, d lease.Dialect, c *countdb.Counter) (*sqlx.DB, func(), error) {
	return freshWith(ctx, d, c, nil)
}

// freshWith is fresh with tweak applied to a MySQL pool's configuration
// (after the defaults of the report: parseTime, interpolateParams).
func freshWith(ctx context.Context, d lease.Dialect, c *countdb.Counter, tweak func(*mysql.Config)) (*sqlx.DB, func(), error) {
	return freshVia(ctx, d, c, tweak, "")
}

// freshVia is freshWith whose pool dials via (host:port, a delaying
// proxy of the server; "" dials the server itself). The database is
// created and dropped on a direct connection.
func freshVia(ctx context.Context, d lease.Dialect, c *countdb.Counter, tweak func(*mysql.Config), via string) (*sqlx.DB, func(), error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "rl_bench_" + hex.EncodeToString(b)
	open := func(driver, dsn string) (*sqlx.DB, error) {
		var db *sql.DB
		var err error
		if c != nil {
			db, err = countdb.OpenDB(driver, dsn, c)
		} else {
			db, err = sql.Open(driver, dsn)
		}
		if err != nil {
			return nil, err
		}
		return sqlx.NewDb(db, driver), nil
	}
	switch d {
	case lease.SQLite:
		dir, err := os.MkdirTemp("", "rowlease-bench")
		if err != nil {
			return nil, nil, err
		}
		dsn := schema.SQLiteDSN(filepath.Join(dir, "bench.db"), schema.SQLiteBusyTimeout(20*time.Second), schema.SQLiteSynchronousNormal())
		db, err := open("sqlite", dsn)
		if err != nil {
			return nil, nil, err
		}
		db.SetMaxOpenConns(8)
		return db, func() { db.Close(); os.RemoveAll(dir) }, nil
	case lease.MySQL:
		dsn := os.Getenv("ROWLEASE_MYSQL_DSN")
		admin, err := sql.Open("mysql", dsn)
		if err != nil {
			return nil, nil, err
		}
		if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			admin.Close()
			return nil, nil, err
		}
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, nil, err
		}
		cfg.DBName, cfg.ParseTime, cfg.InterpolateParams = name, true, true
		if via != "" {
			cfg.Addr = via
		}
		if tweak != nil {
			tweak(cfg)
		}
		db, err := open("mysql", cfg.FormatDSN())
		if err != nil {
			return nil, nil, err
		}
		db.SetMaxOpenConns(80)
		db.SetMaxIdleConns(80)
		return db, func() {
			db.Close()
			_, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name)
			admin.Close()
		}, nil
	case lease.Postgres:
		dsn := os.Getenv("ROWLEASE_POSTGRES_DSN")
		admin, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, nil, err
		}
		if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+name); err != nil {
			admin.Close()
			return nil, nil, err
		}
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, nil, err
		}
		q := u.Query()
		q.Set("search_path", name)
		// Names the report's connections in pg_stat_activity, so that the
		// server's share of a run can be told apart.
		q.Set("application_name", "rowlease-bench")
		u.RawQuery = q.Encode()
		if via != "" {
			u.Host = via
		}
		db, err := open("pgx", u.String())
		if err != nil {
			return nil, nil, err
		}
		db.SetMaxOpenConns(80)
		db.SetMaxIdleConns(80)
		return db, func() {
			db.Close()
			_, _ = admin.ExecContext(context.Background(), "DROP SCHEMA IF EXISTS "+name+" CASCADE")
			admin.Close()
		}, nil
	}
	return nil, nil, fmt.Errorf("unknown dialect %v", d)
}

package engine

import (
	"context"
	"database/sql"

	"github.com/rowlease/rowlease/internal/driver"
)

// DB is the small database interface every operation takes. *sql.DB,
// *sql.Tx, *sql.Conn, *sqlx.DB and *sqlx.Tx all satisfy it, so a lease can
// be taken, renewed or released inside a caller's own transaction.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// TxBeginner is a database that can also begin transactions (*sql.DB,
// *sqlx.DB).
type TxBeginner interface {
	DB
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// isNil reports whether db is nil or a typed nil inside the interface
// (the driver layer's rule, which a driver's probe applies too).
func isNil(db DB) bool { return driver.IsNil(db) }

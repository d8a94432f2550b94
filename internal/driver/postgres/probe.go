package postgres

import (
	"context"
	"database/sql"

	"github.com/rowlease/rowlease/internal/driver"
)

// Probe reads the expiry column's type and typmod: one row always, the
// type NULL when the table or the column is not found. The table is found
// with to_regclass, through the search path, as the lease statements find
// it.
func (Driver) Probe(ctx context.Context, db driver.DB, p driver.ProbeParams) (driver.ProbeResult, error) {
	var typ sql.NullString
	var mod sql.NullInt64
	q := "SELECT t.typname, a.atttypmod FROM (SELECT to_regclass('" + p.QuotedTable + "') AS r) x " +
		"LEFT JOIN pg_attribute a ON a.attrelid = x.r AND a.attname = '" + p.ExpiresAt + "' AND NOT a.attisdropped " +
		"LEFT JOIN pg_type t ON t.oid = a.atttypid"
	if err := db.QueryRowContext(ctx, q).Scan(&typ, &mod); err != nil {
		return driver.ProbeResult{}, err
	}
	if !typ.Valid {
		return driver.ProbeResult{}, driver.ErrColumnNotFound
	}
	return driver.ProbeResult{Checked: true, Type: typ.String, Precision: precision(typ.String, mod), Suggest: "timestamptz"}, nil
}

// precision is the fractional digits of a timestamp or timestamptz column
// (typmod -1 means the default, 6), or -1 for another type.
func precision(typ string, mod sql.NullInt64) int {
	switch typ {
	case "timestamptz", "timestamp":
		if !mod.Valid || mod.Int64 < 0 || mod.Int64 > 6 {
			return 6
		}
		return int(mod.Int64)
	}
	return -1
}

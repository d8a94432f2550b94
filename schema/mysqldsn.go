package schema

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// ErrDSN is matched (errors.Is) by the error of a DSN that MySQLDSN cannot
// use: not a go-sql-driver DSN, or a charset the driver will not
// interpolate into.
var ErrDSN = errors.New("schema: invalid DSN")

// MySQLDSN returns dsn, a go-sql-driver/mysql DSN
// ("user:pass@tcp(host:3306)/db?param=value"), with the two settings
// rowlease needs on MySQL and MariaDB, and its other parameters kept:
//
//   - parseTime=true, so that DATETIME(6) columns scan into time.Time;
//   - interpolateParams=true, so that a statement with arguments is one
//     round trip instead of a prepare, an execute and a close. Without it
//     every lease operation costs two round trips where one does (a lease
//     pair ran at 0.56–0.72 of the rate on the project's benchmark
//     report), and lease.New's first-use check logs a warning.
//
// Use it in one line where the pool is opened:
//
//	dsn, err := schema.MySQLDSN(os.Getenv("DATABASE_DSN"))
//	if err != nil { … }
//	db, err := sql.Open("mysql", dsn)
//
// loc stays what the DSN says (the driver's default is UTC, which the
// lease tables expect). The error, which matches ErrDSN, is the driver's
// own when dsn does not parse, or when its charset is one the driver
// refuses to interpolate into (big5, cp932, gb2312, gbk, sjis): use
// utf8mb4. It never contains the password.
func MySQLDSN(dsn string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrDSN, redactDSNError(err, dsn))
	}
	cfg.ParseTime = true
	cfg.InterpolateParams = true
	out := cfg.FormatDSN()
	// The driver refuses interpolation with an unsafe collation when it
	// parses a DSN, but not with an unsafe charset: check both here, so
	// that the refusal comes now rather than as a wrong query later.
	if _, err := mysql.ParseDSN(out); err != nil {
		return "", fmt.Errorf("%w: %v", ErrDSN, redactDSNError(err, dsn))
	}
	if _, query, ok := strings.Cut(out, "?"); ok {
		params, _ := url.ParseQuery(query)
		for _, name := range append(strings.Split(params.Get("charset"), ","), params.Get("collation")) {
			for _, unsafe := range unsafeCharsets {
				if name == unsafe || strings.HasPrefix(name, unsafe+"_") {
					return "", fmt.Errorf("%w: charset %s: the driver cannot interpolate arguments safely into it; use utf8mb4", ErrDSN, unsafe)
				}
			}
		}
	}
	return out, nil
}

// unsafeCharsets are the multi-byte character sets in which a backslash
// byte can end a character, so that escaping by the client is unsafe.
var unsafeCharsets = []string{"big5", "cp932", "gb2312", "gbk", "sjis"}

// redactDSNError is err, or a fixed text when err's message would repeat
// the DSN (and so its password).
func redactDSNError(err error, dsn string) error {
	if cfg, perr := mysql.ParseDSN(dsn); perr == nil && cfg.Passwd != "" && strings.Contains(err.Error(), cfg.Passwd) {
		return errors.New("the driver refused the DSN (its message, which quotes the password, is withheld)")
	}
	return err
}

package store

import (
	"fmt"
	"strings"
	"time"
)

// DateLayout is the layout of occur_date values ("YYYY-MM-DD").
const DateLayout = "2006-01-02"

// dbTime scans a timestamp as any of the drivers return it: time.Time
// (MySQL with parseTime, PostgreSQL) or text (SQLite, MySQL without
// parseTime).
type dbTime struct{ t time.Time }

var timeLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00"}

// Scan implements sql.Scanner.
func (d *dbTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		d.t = time.Time{}
		return nil
	case time.Time:
		d.t = x.UTC()
		return nil
	case []byte:
		return d.parse(string(x))
	case string:
		return d.parse(x)
	}
	return fmt.Errorf("store: cannot scan %T as a timestamp", v)
}

func (d *dbTime) parse(s string) error {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			d.t = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("store: cannot parse timestamp %q", s)
}

// dbDate scans a DATE (time.Time on MySQL and PostgreSQL, text on SQLite)
// as "YYYY-MM-DD".
type dbDate struct{ s string }

// Scan implements sql.Scanner.
func (d *dbDate) Scan(v any) error {
	switch x := v.(type) {
	case time.Time:
		d.s = x.Format(DateLayout)
		return nil
	case []byte:
		return d.parse(string(x))
	case string:
		return d.parse(x)
	}
	return fmt.Errorf("store: cannot scan %T as a date", v)
}

func (d *dbDate) parse(s string) error {
	s = strings.TrimSpace(s)
	if len(s) >= 10 {
		if _, err := time.Parse(DateLayout, s[:10]); err == nil {
			d.s = s[:10]
			return nil
		}
	}
	return fmt.Errorf("store: cannot parse date %q", s)
}

// dbAmount scans a DECIMAL (text on every driver here; pgx may hand back
// other representations, which fmt renders as their decimal text) and
// normalises it to two places.
type dbAmount struct{ s string }

// Scan implements sql.Scanner.
func (d *dbAmount) Scan(v any) error {
	var s string
	switch x := v.(type) {
	case []byte:
		s = string(x)
	case string:
		s = x
	case int64:
		s = fmt.Sprint(x)
	case float64:
		s = fmt.Sprintf("%.2f", x)
	default:
		return fmt.Errorf("store: cannot scan %T as an amount", v)
	}
	c, err := ParseAmount(s)
	if err != nil {
		return fmt.Errorf("store: stored amount: %w", err)
	}
	d.s = FormatCents(c)
	return nil
}

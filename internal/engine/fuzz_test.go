package engine_test

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// sentDB counts the statements that reach the database.
type sentDB struct {
	db   engine.DB
	sent atomic.Int64
}

func (s *sentDB) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	s.sent.Add(1)
	return s.db.ExecContext(ctx, q, args...)
}

func (s *sentDB) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	s.sent.Add(1)
	return s.db.QueryContext(ctx, q, args...)
}

func (s *sentDB) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	s.sent.Add(1)
	return s.db.QueryRowContext(ctx, q, args...)
}

var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// FuzzInput gives the lease API any key, holder, TTL, states, extra
// column and table and column names. Bad input must be a
// *engine.ValidationError before any SQL is sent; input that passes must
// give a correct result on a real SQLite table: a grant that Inspect,
// Renew and Release agree with, or a typed refusal. No error may carry
// the token.
func FuzzInput(f *testing.F) {
	f.Add("k1", "holder-1", int64(30_000_000), "", "", "", "fz", "k")
	f.Add("k1", "holder-1", int64(500), "", "", "", "fz", "k")
	f.Add("", "h", int64(1_000_000), "", "", "", "fz", "k")
	f.Add("k2", "", int64(1_000_000), "", "", "", "fz", "k")
	f.Add("k3", "h", int64(0), "", "", "", "fz", "k")
	f.Add("k3", "h", int64(-5), "", "", "", "fz", "k")
	f.Add("k3", "h", int64(86_400_000_001), "", "", "", "fz", "k")
	f.Add("k4", "h", int64(1_000_000), "a", "b", "note", "fz", "k")
	f.Add("k4", "h", int64(1_000_000), "a", "b", "holder", "fz", "k")
	f.Add("k5", "h", int64(1_000_000), "", "", "note; DROP TABLE fz", "fz", "k")
	f.Add("k6", "h\xff", int64(1_000_000), "", "", "", "fz", "k")
	f.Add(strings.Repeat("k", 192), "h", int64(1_000_000), "", "", "", "fz", "k")
	f.Add("k7", strings.Repeat("h", 192), int64(1_000_000), "", "", "", "fz", "k")
	f.Add("k8", "h", int64(1_000_000), strings.Repeat("s", 65), "", "", "fz", "k")
	f.Add("k9", "h", int64(1_000_000), "", "", "", "a.b.c", "k")
	f.Add("k9", "h", int64(1_000_000), "", "", "", "fz\"; --", "k`")
	f.Add("k9", "h", int64(1_000_000), "", "", "", "s.fz", "holder")

	db := testdb.Open(f, engine.SQLite)
	if _, err := db.Exec(`CREATE TABLE fz (k TEXT PRIMARY KEY, holder TEXT, token TEXT, expires_at INTEGER, generation INTEGER NOT NULL DEFAULT 0, state TEXT, note TEXT)`); err != nil {
		f.Fatal(err)
	}
	cols := engine.Columns{Key: "k", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation", State: "state"}
	l, err := engine.New[string](engine.SQLite, engine.MustTable("fz", cols), engine.Options{})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, key, holder string, ttlMicros int64, in, to, setCol, table, keyCol string) {
		// Identifiers: accepted only when every part is a plain identifier.
		c := cols
		c.Key = keyCol
		if _, err := engine.NewTable(table, c); err == nil {
			for _, p := range append(strings.Split(table, "."), keyCol) {
				if !identPart.MatchString(p) {
					t.Fatalf("NewTable accepted %q / %q", table, keyCol)
				}
			}
		} else if !isValidation(err) {
			t.Fatalf("NewTable(%q): %v is not a *ValidationError", table, err)
		}

		ttl := time.Duration(ttlMicros) * time.Microsecond
		o := engine.AcquireOptions{SetState: to}
		if in != "" || ttlMicros%2 == 0 {
			o.InStates = []string{in}
		}
		if setCol != "" {
			o.Set = []engine.Assignment{engine.Set(setCol, "v")}
		}
		s := &sentDB{db: db}
		ensureErr := l.Ensure(ctx, s, key, engine.CreateOptions{State: "a"})
		if isValidation(ensureErr) {
			if n := s.sent.Load(); n != 0 {
				t.Fatalf("Ensure(%q): %v after %d statements", key, ensureErr, n)
			}
		} else if ensureErr != nil {
			t.Fatalf("Ensure(%q): %v", key, ensureErr)
		}
		s = &sentDB{db: db}
		g, err := l.AcquireWith(ctx, s, key, holder, ttl, o)
		switch {
		case isValidation(err):
			if n := s.sent.Load(); n != 0 {
				t.Fatalf("AcquireWith: %v after %d statements", err, n)
			}
			return
		case err == nil:
		case errors.Is(err, engine.ErrHeld), errors.Is(err, engine.ErrState):
			return // a typed refusal (the row is held, or in another state)
		case setCol != "note" && strings.Contains(err.Error(), "no such column"):
			return // a valid identifier naming no column: the driver's error, as it is
		default:
			t.Fatalf("AcquireWith(%q, %q, %s, %+v): %v", key, holder, ttl, o, err)
		}
		if ensureErr != nil {
			t.Fatalf("Ensure rejected %q but AcquireWith took it", key)
		}
		st, err := l.Inspect(ctx, db, key)
		if err != nil || st.Holder != holder || !st.Held || st.Generation != g.Generation || (to != "" && st.State != to) {
			t.Fatalf("after AcquireWith(%q, %q): %+v, %v; grant generation %d", key, holder, st, err, g.Generation)
		}
		g2, err := l.Renew(ctx, db, g, ttl)
		if err != nil || g2.Generation != g.Generation {
			t.Fatalf("Renew: %v (generation %d, want %d)", err, g2.Generation, g.Generation)
		}
		if err := l.Release(ctx, db, g2); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if err := l.Release(ctx, db, g2); !errors.Is(err, engine.ErrLost) || strings.Contains(err.Error(), engine.Secret(g.Token)) {
			t.Fatalf("second Release: %v, want a lost error without the token", err)
		}
		// A zero grant is bad input: refused before any SQL.
		s = &sentDB{db: db}
		if _, err := l.Renew(ctx, s, engine.Grant[string]{Key: key}, ttl); !isValidation(err) || s.sent.Load() != 0 {
			t.Fatalf("Renew with a zero token: %v after %d statements", err, s.sent.Load())
		}
	})
}

func isValidation(err error) bool {
	var v *engine.ValidationError
	return err != nil && errors.As(err, &v) && errors.Is(err, engine.ErrInvalid)
}

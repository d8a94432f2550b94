package engine_test

// MySQL/MariaDB-only tests on a real server (ROWLEASE_MYSQL_DSN). They pin
// the database clock of one session with SET timestamp, so that several
// statements run in the same microsecond, and check the two mechanisms that
// keep a same-microsecond write from being taken for a loss when
// go-sql-driver/mysql counts changed rows (its default):
//
//   - the expiry assignment always changes the row for the same token (it
//     advances a stored expiry at or past now+ttl by one microsecond);
//   - when the row is left unchanged anyway (a column coarser than a
//     microsecond, declared with Options.ExpiryResolution), the generation
//     that LAST_INSERT_ID(expr) put in the OK packet tells a matched row
//     from no row.

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// pinnedClock is 2026-01-01 00:00:00.123456 UTC, as SET timestamp takes it.
const (
	pinnedClock     = "1767225600.123456"
	pinnedClockText = "2026-01-01 00:00:00.123456"
)

// mysqlPools opens pools on the test database in three modes, each built
// explicitly from the server DSN (not from testdb's choices):
//
//   - "changedRows": go-sql-driver's defaults — rows affected counts changed
//     rows, and statements with arguments are prepared on the server;
//   - "clientFoundRows": rows affected counts matched rows;
//   - "interpolateParams": changed rows, arguments interpolated by the
//     client (as the package doc recommends).
func mysqlPools(t *testing.T, db *sqlx.DB) map[string]*sql.DB {
	t.Helper()
	var name string
	require.NoError(t, db.Get(&name, "SELECT DATABASE()"))
	open := func(foundRows, interpolate bool) *sql.DB {
		cfg, err := mysql.ParseDSN(os.Getenv(testdb.MySQLEnv))
		require.NoError(t, err)
		cfg.DBName = name
		cfg.ParseTime = true
		cfg.ClientFoundRows = foundRows
		cfg.InterpolateParams = interpolate
		pool, err := sql.Open("mysql", cfg.FormatDSN())
		require.NoError(t, err)
		t.Cleanup(func() { pool.Close() })
		return pool
	}
	return map[string]*sql.DB{
		"changedRows":       open(false, false),
		"clientFoundRows":   open(true, false),
		"interpolateParams": open(false, true),
	}
}

// pinnedConn returns one session of pool with its clock pinned at
// pinnedClock, unpinned and returned to the pool at cleanup.
func pinnedConn(t *testing.T, ctx context.Context, pool *sql.DB) *sql.Conn {
	t.Helper()
	conn, err := pool.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = conn.ExecContext(context.Background(), "SET timestamp = DEFAULT")
		conn.Close()
	})
	_, err = conn.ExecContext(ctx, "SET timestamp = "+pinnedClock)
	require.NoError(t, err)
	require.Equal(t, pinnedClockText, myQueryString(t, ctx, conn, "SELECT CAST(UTC_TIMESTAMP(6) AS CHAR)"),
		"the session clock is pinned")
	return conn
}

func myQueryString(t *testing.T, ctx context.Context, db engine.DB, q string, args ...any) string {
	t.Helper()
	var s sql.NullString
	require.NoError(t, db.QueryRowContext(ctx, q, args...).Scan(&s), q)
	return s.String
}

func myQueryInt(t *testing.T, ctx context.Context, db engine.DB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRowContext(ctx, q, args...).Scan(&n), q)
	return n
}

func itemExpiry(t *testing.T, ctx context.Context, db engine.DB, key string) string {
	t.Helper()
	return myQueryString(t, ctx, db, "SELECT CAST(expires_at AS CHAR) FROM lease_item WHERE item_key = ?", key)
}

// TestMySQLSameMicrosecond: acquire, two renewals, a reentry and a kept
// transition all in the same microsecond on one session. Each is a success
// that keeps the generation, in both affected-rows modes; each changes the
// row (ROW_COUNT() is 1 even counting changed rows) by moving the expiry on
// by one microsecond.
func TestMySQLSameMicrosecond(t *testing.T) {
	t.Parallel()
	e := conformance.Setup(t, testdb.Open(t, engine.MySQL), engine.Options{})
	ctx := mysqlCtx(t)
	for mode, pool := range mysqlPools(t, e.DB) {
		t.Run(mode, func(t *testing.T) {
			key := "same-us-" + mode
			conn := pinnedConn(t, ctx, pool)
			require.NoError(t, e.Lease.Ensure(ctx, conn, key, engine.CreateOptions{}))

			g, err := e.Lease.Acquire(ctx, conn, key, "alice", 5*time.Second)
			require.NoError(t, err)
			require.Equal(t, int64(1), g.Generation)
			assert.Equal(t, "2026-01-01 00:00:05.123456", itemExpiry(t, ctx, conn, key))

			steps := []struct {
				name   string
				expiry string
				do     func() (engine.Grant[string], error)
			}{
				{"renew 1", "2026-01-01 00:00:05.123457", func() (engine.Grant[string], error) {
					return e.Lease.Renew(ctx, conn, g, 5*time.Second)
				}},
				{"renew 2", "2026-01-01 00:00:05.123458", func() (engine.Grant[string], error) {
					return e.Lease.Renew(ctx, conn, g, 5*time.Second)
				}},
				{"reentry", "2026-01-01 00:00:05.123459", func() (engine.Grant[string], error) {
					return e.Lease.AcquireWith(ctx, conn, key, "alice", 5*time.Second, engine.AcquireOptions{Token: g.Token})
				}},
				{"transition keep, same values", "2026-01-01 00:00:05.123460", func() (engine.Grant[string], error) {
					return e.Lease.Transition(ctx, conn, g, engine.ChangeOptions{From: []string{"processing"}, To: "processing",
						Keep: true, TTL: 5 * time.Second})
				}},
			}
			for _, s := range steps {
				g2, err := s.do()
				require.NoError(t, err, "%s in the same microsecond is not a loss", s.name)
				assert.Equal(t, int64(1), g2.Generation, s.name)
				assert.True(t, engine.SameToken(g2.Token, g.Token), s.name)
				assert.Equal(t, int64(1), myQueryInt(t, ctx, conn, "SELECT ROW_COUNT()"), "%s changed the row", s.name)
				assert.Equal(t, s.expiry, itemExpiry(t, ctx, conn, key), "%s advanced the expiry by 1µs", s.name)
			}
			gen, err := engine.Verify(ctx, e.Lease, conn, g, false)
			require.NoError(t, err)
			assert.Equal(t, int64(1), gen)
			require.NoError(t, e.Lease.Release(ctx, conn, g))
		})
	}
}

// secondTable is a user table whose expiry has whole seconds only
// (DATETIME, no fraction), mapped through NewTable, with an integer key.
const secondTableDDL = "CREATE TABLE job_run (run_id BIGINT NOT NULL PRIMARY KEY, owner VARCHAR(191) NULL, " +
	"secret CHAR(36) NULL, lease_until DATETIME NULL, fence BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB"

// secondTable creates job_run, whose expiry column is a DATETIME without
// fraction, and returns its spec.
func secondTable(t *testing.T, ctx context.Context, db engine.DB) engine.Table {
	t.Helper()
	_, err := db.ExecContext(ctx, secondTableDDL)
	require.NoError(t, err)
	tbl, err := engine.NewTable("job_run", engine.Columns{Key: "run_id", Holder: "owner", Token: "secret",
		ExpiresAt: "lease_until", Generation: "fence"})
	require.NoError(t, err)
	return tbl
}

// TestMySQLSecondPrecisionExpiry: on a DATETIME column (declared with
// Options.ExpiryResolution) a renewal in the same second stores the very
// value already there, so the row is unchanged and the default DSN reports
// 0 rows affected. The LAST_INSERT_ID fallback, kept for declared coarse
// columns only, must still see a success.
func TestMySQLSecondPrecisionExpiry(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, engine.MySQL)
	ctx := mysqlCtx(t)
	tbl := secondTable(t, ctx, db)
	l, err := engine.New[int64](engine.MySQL, tbl, engine.Options{ExpiryResolution: time.Second})
	require.NoError(t, err)

	for mode, pool := range mysqlPools(t, db) {
		t.Run(mode, func(t *testing.T) {
			key := map[string]int64{"changedRows": 1, "clientFoundRows": 2, "interpolateParams": 3}[mode]
			conn := pinnedConn(t, ctx, pool)
			require.NoError(t, l.Ensure(ctx, conn, key, engine.CreateOptions{}))
			g, err := l.Acquire(ctx, conn, key, "alice", 5*time.Second)
			require.NoError(t, err)
			require.Equal(t, int64(1), g.Generation)
			expiry := func() string {
				return myQueryString(t, ctx, conn, "SELECT CAST(lease_until AS CHAR) FROM job_run WHERE run_id = ?", key)
			}
			require.Equal(t, "2026-01-01 00:00:05", expiry())

			wantRowCount := int64(0) // changed rows: nothing changed
			if mode == "clientFoundRows" {
				wantRowCount = 1 // matched rows
			}
			for i := range 3 {
				g2, err := l.Renew(ctx, conn, g, 5*time.Second)
				require.NoError(t, err, "renew %d in the same second is not a loss", i)
				assert.Equal(t, int64(1), g2.Generation)
				assert.Equal(t, wantRowCount, myQueryInt(t, ctx, conn, "SELECT ROW_COUNT()"),
					"renew %d left the row as it was (the case under test)", i)
				assert.Equal(t, "2026-01-01 00:00:05", expiry())
			}
			g2, err := l.AcquireWith(ctx, conn, key, "alice", 5*time.Second, engine.AcquireOptions{Token: g.Token})
			require.NoError(t, err, "reentry in the same second is not a loss")
			assert.Equal(t, int64(1), g2.Generation)
			_, err = l.Transition(ctx, conn, g, engine.ChangeOptions{Keep: true, TTL: 5 * time.Second})
			require.NoError(t, err, "a kept transition in the same second is not a loss")

			// A stranger still loses, though the session's LAST_INSERT_ID is 1.
			require.Equal(t, int64(1), myQueryInt(t, ctx, conn, "SELECT LAST_INSERT_ID()"))
			stranger := g
			stranger.Token, err = engine.NewToken()
			require.NoError(t, err)
			_, err = l.Renew(ctx, conn, stranger, 5*time.Second)
			assert.ErrorIs(t, err, engine.ErrLost)
			require.NoError(t, l.Release(ctx, conn, g))
		})
	}
}

// TestMySQLLostAfterAcquireOnSameSession: right after a successful acquire
// the session's LAST_INSERT_ID() is the generation (non-zero). A write that
// then matches no row must still be a loss: MySQL sends insert id 0 in the
// OK packet when LAST_INSERT_ID(expr) was not evaluated in the statement.
func TestMySQLLostAfterAcquireOnSameSession(t *testing.T) {
	t.Parallel()
	e := conformance.Setup(t, testdb.Open(t, engine.MySQL), engine.Options{})
	ctx := mysqlCtx(t)
	for mode, pool := range mysqlPools(t, e.DB) {
		t.Run(mode, func(t *testing.T) {
			key := "lost-" + mode
			conn, err := pool.Conn(ctx)
			require.NoError(t, err)
			defer conn.Close()
			require.NoError(t, e.Lease.Ensure(ctx, conn, key, engine.CreateOptions{}))
			g, err := e.Lease.Acquire(ctx, conn, key, "alice", 30*time.Second)
			require.NoError(t, err)
			require.Equal(t, int64(1), g.Generation)

			forged := g
			forged.Token, err = engine.NewToken()
			require.NoError(t, err)
			missing := g
			missing.Key = "no-such-row"
			fails := []struct {
				name string
				do   func() error
			}{
				{"renew, wrong token", func() error { _, err := e.Lease.Renew(ctx, conn, forged, time.Second); return err }},
				{"renew, missing row", func() error { _, err := e.Lease.Renew(ctx, conn, missing, time.Second); return err }},
				{"release, wrong token", func() error { return e.Lease.Release(ctx, conn, forged) }},
				{"transition, wrong token", func() error {
					_, err := e.Lease.Transition(ctx, conn, forged, engine.ChangeOptions{To: "done"})
					return err
				}},
				{"transition keep, wrong state", func() error {
					_, err := e.Lease.Transition(ctx, conn, g, engine.ChangeOptions{From: []string{"error"}, Keep: true, TTL: time.Second})
					return err
				}},
			}
			for _, f := range fails {
				require.Equal(t, int64(1), myQueryInt(t, ctx, conn, "SELECT LAST_INSERT_ID()"),
					"precondition: the session's LAST_INSERT_ID is non-zero before %s", f.name)
				err := f.do()
				assert.ErrorIs(t, err, engine.ErrLost, f.name)
				if err != nil {
					assert.NotContains(t, err.Error(), engine.Secret(g.Token))
				}
			}
			// An acquire by someone else on the same session is a conflict,
			// not a grant read from the stale insert id.
			_, err = e.Lease.Acquire(ctx, conn, key, "bob", time.Second)
			assert.ErrorIs(t, err, engine.ErrHeld)
			// And the row is as the grant left it.
			st, err := e.Lease.Inspect(ctx, conn, key)
			require.NoError(t, err)
			assert.True(t, st.Held)
			assert.Equal(t, "alice", st.Holder)
			assert.Equal(t, "processing", st.State)
			_, err = engine.Verify(ctx, e.Lease, conn, g, false)
			require.NoError(t, err)
		})
	}
}

// TestMySQLExpiryExact: with the session clock pinned, the stored expiry is
// exactly the pinned time + TTL to the microsecond, Inspect's remaining
// time is exactly the TTL, and the expiry instant is exclusive.
func TestMySQLExpiryExact(t *testing.T) {
	t.Parallel()
	e := conformance.Setup(t, testdb.Open(t, engine.MySQL), engine.Options{})
	ctx := mysqlCtx(t)
	conn := pinnedConn(t, ctx, mysqlPools(t, e.DB)["changedRows"])
	set := func(ts string) {
		t.Helper()
		_, err := conn.ExecContext(ctx, "SET timestamp = "+ts)
		require.NoError(t, err)
	}
	updatedAt := func(key string) string {
		return myQueryString(t, ctx, conn, "SELECT CAST(updated_at AS CHAR) FROM lease_item WHERE item_key = ?", key)
	}

	require.NoError(t, e.Lease.Ensure(ctx, conn, "a", engine.CreateOptions{}))
	g, err := e.Lease.Acquire(ctx, conn, "a", "alice", 1234567*time.Microsecond)
	require.NoError(t, err)
	assert.Equal(t, "2026-01-01 00:00:01.358023", itemExpiry(t, ctx, conn, "a"))
	assert.Equal(t, pinnedClockText, updatedAt("a"))
	st, err := e.Lease.Inspect(ctx, conn, "a")
	require.NoError(t, err)
	assert.Equal(t, engine.Snapshot{Holder: "alice", Generation: 1, State: "processing", Held: true, Remaining: 1234567 * time.Microsecond}, st)

	// A longer renewal moves the expiry to exactly now + ttl.
	_, err = e.Lease.Renew(ctx, conn, g, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "2026-01-01 00:00:10.123456", itemExpiry(t, ctx, conn, "a"))
	// A shorter one never moves it back: it keeps it, plus 1µs.
	_, err = e.Lease.Renew(ctx, conn, g, 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "2026-01-01 00:00:10.123457", itemExpiry(t, ctx, conn, "a"))
	// A kept transition later on: now + ttl again.
	set("1767225601.5")
	_, err = e.Lease.Transition(ctx, conn, g, engine.ChangeOptions{Keep: true, TTL: 9500 * time.Millisecond, To: "review"})
	require.NoError(t, err)
	assert.Equal(t, "2026-01-01 00:00:11.000000", itemExpiry(t, ctx, conn, "a"))
	assert.Equal(t, "2026-01-01 00:00:01.500000", updatedAt("a"))

	// Create: now + ttl.
	set(pinnedClock)
	gc, err := e.Lease.Create(ctx, conn, "c", "carol", 2500*time.Millisecond, engine.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "2026-01-01 00:00:02.623456", itemExpiry(t, ctx, conn, "c"))

	// The expiry instant is exclusive: held 1µs before, free at it.
	set("1767225602.623455")
	_, err = engine.Verify(ctx, e.Lease, conn, gc, true)
	require.NoError(t, err)
	_, err = e.Lease.Acquire(ctx, conn, "c", "dave", time.Second)
	var ce *engine.ConflictError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, time.Microsecond, ce.Remaining)
	set("1767225602.623456")
	_, err = engine.Verify(ctx, e.Lease, conn, gc, true)
	assert.ErrorIs(t, err, engine.ErrLost)
	st, err = e.Lease.Inspect(ctx, conn, "c")
	require.NoError(t, err)
	assert.False(t, st.Held)
	gd, err := e.Lease.Acquire(ctx, conn, "c", "dave", time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(2), gd.Generation)
	assert.Equal(t, "2026-01-01 00:00:03.623456", itemExpiry(t, ctx, conn, "c"))
}

func mysqlCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestMySQLPreparedPath: on a pool, with PrepareAlways, the lease runs
// prepared statements (binary protocol); with the default it sends text. The generation still comes back through
// LAST_INSERT_ID in the OK packet, and a renewal in the same second on a
// second-precision column is still a success.
func TestMySQLPreparedPath(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, engine.MySQL)
	ctx := mysqlCtx(t)
	tbl := secondTable(t, ctx, db)
	l, err := engine.New[int64](engine.MySQL, tbl, engine.Options{ExpiryResolution: time.Second, Prepare: engine.PrepareAlways})
	require.NoError(t, err)
	pool := mysqlPools(t, db)["changedRows"]
	pool.SetMaxOpenConns(1) // one session: its pinned clock holds for every statement
	pool.SetMaxIdleConns(1)
	_, err = pool.ExecContext(ctx, "SET timestamp = "+pinnedClock)
	require.NoError(t, err)
	prepared := func() int64 {
		var name string
		var n int64
		require.NoError(t, pool.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &n))
		return n
	}
	require.NoError(t, l.Ensure(ctx, pool, 1, engine.CreateOptions{}))
	before := prepared()
	g, err := l.Acquire(ctx, pool, 1, "alice", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, int64(1), g.Generation)
	for i := range 3 {
		g2, err := l.Renew(ctx, pool, g, 5*time.Second)
		require.NoError(t, err, "renew %d in the same second", i)
		assert.Equal(t, int64(1), g2.Generation)
	}
	assert.Equal(t, before+2, prepared(), "acquire and renew were each prepared once, then reused")
	_, err = l.Acquire(ctx, pool, 1, "bob", 5*time.Second)
	assert.ErrorIs(t, err, engine.ErrHeld)
	require.NoError(t, l.Release(ctx, pool, g))
	require.ErrorIs(t, l.Release(ctx, pool, g), engine.ErrLost)
	require.NoError(t, l.Close())

	// The default sends text on MySQL: with interpolateParams (as the
	// package doc asks) nothing is prepared on the server.
	text := mysqlPools(t, db)["interpolateParams"]
	text.SetMaxOpenConns(1)
	textPrepared := func() int64 {
		var name string
		var n int64
		require.NoError(t, text.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &n))
		return n
	}
	def, err := engine.New[int64](engine.MySQL, tbl, engine.Options{ExpiryResolution: time.Second})
	require.NoError(t, err)
	before = textPrepared()
	g, err = def.Acquire(ctx, text, 1, "carol", 5*time.Second)
	require.NoError(t, err)
	_, err = def.Renew(ctx, text, g, 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, def.Release(ctx, text, g))
	assert.Equal(t, before, textPrepared(), "PrepareAuto prepares nothing on MySQL")
}

// fixedClock is a local clock that always reads the same instant, so that
// a grant's deadline minus its send time is exactly what the lease gave it.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// TestMySQLSecondPrecisionDeadline: MariaDB truncates now+TTL when it
// stores it in a DATETIME (no fraction) column, so the stored expiry can
// fall up to a second early. With the session clock pinned at .999999 s
// the loss is at its largest, and the time a grant trusts itself (deadline
// − send time) must still be a whole safety margin shorter than the time
// the database actually stored (stored expiry − database now). A TTL that
// the second would swallow is refused before any SQL.
func TestMySQLSecondPrecisionDeadline(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, engine.MySQL)
	ctx := mysqlCtx(t)
	tbl := secondTable(t, ctx, db)
	sent := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := engine.New[int64](engine.MySQL, tbl, engine.Options{Clock: fixedClock{sent}, ExpiryResolution: time.Second})
	require.NoError(t, err)
	assert.Equal(t, time.Second, engine.Resolution(l))

	conn, err := mysqlPools(t, db)["interpolateParams"].Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	const pinned = "1767225600.999999" // 2026-01-01 00:00:00.999999 UTC
	_, err = conn.ExecContext(ctx, "SET timestamp = "+pinned)
	require.NoError(t, err)
	dbNow := time.Date(2026, 1, 1, 0, 0, 0, 999999000, time.UTC)
	storedTTL := func(key int64) time.Duration {
		t.Helper()
		var s string
		require.NoError(t, conn.QueryRowContext(ctx, "SELECT CAST(lease_until AS CHAR) FROM job_run WHERE run_id = ?", key).Scan(&s))
		at, err := time.Parse(time.DateTime, s)
		require.NoError(t, err)
		return at.Sub(dbNow)
	}
	const ttl = 3 * time.Second
	margin := ttl / 10
	check := func(op string, g engine.Grant[int64], key int64) {
		t.Helper()
		trusted, stored := g.Deadline.Sub(sent), storedTTL(key)
		assert.LessOrEqual(t, trusted+margin, stored,
			"%s: the grant trusts itself for %s, the database stored %s: less than the margin %s apart", op, trusted, stored, margin)
	}

	require.NoError(t, l.Ensure(ctx, conn, 1, engine.CreateOptions{}))
	g, err := l.Acquire(ctx, conn, 1, "alice", ttl)
	require.NoError(t, err)
	require.Less(t, storedTTL(1), ttl-990*time.Millisecond, "the column lost most of a second (the case under test)")
	check("acquire", g, 1)
	_, err = conn.ExecContext(ctx, "SET timestamp = "+pinned)
	require.NoError(t, err)
	g, err = l.Renew(ctx, conn, g, ttl)
	require.NoError(t, err)
	check("renew", g, 1)
	require.NoError(t, l.Release(ctx, conn, g))
	gc, err := l.Create(ctx, conn, 2, "carol", ttl, engine.CreateOptions{})
	require.NoError(t, err)
	check("create", gc, 2)

	// TTL 1s with the default margin (100ms): the second would leave the
	// grant nothing to trust. Refused, nothing sent.
	var c countdb.Counter
	_, err = l.Acquire(ctx, c.Wrap(conn), 1, "bob", time.Second)
	var ve *engine.ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "ttl", ve.Field)
	assert.Zero(t, c.Count())
}

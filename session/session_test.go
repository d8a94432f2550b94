package session_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// setup applies the shipped schema on a fresh database and returns its
// dialect.
func setup(t *testing.T, db *sqlx.DB) lease.Dialect {
	t.Helper()
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	require.NoError(t, schema.Apply(bg(t), db, d))
	return d
}

// rowSnapshot reads columns of one row, normalised for comparison ([]byte
// becomes string), so a test can prove a statement changed nothing.
func rowSnapshot(t *testing.T, db *sqlx.DB, d lease.Dialect, table, keyCol, key string, cols ...string) []any {
	t.Helper()
	qt, err := engine.QuoteIdent(d, table)
	require.NoError(t, err)
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	q := d.Rebind("SELECT " + strings.Join(cols, ", ") + " FROM " + qt + " WHERE " + keyCol + " = ?")
	require.NoError(t, db.QueryRowContext(bg(t), q, key).Scan(ptrs...))
	for i, v := range vals {
		if b, ok := v.([]byte); ok {
			vals[i] = string(b)
		}
	}
	return vals
}

// lockRow names the lock columns of a table, for rowSnapshot.
type lockRow struct {
	table string
	cols  lease.Columns
	extra []string // user columns that must never change
}

func (r lockRow) snapshot(t *testing.T, db *sqlx.DB, d lease.Dialect, key string) []any {
	t.Helper()
	cols := append([]string{r.cols.Holder, r.cols.Token, r.cols.ExpiresAt, r.cols.Generation}, r.extra...)
	return rowSnapshot(t, db, d, r.table, r.cols.Key, key, cols...)
}

// cycle runs the acquire / busy / reenter / touch / release / takeover
// cycle on key, whose lock row exists and is free with generation 0.
func cycle(t *testing.T, db *sqlx.DB, d lease.Dialect, l *session.Locker, row lockRow, key string) {
	ctx := bg(t)
	const reqA, reqB = "request-a", "request-b"

	// A takes the free session: generation 1.
	gA, err := l.Acquire(ctx, db, key, reqA, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, key, gA.Key)
	assert.Equal(t, reqA, gA.Holder)
	assert.Equal(t, int64(1), gA.Generation)
	assert.False(t, engine.TokenIsZero(gA.Token))
	st, err := l.Inspect(ctx, db, key)
	require.NoError(t, err)
	assert.True(t, st.Held)
	assert.Equal(t, reqA, st.Holder)
	assert.Equal(t, int64(1), st.Generation)

	// B is refused and changes nothing.
	before := row.snapshot(t, db, d, key)
	_, err = l.Acquire(ctx, db, key, reqB, 5*time.Second)
	require.Error(t, err)
	assert.ErrorAs(t, err, new(*session.BusyError))
	assert.ErrorIs(t, err, lease.ErrHeld)
	var ce *lease.ConflictError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, reqA, ce.Holder)
	assert.Equal(t, key, ce.Key)
	assert.Equal(t, int64(1), ce.Generation)
	assert.Greater(t, ce.Remaining, time.Duration(0))
	assert.LessOrEqual(t, ce.Remaining, 5*time.Second)
	assert.NotContains(t, err.Error(), engine.Secret(gA.Token), "a token never appears in an error")
	assert.Equal(t, before, row.snapshot(t, db, d, key), "a refused acquire changes nothing")

	// A's fence passes inside a transaction while A holds the session.
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	f := l.Fence(gA)
	assert.Equal(t, "session", f.Name())
	assert.Equal(t, int64(1), f.Generation())
	require.NoError(t, f.Check(ctx, tx))
	require.NoError(t, tx.Commit())

	// A re-enters with its grant: same token, same generation, longer expiry.
	gA2, err := l.Reenter(ctx, db, gA, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(1), gA2.Generation, "reentry keeps the generation")
	assert.Equal(t, engine.Secret(gA.Token), engine.Secret(gA2.Token), "reentry keeps the token")
	assert.Equal(t, reqA, gA2.Holder)
	st, err = l.Inspect(ctx, db, key)
	require.NoError(t, err)
	assert.Greater(t, st.Remaining, 5*time.Second, "reentry extends the expiry")
	assert.Equal(t, int64(1), st.Generation)

	// Reentry under A's name but with another token is refused: the token,
	// not the holder's name, proves the grant.
	forged := gA
	forged.Token, err = engine.NewToken()
	require.NoError(t, err)
	before = row.snapshot(t, db, d, key)
	_, err = l.Reenter(ctx, db, forged, 60*time.Second)
	assert.ErrorAs(t, err, new(*session.BusyError))
	assert.Equal(t, before, row.snapshot(t, db, d, key))

	// Touch extends.
	gA3, err := l.Touch(ctx, db, gA2, 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(1), gA3.Generation)
	assert.True(t, gA3.Deadline.After(gA2.Deadline), "touch moves the trust deadline")
	st, err = l.Inspect(ctx, db, key)
	require.NoError(t, err)
	assert.Greater(t, st.Remaining, 10*time.Second, "touch extends the expiry")
	assert.Equal(t, reqA, st.Holder)

	// Release frees it.
	require.NoError(t, l.Release(ctx, db, gA3))
	st, err = l.Inspect(ctx, db, key)
	require.NoError(t, err)
	assert.False(t, st.Held)
	assert.Equal(t, "", st.Holder)
	assert.Equal(t, int64(1), st.Generation, "release keeps the generation")

	// B takes it: generation 2.
	gB, err := l.Acquire(ctx, db, key, reqB, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(2), gB.Generation)
	assert.Equal(t, reqB, gB.Holder)

	// The old A can neither extend nor free B's session.
	before = row.snapshot(t, db, d, key)
	_, err = l.Touch(ctx, db, gA3, 30*time.Second)
	assert.ErrorIs(t, err, lease.ErrLost)
	err = l.Release(ctx, db, gA3)
	assert.ErrorIs(t, err, lease.ErrLost)
	_, err = l.Reenter(ctx, db, gA3, 30*time.Second)
	assert.ErrorAs(t, err, new(*session.BusyError), "a stale reentry is a conflict")
	assert.Equal(t, before, row.snapshot(t, db, d, key), "the old holder changed nothing")
	st, err = l.Inspect(ctx, db, key)
	require.NoError(t, err)
	assert.True(t, st.Held)
	assert.Equal(t, reqB, st.Holder)
	assert.Equal(t, int64(2), st.Generation)

	// In a transaction, A's fence now fails and B's passes.
	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	err = l.Fence(gA3).Check(ctx, tx)
	assert.ErrorIs(t, err, lease.ErrLost)
	require.NoError(t, l.Fence(gB).Check(ctx, tx))
	assert.Equal(t, int64(2), l.Fence(gB).Generation())
	require.NoError(t, tx.Rollback())

	require.NoError(t, l.Release(ctx, db, gB))
}

var shippedRow = lockRow{table: schema.SessionTable, cols: session.Columns()}

func TestShippedTable(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		d := setup(t, db)
		ctx := bg(t)
		l, err := session.New(session.Config{Dialect: d})
		require.NoError(t, err)
		assert.Equal(t, schema.SessionTable, engine.TableOf(l.Lease()).Name())

		require.NoError(t, l.Create(ctx, db, "s1"))
		require.NoError(t, l.Create(ctx, db, "s1"), "Create is idempotent")
		cycle(t, db, d, l, shippedRow, "s1")
	})
}

func TestMissingRow(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		d := setup(t, db)
		ctx := bg(t)
		plain, err := session.New(session.Config{Dialect: d})
		require.NoError(t, err)
		auto, err := session.New(session.Config{Dialect: d, AutoCreate: true})
		require.NoError(t, err)

		// Without AutoCreate: ErrNotFound, and nothing is inserted.
		_, err = plain.Acquire(ctx, db, "missing", "request-a", 5*time.Second)
		assert.ErrorAs(t, err, new(*session.NotFoundError))
		assert.ErrorIs(t, err, lease.ErrNotFound)
		_, err = plain.Inspect(ctx, db, "missing")
		assert.ErrorAs(t, err, new(*session.NotFoundError))

		// With AutoCreate: created and acquired.
		g, err := auto.Acquire(ctx, db, "missing", "request-a", 5*time.Second)
		require.NoError(t, err)
		assert.Equal(t, int64(1), g.Generation)
		assert.Equal(t, "request-a", g.Holder)
		st, err := plain.Inspect(ctx, db, "missing")
		require.NoError(t, err)
		assert.True(t, st.Held)
		assert.Equal(t, "request-a", st.Holder)

		// AutoCreate does not turn a busy session into anything else.
		_, err = auto.Acquire(ctx, db, "missing", "request-b", 5*time.Second)
		assert.ErrorAs(t, err, new(*session.BusyError))

		// AcquireExisting never creates the row, AutoCreate or not.
		_, err = auto.AcquireExisting(ctx, db, "other", "request-c", 5*time.Second)
		assert.ErrorAs(t, err, new(*session.NotFoundError))
		_, err = plain.Inspect(ctx, db, "other")
		assert.ErrorAs(t, err, new(*session.NotFoundError), "nothing inserted")
		_, err = auto.AcquireExisting(ctx, db, "missing", "request-c", 5*time.Second)
		assert.ErrorAs(t, err, new(*session.BusyError))
	})
}

// articleDDL is the article's chat_session table, with the lock columns in
// the user's own table.
func articleDDL(d lease.Dialect) string {
	switch d {
	case lease.MySQL:
		return `CREATE TABLE chat_session (
			id VARCHAR(64) NOT NULL PRIMARY KEY,
			title VARCHAR(255) NOT NULL,
			current_request_id VARCHAR(191) NULL,
			lock_token VARCHAR(36) NULL,
			lock_expires_at DATETIME(6) NULL,
			lock_generation BIGINT NOT NULL DEFAULT 0)`
	case lease.Postgres:
		return `CREATE TABLE chat_session (
			id VARCHAR(64) NOT NULL PRIMARY KEY,
			title TEXT NOT NULL,
			current_request_id VARCHAR(191) NULL,
			lock_token VARCHAR(36) NULL,
			lock_expires_at TIMESTAMPTZ NULL,
			lock_generation BIGINT NOT NULL DEFAULT 0)`
	default:
		return `CREATE TABLE chat_session (
			id VARCHAR(64) NOT NULL PRIMARY KEY,
			title TEXT NOT NULL,
			current_request_id VARCHAR(191) NULL,
			lock_token VARCHAR(36) NULL,
			lock_expires_at INTEGER NULL,
			lock_generation BIGINT NOT NULL DEFAULT 0)`
	}
}

var articleColumns = lease.Columns{
	Key: "id", Holder: "current_request_id", Token: "lock_token",
	ExpiresAt: "lock_expires_at", Generation: "lock_generation",
}

func TestUserTable(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		d := setup(t, db)
		ctx := bg(t)
		_, err := db.ExecContext(ctx, articleDDL(d))
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, d.Rebind("INSERT INTO chat_session (id, title) VALUES (?, ?)"), "chat-1", "Lunch receipts")
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, d.Rebind("INSERT INTO chat_session (id, title) VALUES (?, ?)"), "chat-2", "Other")
		require.NoError(t, err)

		l, err := session.New(session.Config{Dialect: d, Table: "chat_session", Columns: articleColumns})
		require.NoError(t, err)
		row := lockRow{table: "chat_session", cols: articleColumns, extra: []string{"title"}}
		other := row.snapshot(t, db, d, "chat-2")

		cycle(t, db, d, l, row, "chat-1")

		var title string
		require.NoError(t, db.GetContext(ctx, &title, d.Rebind("SELECT title FROM chat_session WHERE id = ?"), "chat-1"))
		assert.Equal(t, "Lunch receipts", title, "the user's columns are untouched")
		assert.Equal(t, other, row.snapshot(t, db, d, "chat-2"), "other sessions are untouched")
		var n int
		require.NoError(t, db.GetContext(ctx, &n, "SELECT COUNT(*) FROM chat_session"))
		assert.Equal(t, 2, n)
		require.NoError(t, db.GetContext(ctx, &n, "SELECT COUNT(*) FROM "+schema.SessionTable))
		assert.Equal(t, 0, n, "the shipped table is not used")

		// A session the user never created: not found (no AutoCreate).
		_, err = l.Acquire(ctx, db, "chat-404", "request-a", 5*time.Second)
		assert.ErrorAs(t, err, new(*session.NotFoundError))
	})
}

func TestOneWinner(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		d := setup(t, db)
		ctx := bg(t)
		l, err := session.New(session.Config{Dialect: d, AutoCreate: true})
		require.NoError(t, err)
		require.NoError(t, l.Create(ctx, db, "existing"))

		// Once on an existing row, once on a row AutoCreate must insert.
		for _, key := range []string{"existing", "auto-created"} {
			t.Run(key, func(t *testing.T) {
				const n = 32
				var (
					wg     sync.WaitGroup
					mu     sync.Mutex
					wins   []session.Grant
					busy   int
					others []error
					start  = make(chan struct{})
				)
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						g, err := l.Acquire(ctx, db, key, "request-"+string(rune('A'+i)), 10*time.Second)
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil:
							wins = append(wins, g)
						case errors.As(err, new(*session.BusyError)):
							busy++
						default:
							others = append(others, err)
						}
					}()
				}
				close(start)
				wg.Wait()
				require.Empty(t, others)
				require.Len(t, wins, 1, "exactly one request wins the session")
				assert.Equal(t, n-1, busy)
				assert.Equal(t, int64(1), wins[0].Generation)
				st, err := l.Inspect(ctx, db, key)
				require.NoError(t, err)
				assert.Equal(t, wins[0].Holder, st.Holder)
				assert.Equal(t, int64(1), st.Generation)
			})
		}
	})
}

func TestNewInvalid(t *testing.T) {
	for name, cfg := range map[string]session.Config{
		"table name with a space": {Dialect: lease.SQLite, Table: "chat session", Columns: articleColumns},
		"table name injection":    {Dialect: lease.SQLite, Table: "chat_session; DROP TABLE x"},
		"zero dialect":            {},
		"unknown dialect":         {Dialect: lease.Dialect(42)},
		"missing column":          {Dialect: lease.MySQL, Table: "chat_session", Columns: lease.Columns{Key: "id", Holder: "h"}},
		"duplicate column": {Dialect: lease.Postgres, Table: "chat_session", Columns: lease.Columns{
			Key: "id", Holder: "h", Token: "h", ExpiresAt: "e", Generation: "g"}},
		"negative safety margin": {Dialect: lease.SQLite, Lease: lease.Options{SafetyMargin: -time.Second}},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := session.New(cfg)
			assert.ErrorIs(t, err, lease.ErrInvalid)
			var ve *engine.ValidationError
			assert.ErrorAs(t, err, &ve)
			assert.Nil(t, l)
		})
	}
	// The zero Columns means the shipped table's.
	l, err := session.New(session.Config{Dialect: lease.Postgres})
	require.NoError(t, err)
	assert.Equal(t, session.Columns(), engine.TableOf(l.Lease()).Columns())
}

// TestBadInputSendsNoSQL runs on a SQLite database without the schema: any
// statement sent would fail with "no such table", not ErrInvalid.
func TestBadInputSendsNoSQL(t *testing.T) {
	db := testdb.Open(t, lease.SQLite)
	l, err := session.New(session.Config{Dialect: lease.SQLite, AutoCreate: true})
	require.NoError(t, err)
	ctx := bg(t)
	long := strings.Repeat("k", 192)
	for name, call := range map[string]func() error{
		"nil db":         func() error { _, err := l.Acquire(ctx, nil, "s", "r", time.Second); return err },
		"empty key":      func() error { _, err := l.Acquire(ctx, db, "", "r", time.Second); return err },
		"long key":       func() error { _, err := l.Acquire(ctx, db, long, "r", time.Second); return err },
		"empty request":  func() error { _, err := l.Acquire(ctx, db, "s", "", time.Second); return err },
		"zero ttl":       func() error { _, err := l.Acquire(ctx, db, "s", "r", 0); return err },
		"zero grant":     func() error { return l.Release(ctx, db, session.Grant{}) },
		"touch zero":     func() error { _, err := l.Touch(ctx, db, session.Grant{Key: "s"}, time.Second); return err },
		"create nil db":  func() error { return l.Create(ctx, nil, "s") },
		"inspect no key": func() error { _, err := l.Inspect(ctx, db, ""); return err },
		"reenter no key": func() error { _, err := l.Reenter(ctx, db, session.Grant{}, time.Second); return err },
		"fence zero":     func() error { return l.Fence(session.Grant{}).Check(ctx, db) },
	} {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, call(), lease.ErrInvalid)
		})
	}
}

// TestColumnsCannotBeChanged (issue 8, item 14): the shipped columns are
// handed out as a copy; changing it does not change what New uses.
func TestColumnsCannotBeChanged(t *testing.T) {
	c := session.Columns()
	c.Key, c.Token = "changed", "changed"
	assert.Equal(t, schema.ColSessionKey, session.Columns().Key)
	assert.Equal(t, schema.ColToken, session.Columns().Token)
	l, err := session.New(session.Config{Dialect: lease.SQLite})
	require.NoError(t, err)
	assert.Equal(t, session.Columns(), engine.TableOf(l.Lease()).Columns())
}

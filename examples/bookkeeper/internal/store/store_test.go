package store

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/session"
)

func newStore(t *testing.T, db *sqlx.DB) *Store {
	t.Helper()
	d, err := lease.DetectDialect(db)
	require.NoError(t, err)
	s := New(db.DB, d)
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

func TestMigrateIsIdempotentAndSeeds(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		s := newStore(t, db)
		ctx := context.Background()
		require.NoError(t, s.Migrate(ctx), "a second run changes nothing")
		cats, err := s.Categories(ctx, s.DB)
		require.NoError(t, err)
		require.Len(t, cats, len(llm.Categories()))
		for i, c := range llm.Categories() {
			assert.Equal(t, c.Chinese, cats[i].Name)
			assert.Equal(t, c.English, cats[i].NameEN)
			assert.Equal(t, c.Kind, cats[i].Kind)
		}
		assert.Equal(t, OtherCategoryID, cats[len(cats)-1].ID)
	})
}

func TestLedgerRoundTrip(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		s := newStore(t, db)
		ctx := context.Background()
		locker, err := session.New(session.Config{Dialect: s.Dialect})
		require.NoError(t, err)
		sess, err := s.CreateSession(ctx, locker)
		require.NoError(t, err)
		got, err := s.GetSession(ctx, s.DB, sess.ID)
		require.NoError(t, err)
		assert.Equal(t, sess.LedgerID, got.LedgerID)
		assert.WithinDuration(t, time.Now(), got.CreatedAt, time.Minute)
		_, err = s.GetSession(ctx, s.DB, "nope")
		require.ErrorIs(t, err, ErrNotFound)

		tr := Transaction{ID: "t1", LedgerID: sess.LedgerID, SessionKey: sess.ID, RequestID: "r1", Type: TypeExpense,
			AmountCents: 3550, CategoryID: "food", Note: "午饭", OccurDate: "2024-05-01"}
		require.NoError(t, s.InsertTransaction(ctx, s.DB, tr))
		tr2 := tr
		tr2.ID = "t2"
		err = s.InsertTransaction(ctx, s.DB, tr2)
		require.Error(t, err)
		assert.True(t, lease.IsDuplicateKey(err), "UNIQUE (request_id): %v", err)
		tr3 := tr
		tr3.ID, tr3.RequestID, tr3.OccurDate, tr3.Type, tr3.AmountCents, tr3.CategoryID = "t3", "r3", "2024-05-03", TypeIncome, 800000, "salary"
		require.NoError(t, s.InsertTransaction(ctx, s.DB, tr3))

		got1, ok, err := s.TransactionByRequest(ctx, s.DB, "r1")
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, "35.50", got1.Amount())
		assert.Equal(t, "2024-05-01", got1.OccurDate)
		assert.Equal(t, "餐饮", got1.Category)
		assert.Equal(t, "Food", got1.CategoryEN)
		assert.WithinDuration(t, time.Now(), got1.CreatedAt, time.Minute)
		_, ok, err = s.TransactionByRequest(ctx, s.DB, "r2")
		require.NoError(t, err)
		assert.False(t, ok)

		all, err := s.Transactions(ctx, s.DB, TransactionFilter{LedgerID: sess.LedgerID})
		require.NoError(t, err)
		require.Len(t, all, 2)
		assert.Equal(t, "t3", all[0].ID, "newest occur_date first")
		some, err := s.Transactions(ctx, s.DB, TransactionFilter{LedgerID: sess.LedgerID, DateFrom: "2024-05-02", DateTo: "2024-05-03"})
		require.NoError(t, err)
		require.Len(t, some, 1)
		assert.Equal(t, "8000.00", some[0].Amount())
		some, err = s.Transactions(ctx, s.DB, TransactionFilter{LedgerID: sess.LedgerID, Type: TypeExpense, DateTo: "2024-05-01"})
		require.NoError(t, err)
		require.Len(t, some, 1)
		n, err := s.CountTransactions(ctx, s.DB)
		require.NoError(t, err)
		assert.Equal(t, 2, n)

		// Messages: deduplicated by (session, client request id, role).
		tx, err := s.DB.BeginTx(ctx, nil)
		require.NoError(t, err)
		for _, m := range []Message{
			{SessionKey: sess.ID, ClientRequestID: "c1", RequestID: "r1", Role: RoleUser, Content: "hi"},
			{SessionKey: sess.ID, ClientRequestID: "c1", RequestID: "r1", Role: RoleUser, Content: "hi again"},
			{SessionKey: sess.ID, ClientRequestID: "c1", RequestID: "r1", Role: RoleAssistant, Content: "hello"},
			{SessionKey: sess.ID, ClientRequestID: "c2", RequestID: "r2", Role: RoleUser, Content: "more"},
		} {
			_, err := s.AppendMessage(ctx, tx, m)
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit())
		ms, err := s.Messages(ctx, s.DB, sess.ID, 0)
		require.NoError(t, err)
		require.Len(t, ms, 3)
		assert.Equal(t, []string{"hi", "hello", "more"}, []string{ms[0].Content, ms[1].Content, ms[2].Content})
		assert.Equal(t, []int64{1, 2, 3}, []int64{ms[0].Seq, ms[1].Seq, ms[2].Seq})
		h, err := s.History(ctx, s.DB, sess.ID, "c2", 10)
		require.NoError(t, err)
		require.Len(t, h, 2)
		assert.Equal(t, "hi", h[0].Content)
		_, ok, err = s.FindMessage(ctx, s.DB, sess.ID, "c2", RoleAssistant)
		require.NoError(t, err)
		assert.False(t, ok)
	})
}

func TestParseAmount(t *testing.T) {
	for _, tc := range []struct {
		in    string
		cents int64
		ok    bool
	}{
		{"35", 3500, true}, {"23.5", 2350, true}, {"3.5e1", 3500, true}, {"0.01", 1, true}, {"35.00", 3500, true},
		{"999999999.99", MaxAmountCents, true}, {"1000000000", 0, false}, {"0", 0, false}, {"-5", 0, false},
		{"1.234", 0, false}, {"abc", 0, false}, {"", 0, false}, {"1e400", 0, false},
	} {
		c, err := ParseAmount(tc.in)
		if tc.ok {
			require.NoError(t, err, tc.in)
			assert.Equal(t, tc.cents, c, tc.in)
		} else {
			require.ErrorIs(t, err, ErrBadAmount, tc.in)
		}
	}
	assert.Equal(t, "35.50", FormatCents(3550))
	assert.Equal(t, "0.05", FormatCents(5))
}

func TestParseDSN(t *testing.T) {
	for _, tc := range []struct {
		in, driver, dsn string
		d               lease.Dialect
	}{
		{"sqlite:bookkeeper.db", "sqlite", SQLiteDSN("bookkeeper.db"), lease.SQLite},
		{"sqlite:///tmp/x.db", "sqlite", SQLiteDSN("/tmp/x.db"), lease.SQLite},
		{"mysql://u:p%40ss@db.example:3307/books", "mysql",
			"u:p@ss@tcp(db.example:3307)/books?interpolateParams=true&parseTime=true", lease.MySQL},
		{"mysql://u@localhost/books?tls=skip-verify", "mysql",
			"u@tcp(localhost:3306)/books?interpolateParams=true&parseTime=true&tls=skip-verify", lease.MySQL},
		{"postgres://u:p@localhost:5432/books?sslmode=disable", "pgx",
			"postgres://u:p@localhost:5432/books?sslmode=disable", lease.Postgres},
	} {
		driver, dsn, d, err := ParseDSN(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.driver, driver, tc.in)
		assert.Equal(t, tc.dsn, dsn, tc.in)
		assert.Equal(t, tc.d, d, tc.in)
	}
	for _, bad := range []string{"", "bookkeeper.db", "sqlite:", "mysql://host:3306", "mysql://u:secret@/db", "oracle://x", "postgres:///db"} {
		_, _, _, err := ParseDSN(bad)
		require.Error(t, err, bad)
		assert.NotContains(t, err.Error(), "secret")
	}
}

func TestRedact(t *testing.T) {
	assert.Equal(t, "mysql://u:xxxxx@h:3306/db", Redact("mysql://u:secret@h:3306/db"))
	assert.Equal(t, "sqlite:/tmp/x.db", Redact("sqlite:/tmp/x.db"))
}

func TestOpenSQLiteCreatesTheFile(t *testing.T) {
	path := t.TempDir() + "/b.db"
	s, err := Open(context.Background(), "sqlite:"+path)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(context.Background()))
	var mode string
	require.NoError(t, s.DB.QueryRow("PRAGMA journal_mode").Scan(&mode))
	assert.Equal(t, "wal", mode)
	var fk int
	require.NoError(t, s.DB.QueryRow("PRAGMA foreign_keys").Scan(&fk))
	assert.Equal(t, 1, fk)
	var n int
	require.ErrorIs(t, s.DB.QueryRow("SELECT 1 FROM ledger WHERE 1 = 0").Scan(&n), sql.ErrNoRows)
}

package lease_test

// go-sqlmock tests: they pin the exact SQL text and arguments of every
// operation in every dialect, and drive the error paths that a real server
// cannot be made to produce on demand (driver errors, duplicate-key errors
// of each driver, MySQL's matched-but-unchanged OK packet). They complement
// the real-database tests (conformance_test.go, mysql_test.go); they never
// replace them: that the SQL below does the right thing is proved there.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
)

// The database clock of each dialect, as the statements spell it.
const (
	myNow   = "UTC_TIMESTAMP(6)"
	pgNow   = "statement_timestamp()"
	liteNow = "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"
)

// mockTable is schema-qualified so that the pinned SQL also pins how a
// qualified name is quoted.
var mockTable = lease.MustTable("app.lease_item", lease.Columns{
	Key: "item_key", Holder: "holder", Token: "token", ExpiresAt: "expires_at",
	Generation: "generation", State: "state", UpdatedAt: "updated_at",
})

var mockDialects = []lease.Dialect{lease.MySQL, lease.Postgres, lease.SQLite}

// mockTok stands for the token in an argument list: the grant's token, or, for
// an operation that draws a fresh one, any canonical UUID — the same one at
// every position, and the one the returned grant carries.
type tokenMarker struct{}

var mockTok = tokenMarker{}

// tokenArg matches the token argument. With want empty it captures the
// first value it sees and then requires every later position to repeat it.
type tokenArg struct {
	want string
	got  *string
}

func (a tokenArg) Match(v driver.Value) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	if a.want != "" {
		return s == a.want
	}
	if _, err := lease.ParseToken(s); err != nil {
		return false
	}
	if *a.got == "" {
		*a.got = s
	}
	return *a.got == s
}

func mockArgs(args []any, tok tokenArg) []driver.Value {
	out := make([]driver.Value, len(args))
	for i, a := range args {
		if a == mockTok {
			out[i] = tok
			continue
		}
		out[i] = a
	}
	return out
}

type opKind int

const (
	kindUpdate  opKind = iota // UPDATE: Exec on MySQL, QueryRow … RETURNING elsewhere
	kindVerify                // SELECT generation
	kindInspect               // SELECT the status columns
	kindInsert                // INSERT: Exec everywhere
	kindRelease               // Release: Exec everywhere (no generation needed back)
)

// mockOp is one operation with its pinned SQL and arguments per dialect.
type mockOp struct {
	name      string
	kind      opKind
	freshTok  bool // the operation draws a new token (Acquire, Create)
	sql, args map[lease.Dialect]any
	// run calls the operation with grant g; it returns the generation it
	// reports (-1 when it reports none), the token of the grant it returns
	// (zero when none) and its error.
	run func(ctx context.Context, l *lease.Lease[string], db lease.DB, g lease.Grant[string]) (int64, lease.Token, error)
}

func mockOps() []mockOp {
	return []mockOp{
		{
			name: "Acquire", kind: kindUpdate, freshTok: true,
			sql: map[lease.Dialect]any{
				lease.MySQL: "UPDATE `app`.`lease_item` SET " +
					"`generation` = LAST_INSERT_ID(CASE WHEN `token` = ? THEN `generation` ELSE `generation` + 1 END), " +
					"`expires_at` = CASE WHEN `token` = ? AND `expires_at` IS NOT NULL AND `expires_at` >= (" + myNow + " + INTERVAL ? MICROSECOND) " +
					"THEN (`expires_at` + INTERVAL 1 MICROSECOND) ELSE (" + myNow + " + INTERVAL ? MICROSECOND) END, " +
					"`token` = ?, `holder` = ?, `updated_at` = " + myNow + " " +
					"WHERE `item_key` = ? AND (`token` IS NULL OR `token` = ? OR `expires_at` IS NULL OR `expires_at` <= " + myNow + ")",
				lease.Postgres: `UPDATE "app"."lease_item" SET ` +
					`"generation" = CASE WHEN "token" = $1 THEN "generation" ELSE "generation" + 1 END, ` +
					`"expires_at" = CASE WHEN "token" = $1 AND "expires_at" IS NOT NULL AND "expires_at" >= (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') ` +
					`THEN ("expires_at" + CAST(1 AS bigint) * INTERVAL '1 microsecond') ELSE (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') END, ` +
					`"token" = $1, "holder" = $3, "updated_at" = ` + pgNow + ` ` +
					`WHERE "item_key" = $4 AND ("token" IS NULL OR "token" = $1 OR "expires_at" IS NULL OR "expires_at" <= ` + pgNow + `) ` +
					`RETURNING "generation"`,
				lease.SQLite: `UPDATE "app"."lease_item" SET ` +
					`"generation" = CASE WHEN "token" = ? THEN "generation" ELSE "generation" + 1 END, ` +
					`"expires_at" = CASE WHEN "token" = ? AND "expires_at" IS NOT NULL AND "expires_at" >= (` + liteNow + ` + ?) ` +
					`THEN ("expires_at" + 1) ELSE (` + liteNow + ` + ?) END, ` +
					`"token" = ?, "holder" = ?, "updated_at" = ` + liteNow + ` ` +
					`WHERE "item_key" = ? AND ("token" IS NULL OR "token" = ? OR "expires_at" IS NULL OR "expires_at" <= ` + liteNow + `) ` +
					`RETURNING "generation"`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{mockTok, mockTok, int64(5000000), int64(5000000), mockTok, "alice", "k", mockTok},
				lease.Postgres: []any{mockTok, int64(5000000), "alice", "k"},
				lease.SQLite:   []any{mockTok, mockTok, int64(5000000), int64(5000000), mockTok, "alice", "k", mockTok},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, _ lease.Grant[string]) (int64, lease.Token, error) {
				g, err := l.Acquire(ctx, db, "k", "alice", 5*time.Second)
				return g.Generation, g.Token, err
			},
		},
		{
			// Reentry sends the acquire statement with the held token.
			name: "AcquireReentry", kind: kindUpdate,
			sql: nil, // same as Acquire; filled in below
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{mockTok, mockTok, int64(5000000), int64(5000000), mockTok, "alice", "k", mockTok},
				lease.Postgres: []any{mockTok, int64(5000000), "alice", "k"},
				lease.SQLite:   []any{mockTok, mockTok, int64(5000000), int64(5000000), mockTok, "alice", "k", mockTok},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, g lease.Grant[string]) (int64, lease.Token, error) {
				g2, err := l.AcquireWith(ctx, db, "k", "alice", 5*time.Second, lease.AcquireOptions{Token: g.Token})
				return g2.Generation, g2.Token, err
			},
		},
		{
			name: "AcquireWithStatesAndSet", kind: kindUpdate, freshTok: true,
			sql: map[lease.Dialect]any{
				lease.MySQL: "UPDATE `app`.`lease_item` SET " +
					"`generation` = LAST_INSERT_ID(CASE WHEN `token` = ? THEN `generation` ELSE `generation` + 1 END), " +
					"`expires_at` = CASE WHEN `token` = ? AND `expires_at` IS NOT NULL AND `expires_at` >= (" + myNow + " + INTERVAL ? MICROSECOND) " +
					"THEN (`expires_at` + INTERVAL 1 MICROSECOND) ELSE (" + myNow + " + INTERVAL ? MICROSECOND) END, " +
					"`token` = ?, `holder` = ?, `state` = ?, `note` = ?, `updated_at` = " + myNow + " " +
					"WHERE `item_key` = ? AND `state` IN (?, ?) AND (`token` IS NULL OR `token` = ? OR `expires_at` IS NULL OR `expires_at` <= " + myNow + ")",
				lease.Postgres: `UPDATE "app"."lease_item" SET ` +
					`"generation" = CASE WHEN "token" = $1 THEN "generation" ELSE "generation" + 1 END, ` +
					`"expires_at" = CASE WHEN "token" = $1 AND "expires_at" IS NOT NULL AND "expires_at" >= (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') ` +
					`THEN ("expires_at" + CAST(1 AS bigint) * INTERVAL '1 microsecond') ELSE (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') END, ` +
					`"token" = $1, "holder" = $3, "state" = $4, "note" = $5, "updated_at" = ` + pgNow + ` ` +
					`WHERE "item_key" = $6 AND "state" IN ($7, $8) AND ("token" IS NULL OR "token" = $1 OR "expires_at" IS NULL OR "expires_at" <= ` + pgNow + `) ` +
					`RETURNING "generation"`,
				lease.SQLite: `UPDATE "app"."lease_item" SET ` +
					`"generation" = CASE WHEN "token" = ? THEN "generation" ELSE "generation" + 1 END, ` +
					`"expires_at" = CASE WHEN "token" = ? AND "expires_at" IS NOT NULL AND "expires_at" >= (` + liteNow + ` + ?) ` +
					`THEN ("expires_at" + 1) ELSE (` + liteNow + ` + ?) END, ` +
					`"token" = ?, "holder" = ?, "state" = ?, "note" = ?, "updated_at" = ` + liteNow + ` ` +
					`WHERE "item_key" = ? AND "state" IN (?, ?) AND ("token" IS NULL OR "token" = ? OR "expires_at" IS NULL OR "expires_at" <= ` + liteNow + `) ` +
					`RETURNING "generation"`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{mockTok, mockTok, int64(5000000), int64(5000000), mockTok, "alice", "processing", "n1", "k", "queued", "error", mockTok},
				lease.Postgres: []any{mockTok, int64(5000000), "alice", "processing", "n1", "k", "queued", "error"},
				lease.SQLite:   []any{mockTok, mockTok, int64(5000000), int64(5000000), mockTok, "alice", "processing", "n1", "k", "queued", "error", mockTok},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, _ lease.Grant[string]) (int64, lease.Token, error) {
				g, err := l.AcquireWith(ctx, db, "k", "alice", 5*time.Second, lease.AcquireOptions{
					InStates: []string{"queued", "error"}, SetState: "processing", Set: []lease.Assignment{lease.Set("note", "n1")},
				})
				return g.Generation, g.Token, err
			},
		},
		{
			name: "Renew", kind: kindUpdate,
			sql: map[lease.Dialect]any{
				lease.MySQL: "UPDATE `app`.`lease_item` SET `generation` = LAST_INSERT_ID(`generation`), " +
					"`expires_at` = CASE WHEN `token` = ? AND `expires_at` IS NOT NULL AND `expires_at` >= (" + myNow + " + INTERVAL ? MICROSECOND) " +
					"THEN (`expires_at` + INTERVAL 1 MICROSECOND) ELSE (" + myNow + " + INTERVAL ? MICROSECOND) END, " +
					"`updated_at` = " + myNow + " WHERE `item_key` = ? AND `token` = ? AND `generation` = ?",
				lease.Postgres: `UPDATE "app"."lease_item" SET ` +
					`"expires_at" = CASE WHEN "token" = $1 AND "expires_at" IS NOT NULL AND "expires_at" >= (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') ` +
					`THEN ("expires_at" + CAST(1 AS bigint) * INTERVAL '1 microsecond') ELSE (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') END, ` +
					`"updated_at" = ` + pgNow + ` WHERE "item_key" = $3 AND "token" = $1 AND "generation" = $4 RETURNING "generation"`,
				lease.SQLite: `UPDATE "app"."lease_item" SET ` +
					`"expires_at" = CASE WHEN "token" = ? AND "expires_at" IS NOT NULL AND "expires_at" >= (` + liteNow + ` + ?) ` +
					`THEN ("expires_at" + 1) ELSE (` + liteNow + ` + ?) END, ` +
					`"updated_at" = ` + liteNow + ` WHERE "item_key" = ? AND "token" = ? AND "generation" = ? RETURNING "generation"`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{mockTok, int64(7000000), int64(7000000), "k", mockTok, int64(2)},
				lease.Postgres: []any{mockTok, int64(7000000), "k", int64(2)},
				lease.SQLite:   []any{mockTok, int64(7000000), int64(7000000), "k", mockTok, int64(2)},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, g lease.Grant[string]) (int64, lease.Token, error) {
				g2, err := l.Renew(ctx, db, g, 7*time.Second)
				return g2.Generation, g2.Token, err
			},
		},
		{
			name: "Release", kind: kindRelease,
			sql: map[lease.Dialect]any{
				lease.MySQL: "UPDATE `app`.`lease_item` SET `generation` = LAST_INSERT_ID(`generation`), " +
					"`expires_at` = NULL, `token` = NULL, `holder` = NULL, `updated_at` = " + myNow + " " +
					"WHERE `item_key` = ? AND `token` = ? AND `generation` = ?",
				lease.Postgres: `UPDATE "app"."lease_item" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, ` +
					`"updated_at" = ` + pgNow + ` WHERE "item_key" = $1 AND "token" = $2 AND "generation" = $3`,
				lease.SQLite: `UPDATE "app"."lease_item" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, ` +
					`"updated_at" = ` + liteNow + ` WHERE "item_key" = ? AND "token" = ? AND "generation" = ?`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{"k", mockTok, int64(2)},
				lease.Postgres: []any{"k", mockTok, int64(2)},
				lease.SQLite:   []any{"k", mockTok, int64(2)},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, g lease.Grant[string]) (int64, lease.Token, error) {
				return -1, lease.Token{}, l.Release(ctx, db, g)
			},
		},
		{
			name: "Delete", kind: kindRelease,
			sql: map[lease.Dialect]any{
				lease.MySQL:    "DELETE FROM `app`.`lease_item` WHERE `item_key` = ? AND `token` = ? AND `generation` = ?",
				lease.Postgres: `DELETE FROM "app"."lease_item" WHERE "item_key" = $1 AND "token" = $2 AND "generation" = $3`,
				lease.SQLite:   `DELETE FROM "app"."lease_item" WHERE "item_key" = ? AND "token" = ? AND "generation" = ?`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{"k", mockTok, int64(2)},
				lease.Postgres: []any{"k", mockTok, int64(2)},
				lease.SQLite:   []any{"k", mockTok, int64(2)},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, g lease.Grant[string]) (int64, lease.Token, error) {
				return -1, lease.Token{}, l.Delete(ctx, db, g)
			},
		},
		{
			name: "TransitionKeep", kind: kindUpdate,
			sql: map[lease.Dialect]any{
				lease.MySQL: "UPDATE `app`.`lease_item` SET `generation` = LAST_INSERT_ID(`generation`), " +
					"`expires_at` = CASE WHEN `token` = ? AND `expires_at` IS NOT NULL AND `expires_at` >= (" + myNow + " + INTERVAL ? MICROSECOND) " +
					"THEN (`expires_at` + INTERVAL 1 MICROSECOND) ELSE (" + myNow + " + INTERVAL ? MICROSECOND) END, " +
					"`state` = ?, `note` = ?, `updated_at` = " + myNow + " WHERE `item_key` = ? AND `token` = ? AND `generation` = ? AND `state` IN (?)",
				lease.Postgres: `UPDATE "app"."lease_item" SET ` +
					`"expires_at" = CASE WHEN "token" = $1 AND "expires_at" IS NOT NULL AND "expires_at" >= (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') ` +
					`THEN ("expires_at" + CAST(1 AS bigint) * INTERVAL '1 microsecond') ELSE (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') END, ` +
					`"state" = $3, "note" = $4, "updated_at" = ` + pgNow + ` WHERE "item_key" = $5 AND "token" = $1 AND "generation" = $6 AND "state" IN ($7) RETURNING "generation"`,
				lease.SQLite: `UPDATE "app"."lease_item" SET ` +
					`"expires_at" = CASE WHEN "token" = ? AND "expires_at" IS NOT NULL AND "expires_at" >= (` + liteNow + ` + ?) ` +
					`THEN ("expires_at" + 1) ELSE (` + liteNow + ` + ?) END, ` +
					`"state" = ?, "note" = ?, "updated_at" = ` + liteNow + ` WHERE "item_key" = ? AND "token" = ? AND "generation" = ? AND "state" IN (?) RETURNING "generation"`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{mockTok, int64(3000000), int64(3000000), "review", "n2", "k", mockTok, int64(2), "processing"},
				lease.Postgres: []any{mockTok, int64(3000000), "review", "n2", "k", int64(2), "processing"},
				lease.SQLite:   []any{mockTok, int64(3000000), int64(3000000), "review", "n2", "k", mockTok, int64(2), "processing"},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, g lease.Grant[string]) (int64, lease.Token, error) {
				g2, err := l.Transition(ctx, db, g, lease.ChangeOptions{From: []string{"processing"}, To: "review",
					Keep: true, TTL: 3 * time.Second, Set: []lease.Assignment{lease.Set("note", "n2")}})
				return g2.Generation, g2.Token, err
			},
		},
		{
			name: "TransitionRelease", kind: kindUpdate,
			sql: map[lease.Dialect]any{
				lease.MySQL: "UPDATE `app`.`lease_item` SET `generation` = LAST_INSERT_ID(`generation`), " +
					"`expires_at` = NULL, `token` = NULL, `holder` = NULL, `state` = ?, `note` = ?, `updated_at` = " + myNow + " " +
					"WHERE `item_key` = ? AND `token` = ? AND `generation` = ? AND `state` IN (?, ?)",
				lease.Postgres: `UPDATE "app"."lease_item" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, ` +
					`"state" = $1, "note" = $2, "updated_at" = ` + pgNow + ` WHERE "item_key" = $3 AND "token" = $4 AND "generation" = $5 AND "state" IN ($6, $7) RETURNING "generation"`,
				lease.SQLite: `UPDATE "app"."lease_item" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, ` +
					`"state" = ?, "note" = ?, "updated_at" = ` + liteNow + ` WHERE "item_key" = ? AND "token" = ? AND "generation" = ? AND "state" IN (?, ?) RETURNING "generation"`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{"done", "n3", "k", mockTok, int64(2), "processing", "review"},
				lease.Postgres: []any{"done", "n3", "k", mockTok, int64(2), "processing", "review"},
				lease.SQLite:   []any{"done", "n3", "k", mockTok, int64(2), "processing", "review"},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, g lease.Grant[string]) (int64, lease.Token, error) {
				g2, err := l.Transition(ctx, db, g, lease.ChangeOptions{From: []string{"processing", "review"}, To: "done",
					Set: []lease.Assignment{lease.Set("note", "n3")}})
				return g2.Generation, g2.Token, err
			},
		},
		{
			name: "Verify", kind: kindVerify,
			sql: map[lease.Dialect]any{
				lease.MySQL:    "SELECT `generation` FROM `app`.`lease_item` WHERE `item_key` = ? AND `token` = ? AND `generation` = ? AND `expires_at` > " + myNow,
				lease.Postgres: `SELECT "generation" FROM "app"."lease_item" WHERE "item_key" = $1 AND "token" = $2 AND "generation" = $3 AND "expires_at" > ` + pgNow,
				lease.SQLite:   `SELECT "generation" FROM "app"."lease_item" WHERE "item_key" = ? AND "token" = ? AND "generation" = ? AND "expires_at" > ` + liteNow,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{"k", mockTok, int64(2)},
				lease.Postgres: []any{"k", mockTok, int64(2)},
				lease.SQLite:   []any{"k", mockTok, int64(2)},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, g lease.Grant[string]) (int64, lease.Token, error) {
				gen, err := l.Verify(ctx, db, g, false)
				return gen, lease.Token{}, err
			},
		},
		{
			// SQLite has no FOR UPDATE: the transaction's database lock does it.
			name: "VerifyLock", kind: kindVerify,
			sql: map[lease.Dialect]any{
				lease.MySQL:    "SELECT `generation` FROM `app`.`lease_item` WHERE `item_key` = ? AND `token` = ? AND `generation` = ? AND `expires_at` > " + myNow + " FOR UPDATE",
				lease.Postgres: `SELECT "generation" FROM "app"."lease_item" WHERE "item_key" = $1 AND "token" = $2 AND "generation" = $3 AND "expires_at" > ` + pgNow + ` FOR UPDATE`,
				lease.SQLite:   `SELECT "generation" FROM "app"."lease_item" WHERE "item_key" = ? AND "token" = ? AND "generation" = ? AND "expires_at" > ` + liteNow,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{"k", mockTok, int64(2)},
				lease.Postgres: []any{"k", mockTok, int64(2)},
				lease.SQLite:   []any{"k", mockTok, int64(2)},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, g lease.Grant[string]) (int64, lease.Token, error) {
				gen, err := l.Verify(ctx, db, g, true)
				return gen, lease.Token{}, err
			},
		},
		{
			name: "Inspect", kind: kindInspect,
			sql: map[lease.Dialect]any{
				lease.MySQL: "SELECT COALESCE(`holder`, ''), `generation`, COALESCE(`state`, ''), " +
					"CASE WHEN `token` IS NOT NULL AND `expires_at` > " + myNow + " THEN 1 ELSE 0 END, " +
					"CASE WHEN `expires_at` IS NULL THEN 0 ELSE TIMESTAMPDIFF(MICROSECOND, " + myNow + ", `expires_at`) END " +
					"FROM `app`.`lease_item` WHERE `item_key` = ?",
				lease.Postgres: `SELECT COALESCE("holder", ''), "generation", COALESCE("state", ''), ` +
					`CASE WHEN "token" IS NOT NULL AND "expires_at" > ` + pgNow + ` THEN 1 ELSE 0 END, ` +
					`CASE WHEN "expires_at" IS NULL THEN 0 ELSE CAST(FLOOR(EXTRACT(EPOCH FROM ("expires_at" - ` + pgNow + `)) * 1000000) AS bigint) END ` +
					`FROM "app"."lease_item" WHERE "item_key" = $1`,
				lease.SQLite: `SELECT COALESCE("holder", ''), "generation", COALESCE("state", ''), ` +
					`CASE WHEN "token" IS NOT NULL AND "expires_at" > ` + liteNow + ` THEN 1 ELSE 0 END, ` +
					`CASE WHEN "expires_at" IS NULL THEN 0 ELSE ("expires_at" - ` + liteNow + `) END ` +
					`FROM "app"."lease_item" WHERE "item_key" = ?`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{"k"},
				lease.Postgres: []any{"k"},
				lease.SQLite:   []any{"k"},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, _ lease.Grant[string]) (int64, lease.Token, error) {
				st, err := l.Inspect(ctx, db, "k")
				return st.Generation, lease.Token{}, err
			},
		},
		{
			name: "Create", kind: kindInsert, freshTok: true,
			sql: map[lease.Dialect]any{
				lease.MySQL: "INSERT INTO `app`.`lease_item` (`item_key`, `holder`, `token`, `expires_at`, `generation`, `updated_at`) " +
					"VALUES (?, ?, ?, (" + myNow + " + INTERVAL ? MICROSECOND), 1, " + myNow + ")",
				lease.Postgres: `INSERT INTO "app"."lease_item" ("item_key", "holder", "token", "expires_at", "generation", "updated_at") ` +
					`VALUES ($1, $2, $3, (` + pgNow + ` + CAST($4 AS bigint) * INTERVAL '1 microsecond'), 1, ` + pgNow + `)`,
				lease.SQLite: `INSERT INTO "app"."lease_item" ("item_key", "holder", "token", "expires_at", "generation", "updated_at") ` +
					`VALUES (?, ?, ?, (` + liteNow + ` + ?), 1, ` + liteNow + `)`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{"k", "alice", mockTok, int64(5000000)},
				lease.Postgres: []any{"k", "alice", mockTok, int64(5000000)},
				lease.SQLite:   []any{"k", "alice", mockTok, int64(5000000)},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, _ lease.Grant[string]) (int64, lease.Token, error) {
				g, err := l.Create(ctx, db, "k", "alice", 5*time.Second, lease.CreateOptions{})
				return g.Generation, g.Token, err
			},
		},
		{
			name: "CreateWithStateAndSet", kind: kindInsert, freshTok: true,
			sql: map[lease.Dialect]any{
				lease.MySQL: "INSERT INTO `app`.`lease_item` (`item_key`, `holder`, `token`, `expires_at`, `generation`, `state`, `note`, `updated_at`) " +
					"VALUES (?, ?, ?, (" + myNow + " + INTERVAL ? MICROSECOND), 1, ?, ?, " + myNow + ")",
				lease.Postgres: `INSERT INTO "app"."lease_item" ("item_key", "holder", "token", "expires_at", "generation", "state", "note", "updated_at") ` +
					`VALUES ($1, $2, $3, (` + pgNow + ` + CAST($4 AS bigint) * INTERVAL '1 microsecond'), 1, $5, $6, ` + pgNow + `)`,
				lease.SQLite: `INSERT INTO "app"."lease_item" ("item_key", "holder", "token", "expires_at", "generation", "state", "note", "updated_at") ` +
					`VALUES (?, ?, ?, (` + liteNow + ` + ?), 1, ?, ?, ` + liteNow + `)`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{"k", "alice", mockTok, int64(5000000), "queued", "n4"},
				lease.Postgres: []any{"k", "alice", mockTok, int64(5000000), "queued", "n4"},
				lease.SQLite:   []any{"k", "alice", mockTok, int64(5000000), "queued", "n4"},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, _ lease.Grant[string]) (int64, lease.Token, error) {
				g, err := l.Create(ctx, db, "k", "alice", 5*time.Second, lease.CreateOptions{State: "queued",
					Set: []lease.Assignment{lease.Set("note", "n4")}})
				return g.Generation, g.Token, err
			},
		},
		{
			name: "Ensure", kind: kindInsert,
			sql: map[lease.Dialect]any{
				lease.MySQL: "INSERT INTO `app`.`lease_item` (`item_key`, `generation`, `updated_at`) VALUES (?, 0, " + myNow + ") " +
					"ON DUPLICATE KEY UPDATE `item_key` = `item_key`",
				lease.Postgres: `INSERT INTO "app"."lease_item" ("item_key", "generation", "updated_at") VALUES ($1, 0, ` + pgNow + `) ` +
					`ON CONFLICT ("item_key") DO NOTHING`,
				lease.SQLite: `INSERT INTO "app"."lease_item" ("item_key", "generation", "updated_at") VALUES (?, 0, ` + liteNow + `) ` +
					`ON CONFLICT ("item_key") DO NOTHING`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{"k"},
				lease.Postgres: []any{"k"},
				lease.SQLite:   []any{"k"},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, _ lease.Grant[string]) (int64, lease.Token, error) {
				return -1, lease.Token{}, l.Ensure(ctx, db, "k", lease.CreateOptions{})
			},
		},
		{
			name: "EnsureWithStateAndSet", kind: kindInsert,
			sql: map[lease.Dialect]any{
				lease.MySQL: "INSERT INTO `app`.`lease_item` (`item_key`, `generation`, `state`, `note`, `updated_at`) VALUES (?, 0, ?, ?, " + myNow + ") " +
					"ON DUPLICATE KEY UPDATE `item_key` = `item_key`",
				lease.Postgres: `INSERT INTO "app"."lease_item" ("item_key", "generation", "state", "note", "updated_at") VALUES ($1, 0, $2, $3, ` + pgNow + `) ` +
					`ON CONFLICT ("item_key") DO NOTHING`,
				lease.SQLite: `INSERT INTO "app"."lease_item" ("item_key", "generation", "state", "note", "updated_at") VALUES (?, 0, ?, ?, ` + liteNow + `) ` +
					`ON CONFLICT ("item_key") DO NOTHING`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{"k", "queued", "n5"},
				lease.Postgres: []any{"k", "queued", "n5"},
				lease.SQLite:   []any{"k", "queued", "n5"},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, _ lease.Grant[string]) (int64, lease.Token, error) {
				return -1, lease.Token{}, l.Ensure(ctx, db, "k", lease.CreateOptions{State: "queued",
					Set: []lease.Assignment{lease.Set("note", "n5")}})
			},
		},
	}
}

// mockOpsFilled returns mockOps with the reentry SQL copied from Acquire.
func mockOpsFilled() []mockOp {
	ops := mockOps()
	for i := range ops {
		if ops[i].name == "AcquireReentry" {
			ops[i].sql = ops[0].sql
		}
	}
	return ops
}

func mockOp1(t *testing.T, name string) mockOp {
	for _, op := range mockOpsFilled() {
		if op.name == name {
			return op
		}
	}
	t.Fatalf("no mock op %q", name)
	return mockOp{}
}

// exactSQL is sqlmock.QueryMatcherEqual made byte-exact: QueryMatcherEqual
// alone folds runs of whitespace.
var exactSQL = sqlmock.QueryMatcherFunc(func(expected, actual string) error {
	if err := sqlmock.QueryMatcherEqual.Match(expected, actual); err != nil {
		return err
	}
	if expected != actual {
		return fmt.Errorf("actual sql %q differs from expected %q in whitespace", actual, expected)
	}
	return nil
})

// Leases on a mock set Options.SkipCheck: the first-use check would be a
// statement the mock does not expect (TestSQLMockCheckStatement pins it).

// newMock returns a sqlmock database matching SQL text exactly and in
// order, checked for unmet expectations at cleanup.
func newMock(t *testing.T) (*sql.DB, sqlmock.Sqlmock) {
	t.Helper()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(exactSQL))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	t.Cleanup(func() { assert.NoError(t, mock.ExpectationsWereMet()) })
	return db, mock
}

func newMockLease(t *testing.T, d lease.Dialect) *lease.Lease[string] {
	t.Helper()
	l, err := lease.New[string](d, mockTable, lease.Options{Prepare: lease.PrepareNever, SkipCheck: true})
	require.NoError(t, err)
	return l
}

func mockGrant(t *testing.T) lease.Grant[string] {
	t.Helper()
	tok, err := lease.NewToken()
	require.NoError(t, err)
	return lease.Grant[string]{Key: "k", Holder: "alice", Token: tok, Generation: 2, TTL: 5 * time.Second}
}

// outcome is how the mocked database answers a statement.
type outcome struct {
	gen       int64 // the generation returned (RETURNING, LAST_INSERT_ID, or SELECT)
	noMatch   bool  // no row matched: 0 rows affected and insert id 0 on MySQL, no row elsewhere
	unchanged bool  // MySQL only: matched but unchanged (0 rows affected, insert id = gen)
	err       error // the driver error
	status    []driver.Value
}

// expectOp registers op's statement with the answer o and returns a
// pointer to the token seen in its arguments.
func expectOp(t *testing.T, mock sqlmock.Sqlmock, d lease.Dialect, op mockOp, g lease.Grant[string], o outcome) *string {
	t.Helper()
	q, ok := op.sql[d].(string)
	require.True(t, ok, "%s: no SQL for %s", op.name, d)
	seen := new(string)
	tok := tokenArg{got: seen}
	if !op.freshTok {
		tok.want = g.Token.Secret()
		*seen = g.Token.Secret()
	}
	args := mockArgs(op.args[d].([]any), tok)
	exec := op.kind == kindInsert || op.kind == kindRelease || (op.kind == kindUpdate && d == lease.MySQL)
	if exec {
		e := mock.ExpectExec(q).WithArgs(args...)
		switch {
		case o.err != nil:
			e.WillReturnError(o.err)
		case o.noMatch:
			e.WillReturnResult(sqlmock.NewResult(0, 0))
		case o.unchanged:
			e.WillReturnResult(sqlmock.NewResult(o.gen, 0))
		default:
			e.WillReturnResult(sqlmock.NewResult(o.gen, 1))
		}
		return seen
	}
	e := mock.ExpectQuery(q).WithArgs(args...)
	if o.err != nil {
		e.WillReturnError(o.err)
		return seen
	}
	if op.kind == kindInspect {
		rows := sqlmock.NewRows([]string{"holder", "generation", "state", "held", "micros"})
		if !o.noMatch {
			rows.AddRow(o.status...)
		}
		e.WillReturnRows(rows)
		return seen
	}
	rows := sqlmock.NewRows([]string{"generation"})
	if !o.noMatch {
		rows.AddRow(o.gen)
	}
	e.WillReturnRows(rows)
	return seen
}

// expectInspect registers the Inspect read that follows a failed acquire.
func expectInspect(t *testing.T, mock sqlmock.Sqlmock, d lease.Dialect, o outcome) {
	t.Helper()
	expectOp(t, mock, d, mockOp1(t, "Inspect"), lease.Grant[string]{}, o)
}

func noSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		if s != "" {
			assert.NotContains(t, err.Error(), s, "the token leaks into the error text")
			assert.NotContains(t, fmt.Sprintf("%+v", err), s, "the token leaks into the error text")
		}
	}
}

// TestSQLMockStatements pins the exact SQL text and arguments of every
// operation in every dialect, and that each is one statement.
func TestSQLMockStatements(t *testing.T) {
	for _, d := range mockDialects {
		for _, op := range mockOpsFilled() {
			t.Run(d.String()+"/"+op.name, func(t *testing.T) {
				ctx := context.Background()
				db, mock := newMock(t)
				l := newMockLease(t, d)
				g := mockGrant(t)
				seen := expectOp(t, mock, d, op, g, outcome{gen: 3, status: []driver.Value{"bob", int64(4), "processing", int64(1), int64(1500000)}})
				gen, tok, err := op.run(ctx, l, db, g)
				require.NoError(t, err)
				switch {
				case op.kind == kindInspect:
					assert.Equal(t, int64(4), gen)
				case op.name == "Create" || op.name == "CreateWithStateAndSet":
					assert.Equal(t, int64(1), gen, "a created row is generation 1")
				case gen != -1:
					assert.Equal(t, int64(3), gen, "the generation is the one the database returned")
				}
				if op.freshTok {
					require.NotEmpty(t, *seen)
					assert.Equal(t, *seen, tok.Secret(), "the grant carries the token that was sent")
					assert.NotEqual(t, g.Token.Secret(), tok.Secret())
				} else if !tok.IsZero() {
					assert.True(t, tok.Equal(g.Token), "the grant keeps its token")
				}
			})
		}
	}
}

// TestSQLMockInspectStatus checks how Inspect reads its row.
func TestSQLMockInspectStatus(t *testing.T) {
	for _, d := range mockDialects {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			db, mock := newMock(t)
			l := newMockLease(t, d)
			expectInspect(t, mock, d, outcome{status: []driver.Value{"bob", int64(4), "processing", int64(1), int64(1500000)}})
			st, err := l.Inspect(ctx, db, "k")
			require.NoError(t, err)
			assert.Equal(t, lease.Snapshot{Holder: "bob", Generation: 4, State: "processing", Held: true, Remaining: 1500 * time.Millisecond}, st)

			// Expired: not held, and no remaining time even though the stored
			// expiry difference is negative.
			expectInspect(t, mock, d, outcome{status: []driver.Value{"bob", int64(4), "processing", int64(0), int64(-2000)}})
			st, err = l.Inspect(ctx, db, "k")
			require.NoError(t, err)
			assert.Equal(t, lease.Snapshot{Holder: "bob", Generation: 4, State: "processing"}, st)

			expectInspect(t, mock, d, outcome{noMatch: true})
			_, err = l.Inspect(ctx, db, "k")
			assert.ErrorIs(t, err, lease.ErrNotFound)
			assert.EqualError(t, err, `lease: not found (key "k")`)
		})
	}
}

// TestSQLMockIntegerKey pins how an integer key is sent.
func TestSQLMockIntegerKey(t *testing.T) {
	db, mock := newMock(t)
	l, err := lease.New[int32](lease.Postgres, mockTable, lease.Options{SkipCheck: true})
	require.NoError(t, err)
	mock.ExpectQuery(mockOp1(t, "Acquire").sql[lease.Postgres].(string)).
		WithArgs(tokenArg{got: new(string)}, int64(5000000), "alice", int64(42)).
		WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow(int64(9)))
	g, err := l.Acquire(context.Background(), db, 42, "alice", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(9), g.Generation)
	assert.Equal(t, int32(42), g.Key)
}

// TestSQLMockDriverErrorAsIs: a driver error comes back as it is — never
// hidden as a lost lease, a conflict or a missing row — and an acquire that
// failed with an error reads nothing more.
func TestSQLMockDriverErrorAsIs(t *testing.T) {
	boom := errors.New("driver: connection reset by peer")
	for _, d := range mockDialects {
		for _, op := range mockOpsFilled() {
			t.Run(d.String()+"/"+op.name, func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				g := mockGrant(t)
				seen := expectOp(t, mock, d, op, g, outcome{err: boom})
				_, _, err := op.run(context.Background(), l, db, g)
				require.Error(t, err)
				assert.ErrorIs(t, err, boom)
				for _, s := range []error{lease.ErrLost, lease.ErrHeld, lease.ErrNotFound, lease.ErrState, lease.ErrExists, lease.ErrInvalid} {
					assert.NotErrorIs(t, err, s)
				}
				noSecret(t, err, g.Token.Secret(), *seen)
			})
		}
	}
}

// TestSQLMockResultErrors: on MySQL an error reading the OK packet's counts
// is returned, not taken for a loss.
func TestSQLMockResultErrors(t *testing.T) {
	bad := errors.New("driver: no RowsAffected available")
	db, mock := newMock(t)
	l := newMockLease(t, lease.MySQL)
	g := mockGrant(t)
	op := mockOp1(t, "Renew")
	mock.ExpectExec(op.sql[lease.MySQL].(string)).WithArgs(mockArgs(op.args[lease.MySQL].([]any), tokenArg{want: g.Token.Secret()})...).
		WillReturnResult(sqlmock.NewErrorResult(bad))
	_, err := l.Renew(context.Background(), db, g, 7*time.Second)
	assert.ErrorIs(t, err, bad)
	assert.NotErrorIs(t, err, lease.ErrLost)

	// On PostgreSQL and SQLite a RETURNING value that does not scan is an
	// error too, not a loss.
	for _, d := range []lease.Dialect{lease.Postgres, lease.SQLite} {
		op := mockOp1(t, "Renew")
		mock.ExpectQuery(op.sql[d].(string)).WithArgs(mockArgs(op.args[d].([]any), tokenArg{want: g.Token.Secret()})...).
			WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow("not a number"))
		_, err := newMockLease(t, d).Renew(context.Background(), db, g, 7*time.Second)
		require.Error(t, err)
		assert.NotErrorIs(t, err, lease.ErrLost)
		noSecret(t, err, g.Token.Secret())
	}
}

// TestSQLMockNoMatchIsLost: a token-checked write that matches no row (0
// rows affected on MySQL, no RETURNING row elsewhere) is a *LostError
// naming the operation, and nothing more is read.
func TestSQLMockNoMatchIsLost(t *testing.T) {
	cases := map[string]string{ // op → LostError.Op
		"Renew": "renew", "Release": "release", "Delete": "delete", "TransitionKeep": "transition",
		"TransitionRelease": "transition", "Verify": "check", "VerifyLock": "check",
	}
	for _, d := range mockDialects {
		for name, wantOp := range cases {
			t.Run(d.String()+"/"+name, func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				g := mockGrant(t)
				g.Deadline = time.Unix(1767225600, 0)
				op := mockOp1(t, name)
				expectOp(t, mock, d, op, g, outcome{noMatch: true})
				gen, tok, err := op.run(context.Background(), l, db, g)
				var le *lease.LostError
				require.ErrorAs(t, err, &le)
				assert.Equal(t, &lease.LostError{Key: "k", Op: wantOp}, le)
				assert.ErrorIs(t, err, lease.ErrLost)
				assert.NotErrorIs(t, err, lease.ErrHeld)
				noSecret(t, err, g.Token.Secret())
				if name == "Verify" || name == "VerifyLock" {
					assert.Zero(t, gen)
				} else if name != "Release" && name != "Delete" {
					assert.Equal(t, g.Generation, gen, "a lost grant comes back unchanged")
					assert.True(t, tok.Equal(g.Token))
				}
			})
		}
	}
}

// TestSQLMockRenewLostKeepsGrant: a failed renew returns the grant it was
// given, deadline included, so a caller that ignores the error still sees
// its old (shrinking) deadline rather than a fresh one.
func TestSQLMockRenewLostKeepsGrant(t *testing.T) {
	for _, d := range mockDialects {
		t.Run(d.String(), func(t *testing.T) {
			db, mock := newMock(t)
			l := newMockLease(t, d)
			g := mockGrant(t)
			g.Deadline = time.Unix(1767225600, 0)
			expectOp(t, mock, d, mockOp1(t, "Renew"), g, outcome{noMatch: true})
			g2, err := l.Renew(context.Background(), db, g, 7*time.Second)
			require.ErrorIs(t, err, lease.ErrLost)
			assert.Equal(t, g, g2)
		})
	}
}

// TestSQLMockAcquireFailureClassified: an acquire that matches no row reads
// the row once to say why.
func TestSQLMockAcquireFailureClassified(t *testing.T) {
	boom := errors.New("driver: read timeout")
	for _, d := range mockDialects {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			g := mockGrant(t)

			t.Run("Held", func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				seen := expectOp(t, mock, d, mockOp1(t, "Acquire"), g, outcome{noMatch: true})
				expectInspect(t, mock, d, outcome{status: []driver.Value{"bob", int64(4), "processing", int64(1), int64(1500000)}})
				_, err := l.Acquire(ctx, db, "k", "alice", 5*time.Second)
				var ce *lease.ConflictError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, &lease.ConflictError{Key: "k", Holder: "bob", Generation: 4, Remaining: 1500 * time.Millisecond}, ce)
				assert.ErrorIs(t, err, lease.ErrHeld)
				assert.NotErrorIs(t, err, lease.ErrLost)
				assert.EqualError(t, err, `lease: held by another holder (key "k", holder "bob", generation 4, 1.5s left)`)
				noSecret(t, err, *seen)
			})
			t.Run("HeldReentryWithForeignToken", func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				expectOp(t, mock, d, mockOp1(t, "AcquireReentry"), g, outcome{noMatch: true})
				expectInspect(t, mock, d, outcome{status: []driver.Value{"bob", int64(4), "processing", int64(1), int64(900)}})
				_, err := l.AcquireWith(ctx, db, "k", "alice", 5*time.Second, lease.AcquireOptions{Token: g.Token})
				assert.ErrorIs(t, err, lease.ErrHeld)
				noSecret(t, err, g.Token.Secret())
			})
			t.Run("NotFound", func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				seen := expectOp(t, mock, d, mockOp1(t, "Acquire"), g, outcome{noMatch: true})
				expectInspect(t, mock, d, outcome{noMatch: true})
				_, err := l.Acquire(ctx, db, "k", "alice", 5*time.Second)
				assert.ErrorIs(t, err, lease.ErrNotFound)
				assert.NotErrorIs(t, err, lease.ErrHeld)
				noSecret(t, err, *seen)
			})
			t.Run("WrongState", func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				seen := expectOp(t, mock, d, mockOp1(t, "AcquireWithStatesAndSet"), g, outcome{noMatch: true})
				expectInspect(t, mock, d, outcome{status: []driver.Value{"", int64(4), "done", int64(0), int64(0)}})
				_, err := l.AcquireWith(ctx, db, "k", "alice", 5*time.Second, lease.AcquireOptions{
					InStates: []string{"queued", "error"}, SetState: "processing", Set: []lease.Assignment{lease.Set("note", "n1")},
				})
				var se *lease.StateError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, &lease.StateError{Key: "k", State: "done", Want: []string{"queued", "error"}}, se)
				assert.ErrorIs(t, err, lease.ErrState)
				assert.NotErrorIs(t, err, lease.ErrHeld)
				noSecret(t, err, *seen)
			})
			t.Run("FreedInBetween", func(t *testing.T) {
				// Held at the write, free at the read: someone released in
				// between. Still a conflict, with no time left.
				db, mock := newMock(t)
				l := newMockLease(t, d)
				expectOp(t, mock, d, mockOp1(t, "AcquireWithStatesAndSet"), g, outcome{noMatch: true})
				expectInspect(t, mock, d, outcome{status: []driver.Value{"", int64(5), "queued", int64(0), int64(0)}})
				_, err := l.AcquireWith(ctx, db, "k", "alice", 5*time.Second, lease.AcquireOptions{
					InStates: []string{"queued", "error"}, SetState: "processing", Set: []lease.Assignment{lease.Set("note", "n1")},
				})
				var ce *lease.ConflictError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, &lease.ConflictError{Key: "k", Generation: 5}, ce)
			})
			t.Run("InspectError", func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				expectOp(t, mock, d, mockOp1(t, "Acquire"), g, outcome{noMatch: true})
				expectInspect(t, mock, d, outcome{err: boom})
				_, err := l.Acquire(ctx, db, "k", "alice", 5*time.Second)
				assert.ErrorIs(t, err, boom)
				assert.NotErrorIs(t, err, lease.ErrHeld)
			})
		})
	}
}

// TestSQLMockMySQLMatchedUnchanged: go-sql-driver/mysql counts changed rows
// by default, so a write that matched the row but left it as it was reports
// 0 rows affected. That can only happen on an expiry column coarser than a
// microsecond, and only there — when it is declared with
// Options.ExpiryResolution — does the generation that LAST_INSERT_ID put in
// the OK packet count as a match. On a microsecond column every success
// changes the row, and 0 rows with a non-zero insert id is what an engine
// that misreports LAST_INSERT_ID(expr) (Vitess 16.0) sends for no match:
// it is a loss, not a grant.
func TestSQLMockMySQLMatchedUnchanged(t *testing.T) {
	ops := []string{"Renew", "Release", "TransitionKeep", "TransitionRelease"}
	for _, name := range append([]string{"Acquire", "AcquireReentry", "AcquireWithStatesAndSet"}, ops...) {
		t.Run("declared coarse/"+name, func(t *testing.T) {
			db, mock := newMock(t)
			l, err := lease.New[string](lease.MySQL, mockTable, lease.Options{Prepare: lease.PrepareNever, ExpiryResolution: time.Second, SkipCheck: true})
			require.NoError(t, err)
			g := mockGrant(t)
			op := mockOp1(t, name)
			expectOp(t, mock, lease.MySQL, op, g, outcome{gen: 7, unchanged: true})
			gen, _, err := op.run(context.Background(), l, db, g)
			require.NoError(t, err, "matched but unchanged is not lost")
			if gen != -1 {
				assert.Equal(t, int64(7), gen)
			}
		})
	}
	for _, name := range ops {
		t.Run("microsecond/"+name, func(t *testing.T) {
			db, mock := newMock(t)
			l := newMockLease(t, lease.MySQL)
			g := mockGrant(t)
			op := mockOp1(t, name)
			expectOp(t, mock, lease.MySQL, op, g, outcome{gen: 7, unchanged: true})
			_, _, err := op.run(context.Background(), l, db, g)
			assert.ErrorIs(t, err, lease.ErrLost, "an insert id without a changed row is not trusted")
		})
	}
}

// fakePgError looks like *pgconn.PgError to IsDuplicateKey.
type fakePgError struct{ code string }

func (e *fakePgError) Error() string    { return "ERROR: fake (SQLSTATE " + e.code + ")" }
func (e *fakePgError) SQLState() string { return e.code }

// fakeSQLiteError looks like *sqlite.Error (modernc) to IsDuplicateKey.
type fakeSQLiteError struct{ code int }

func (e *fakeSQLiteError) Error() string { return fmt.Sprintf("fake sqlite error (%d)", e.code) }
func (e *fakeSQLiteError) Code() int     { return e.code }

// TestSQLMockDuplicateKey: each driver's unique-key violation becomes
// *DuplicateKeyError (ErrExists) that unwraps to the driver error; other
// constraint errors come back as they are.
func TestSQLMockDuplicateKey(t *testing.T) {
	cases := []struct {
		d    lease.Dialect
		err  error
		dup  bool
		name string
	}{
		{lease.MySQL, &mysql.MySQLError{Number: 1062, Message: "Duplicate entry 'k' for key 'PRIMARY'"}, true, "mysql1062"},
		{lease.MySQL, &mysql.MySQLError{Number: 1452, Message: "Cannot add or update a child row"}, false, "mysql1452"},
		{lease.Postgres, &fakePgError{"23505"}, true, "pg23505"},
		{lease.Postgres, fmt.Errorf("pgx: %w", &fakePgError{"23505"}), true, "pg23505wrapped"},
		{lease.Postgres, &fakePgError{"23503"}, false, "pg23503"},
		{lease.SQLite, &fakeSQLiteError{2067}, true, "sqlite2067"},
		{lease.SQLite, &fakeSQLiteError{1555}, true, "sqlite1555"},
		{lease.SQLite, &fakeSQLiteError{787}, false, "sqlite787"},
	}
	for _, c := range cases {
		for _, opName := range []string{"Create", "CreateWithStateAndSet", "AcquireWithStatesAndSet", "TransitionKeep"} {
			t.Run(c.name+"/"+opName, func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, c.d)
				g := mockGrant(t)
				op := mockOp1(t, opName)
				seen := expectOp(t, mock, c.d, op, g, outcome{err: c.err})
				_, tok, err := op.run(context.Background(), l, db, g)
				require.Error(t, err)
				assert.True(t, tok.IsZero() || tok.Equal(g.Token), "no new grant on failure")
				assert.Equal(t, c.dup, lease.IsDuplicateKey(err))
				noSecret(t, err, g.Token.Secret(), *seen)
				if !c.dup {
					assert.Same(t, c.err, err, "returned as is")
					assert.NotErrorIs(t, err, lease.ErrExists)
					return
				}
				assert.ErrorIs(t, err, lease.ErrExists)
				var de *lease.DuplicateKeyError
				require.ErrorAs(t, err, &de)
				assert.Equal(t, "k", de.Key)
				assert.Same(t, c.err, de.Err)
				assert.ErrorIs(t, err, c.err, "unwraps to the driver error")
				assert.Equal(t, `lease: already exists (key "k"): `+c.err.Error(), err.Error())
				assert.NotErrorIs(t, err, lease.ErrHeld)
			})
		}
	}
}

// TestSQLMockValidationSendsNothing: rejected input reaches no database (the
// mock has no expectations, so any statement would fail the test).
func TestSQLMockValidationSendsNothing(t *testing.T) {
	ctx := context.Background()
	noState := lease.MustTable("plain", lease.Columns{Key: "id", Holder: "h", Token: "t", ExpiresAt: "e", Generation: "g"})
	for _, d := range mockDialects {
		t.Run(d.String(), func(t *testing.T) {
			db, _ := newMock(t)
			l, err := lease.New[string](d, noState, lease.Options{SafetyMargin: time.Second, SkipCheck: true})
			require.NoError(t, err)
			g := mockGrant(t)
			errs := map[string]error{}
			_, errs["acquire InStates without a State column"] = l.AcquireWith(ctx, db, "k", "a", 5*time.Second, lease.AcquireOptions{InStates: []string{"queued"}})
			_, errs["acquire SetState without a State column"] = l.AcquireWith(ctx, db, "k", "a", 5*time.Second, lease.AcquireOptions{SetState: "x"})
			_, errs["transition To without a State column"] = l.Transition(ctx, db, g, lease.ChangeOptions{To: "done"})
			_, errs["create State without a State column"] = l.Create(ctx, db, "k", "a", 5*time.Second, lease.CreateOptions{State: "x"})
			errs["ensure State without a State column"] = l.Ensure(ctx, db, "k", lease.CreateOptions{State: "x"})
			_, errs["ttl equal to the margin"] = l.Acquire(ctx, db, "k", "a", time.Second)
			_, errs["renew ttl below the margin"] = l.Renew(ctx, db, g, 999*time.Millisecond)
			_, errs["transition keep without ttl"] = l.Transition(ctx, db, g, lease.ChangeOptions{Keep: true})
			_, errs["set a lease column, other case"] = l.AcquireWith(ctx, db, "k", "a", 5*time.Second, lease.AcquireOptions{Set: []lease.Assignment{lease.Set("T", "x")}})
			for name, err := range errs {
				var ve *lease.ValidationError
				assert.ErrorAs(t, err, &ve, name)
				noSecret(t, err, g.Token.Secret())
			}
		})
	}
}

// TestSQLMockTokenIsSent is a guard on the test itself: the
// secret really is sent (so the "not in error text" checks above check
// something).
func TestSQLMockTokenIsSent(t *testing.T) {
	db, mock := newMock(t)
	l := newMockLease(t, lease.MySQL)
	g := mockGrant(t)
	var got []string
	op := mockOp1(t, "Release")
	mock.ExpectExec(op.sql[lease.MySQL].(string)).WithArgs("k", argFunc(func(v driver.Value) bool {
		s, _ := v.(string)
		got = append(got, s)
		return true
	}), g.Generation).WillReturnResult(sqlmock.NewResult(0, 0))
	err := l.Release(context.Background(), db, g)
	require.ErrorIs(t, err, lease.ErrLost)
	require.Equal(t, []string{g.Token.Secret()}, got)
	assert.False(t, strings.Contains(err.Error(), g.Token.Secret()))
}

type argFunc func(driver.Value) bool

func (f argFunc) Match(v driver.Value) bool { return f(v) }

// TestSQLMockPreparedOnce: with the default options a Lease on SQLite or
// MySQL prepares a statement once per pool and reuses it; inside a
// transaction it sends text; on PostgreSQL it never prepares.
func TestSQLMockPreparedOnce(t *testing.T) {
	for _, d := range mockDialects {
		t.Run(d.String(), func(t *testing.T) {
			db, mock := newMock(t)
			l, err := lease.New[string](d, mockTable, lease.Options{SkipCheck: true})
			require.NoError(t, err)
			g := mockGrant(t)
			q := mockOp1(t, "Verify").sql[d].(string)
			if d != lease.SQLite { // PrepareAuto prepares on SQLite only
				for range 2 {
					mock.ExpectQuery(q).WithArgs("k", g.Token.Secret(), g.Generation).WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow(int64(3)))
				}
			} else {
				p := mock.ExpectPrepare(q).WillBeClosed() // by l.Close below
				for range 2 {
					p.ExpectQuery().WithArgs("k", g.Token.Secret(), g.Generation).WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow(int64(3)))
				}
			}
			for range 2 {
				gen, err := l.Verify(context.Background(), db, g, false)
				require.NoError(t, err)
				assert.Equal(t, int64(3), gen)
			}
			// In a transaction: text, never the pool's prepared statement.
			mock.ExpectBegin()
			mock.ExpectQuery(q).WithArgs("k", g.Token.Secret(), g.Generation).WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow(int64(3)))
			mock.ExpectCommit()
			tx, err := db.Begin()
			require.NoError(t, err)
			_, err = l.Verify(context.Background(), tx, g, false)
			require.NoError(t, err)
			require.NoError(t, tx.Commit())
			require.NoError(t, l.Close())

			// Closed: text from now on, nothing prepared again.
			mock.ExpectQuery(q).WithArgs("k", g.Token.Secret(), g.Generation).WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow(int64(3)))
			_, err = l.Verify(context.Background(), db, g, false)
			require.NoError(t, err)
			require.NoError(t, l.Close(), "a second Close is a no-op")
		})
	}
}

// TestSQLMockGaleraNonPrimaryNotLost: a Galera node cut off from the
// primary component answers every statement with error 1047 before running
// it. A renewal refused that way says nothing about the lease: it is
// returned as it is, never as ErrLost (the holder keeps trying until its
// trust deadline, and a renewal that reaches a node of the primary
// component succeeds), and it is not one of the errors this package sends
// again by itself.
func TestSQLMockGaleraNonPrimaryNotLost(t *testing.T) {
	nonPrimary := &mysql.MySQLError{Number: 1047, SQLState: [5]byte{'0', '8', 'S', '0', '1'}, Message: "WSREP has not yet prepared node for application use"}
	assert.False(t, lease.IsRetryable(nonPrimary))
	assert.False(t, lease.IsTransient(nonPrimary))
	for _, mp := range []bool{false, true} {
		t.Run(fmt.Sprintf("multi-primary=%v", mp), func(t *testing.T) {
			db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherRegexp))
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			l, err := lease.New[string](lease.MySQL, mockTable, lease.Options{Prepare: lease.PrepareNever, MultiPrimary: mp})
			require.NoError(t, err)
			g := mockGrant(t)
			mock.ExpectExec("UPDATE").WillReturnError(nonPrimary)
			g2, err := l.Renew(context.Background(), db, g, 5*time.Second)
			require.ErrorIs(t, err, nonPrimary)
			assert.NotErrorIs(t, err, lease.ErrLost)
			assert.Equal(t, g, g2, "the grant comes back unchanged")

			// A batch: the node refuses its first statement, whichever
			// that is.
			gs := mockGrants(t, "a", "b")
			mock.MatchExpectationsInOrder(false)
			mock.ExpectBegin().WillReturnError(nonPrimary)
			mock.ExpectExec("UPDATE").WillReturnError(nonPrimary)
			_, errs := l.RenewMany(context.Background(), db, gs, 5*time.Second)
			for i, err := range errs {
				require.ErrorIs(t, err, nonPrimary, "grant %d", i)
				assert.NotErrorIs(t, err, lease.ErrLost, "grant %d", i)
			}
		})
	}
}

package lease_test

// The exact SQL and arguments of every operation in every dialect, as the
// go-sqlmock tests (sqlmock_test.go) expect them.

import (
	"context"
	"testing"
	"time"

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
			name: "Confirm", kind: kindUpdate,
			sql: map[lease.Dialect]any{
				lease.MySQL: "UPDATE `app`.`lease_item` SET `generation` = LAST_INSERT_ID(`generation`), " +
					"`expires_at` = CASE WHEN `token` = ? AND `expires_at` IS NOT NULL AND `expires_at` >= (" + myNow + " + INTERVAL ? MICROSECOND) " +
					"THEN (`expires_at` + INTERVAL 1 MICROSECOND) ELSE (" + myNow + " + INTERVAL ? MICROSECOND) END, " +
					"`updated_at` = " + myNow + " WHERE `item_key` = ? AND `token` = ? AND `generation` = ? AND `expires_at` > " + myNow,
				lease.Postgres: `UPDATE "app"."lease_item" SET ` +
					`"expires_at" = CASE WHEN "token" = $1 AND "expires_at" IS NOT NULL AND "expires_at" >= (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') ` +
					`THEN ("expires_at" + CAST(1 AS bigint) * INTERVAL '1 microsecond') ELSE (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') END, ` +
					`"updated_at" = ` + pgNow + ` WHERE "item_key" = $3 AND "token" = $1 AND "generation" = $4 AND "expires_at" > ` + pgNow + ` RETURNING "generation"`,
				lease.SQLite: `UPDATE "app"."lease_item" SET ` +
					`"expires_at" = CASE WHEN "token" = ? AND "expires_at" IS NOT NULL AND "expires_at" >= (` + liteNow + ` + ?) ` +
					`THEN ("expires_at" + 1) ELSE (` + liteNow + ` + ?) END, ` +
					`"updated_at" = ` + liteNow + ` WHERE "item_key" = ? AND "token" = ? AND "generation" = ? AND "expires_at" > ` + liteNow + ` RETURNING "generation"`,
			},
			args: map[lease.Dialect]any{
				lease.MySQL:    []any{mockTok, int64(5000000), int64(5000000), "k", mockTok, int64(2)},
				lease.Postgres: []any{mockTok, int64(5000000), "k", int64(2)},
				lease.SQLite:   []any{mockTok, int64(5000000), int64(5000000), "k", mockTok, int64(2)},
			},
			run: func(ctx context.Context, l *lease.Lease[string], db lease.DB, g lease.Grant[string]) (int64, lease.Token, error) {
				gen, err := l.Confirm(ctx, db, g) // renews for g.TTL (5s)
				return gen, lease.Token{}, err
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

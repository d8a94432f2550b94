package engine_test

// The exact SQL and arguments of every operation in every dialect, as the
// go-sqlmock tests (sqlmock_test.go) expect them.

import (
	"context"
	"testing"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
)

// The database clock of each dialect, as the statements spell it.
const (
	myNow   = "UTC_TIMESTAMP(6)"
	pgNow   = "statement_timestamp()"
	liteNow = "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"
)

// mockTable is schema-qualified so that the pinned SQL also pins how a
// qualified name is quoted.
var mockTable = engine.MustTable("app.lease_item", engine.Columns{
	Key: "item_key", Holder: "holder", Token: "token", ExpiresAt: "expires_at",
	Generation: "generation", State: "state", UpdatedAt: "updated_at",
})

var mockDialects = []engine.Dialect{engine.MySQL, engine.Postgres, engine.SQLite}

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
	sql, args map[engine.Dialect]any
	// run calls the operation with grant g; it returns the generation it
	// reports (-1 when it reports none), the token of the grant it returns
	// (zero when none) and its error.
	run func(ctx context.Context, l *engine.Lease[string], db engine.DB, g engine.Grant[string]) (int64, engine.Token, error)
}

func mockOps() []mockOp {
	return []mockOp{
		{
			name: "Acquire", kind: kindUpdate, freshTok: true,
			sql: map[engine.Dialect]any{
				engine.MySQL: "UPDATE `app`.`lease_item` SET " +
					"`generation` = LAST_INSERT_ID(`generation` + 1), " +
					"`expires_at` = (" + myNow + " + INTERVAL ? MICROSECOND), " +
					"`token` = ?, `holder` = ?, `updated_at` = " + myNow + " " +
					"WHERE `item_key` = ? AND (`token` IS NULL OR `expires_at` IS NULL OR `expires_at` <= " + myNow + ")",
				engine.Postgres: `UPDATE "app"."lease_item" SET ` +
					`"generation" = "generation" + 1, ` +
					`"expires_at" = (` + pgNow + ` + CAST($1 AS bigint) * INTERVAL '1 microsecond'), ` +
					`"token" = $2, "holder" = $3, "updated_at" = ` + pgNow + ` ` +
					`WHERE "item_key" = $4 AND ("token" IS NULL OR "expires_at" IS NULL OR "expires_at" <= ` + pgNow + `) ` +
					`RETURNING "generation"`,
				engine.SQLite: `UPDATE "app"."lease_item" SET ` +
					`"generation" = "generation" + 1, ` +
					`"expires_at" = (` + liteNow + ` + ?), ` +
					`"token" = ?, "holder" = ?, "updated_at" = ` + liteNow + ` ` +
					`WHERE "item_key" = ? AND ("token" IS NULL OR "expires_at" IS NULL OR "expires_at" <= ` + liteNow + `) ` +
					`RETURNING "generation"`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{int64(5000000), mockTok, "alice", "k"},
				engine.Postgres: []any{int64(5000000), mockTok, "alice", "k"},
				engine.SQLite:   []any{int64(5000000), mockTok, "alice", "k"},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, _ engine.Grant[string]) (int64, engine.Token, error) {
				g, err := l.Acquire(ctx, db, "k", "alice", 5*time.Second)
				return g.Generation, g.Token, err
			},
		},
		{
			// Reentry sends the acquire statement of a held token: the
			// generation kept and the expiry never moved backwards for it.
			name: "AcquireReentry", kind: kindUpdate,
			sql: map[engine.Dialect]any{
				engine.MySQL: "UPDATE `app`.`lease_item` SET " +
					"`generation` = LAST_INSERT_ID(CASE WHEN `token` = ? THEN `generation` ELSE `generation` + 1 END), " +
					"`expires_at` = CASE WHEN `token` = ? AND `expires_at` IS NOT NULL AND `expires_at` >= (" + myNow + " + INTERVAL ? MICROSECOND) " +
					"THEN (`expires_at` + INTERVAL 1 MICROSECOND) ELSE (" + myNow + " + INTERVAL ? MICROSECOND) END, " +
					"`token` = ?, `holder` = ?, `updated_at` = " + myNow + " " +
					"WHERE `item_key` = ? AND (`token` IS NULL OR `token` = ? OR `expires_at` IS NULL OR `expires_at` <= " + myNow + ")",
				engine.Postgres: `UPDATE "app"."lease_item" SET ` +
					`"generation" = CASE WHEN "token" = $1 THEN "generation" ELSE "generation" + 1 END, ` +
					`"expires_at" = CASE WHEN "token" = $1 AND "expires_at" IS NOT NULL AND "expires_at" >= (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') ` +
					`THEN ("expires_at" + CAST(1 AS bigint) * INTERVAL '1 microsecond') ELSE (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') END, ` +
					`"token" = $1, "holder" = $3, "updated_at" = ` + pgNow + ` ` +
					`WHERE "item_key" = $4 AND ("token" IS NULL OR "token" = $1 OR "expires_at" IS NULL OR "expires_at" <= ` + pgNow + `) ` +
					`RETURNING "generation"`,
				engine.SQLite: `UPDATE "app"."lease_item" SET ` +
					`"generation" = CASE WHEN "token" = ? THEN "generation" ELSE "generation" + 1 END, ` +
					`"expires_at" = CASE WHEN "token" = ? AND "expires_at" IS NOT NULL AND "expires_at" >= (` + liteNow + ` + ?) ` +
					`THEN ("expires_at" + 1) ELSE (` + liteNow + ` + ?) END, ` +
					`"token" = ?, "holder" = ?, "updated_at" = ` + liteNow + ` ` +
					`WHERE "item_key" = ? AND ("token" IS NULL OR "token" = ? OR "expires_at" IS NULL OR "expires_at" <= ` + liteNow + `) ` +
					`RETURNING "generation"`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{mockTok, mockTok, int64(5000000), int64(5000000), mockTok, "alice", "k", mockTok},
				engine.Postgres: []any{mockTok, int64(5000000), "alice", "k"},
				engine.SQLite:   []any{mockTok, mockTok, int64(5000000), int64(5000000), mockTok, "alice", "k", mockTok},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, g engine.Grant[string]) (int64, engine.Token, error) {
				g2, err := l.AcquireWith(ctx, db, "k", "alice", 5*time.Second, engine.AcquireOptions{Token: g.Token})
				return g2.Generation, g2.Token, err
			},
		},
		{
			name: "AcquireWithStatesAndSet", kind: kindUpdate, freshTok: true,
			sql: map[engine.Dialect]any{
				engine.MySQL: "UPDATE `app`.`lease_item` SET " +
					"`generation` = LAST_INSERT_ID(`generation` + 1), " +
					"`expires_at` = (" + myNow + " + INTERVAL ? MICROSECOND), " +
					"`token` = ?, `holder` = ?, `state` = ?, `note` = ?, `updated_at` = " + myNow + " " +
					"WHERE `item_key` = ? AND `state` IN (?, ?) AND (`token` IS NULL OR `expires_at` IS NULL OR `expires_at` <= " + myNow + ")",
				engine.Postgres: `UPDATE "app"."lease_item" SET ` +
					`"generation" = "generation" + 1, ` +
					`"expires_at" = (` + pgNow + ` + CAST($1 AS bigint) * INTERVAL '1 microsecond'), ` +
					`"token" = $2, "holder" = $3, "state" = $4, "note" = $5, "updated_at" = ` + pgNow + ` ` +
					`WHERE "item_key" = $6 AND "state" IN ($7, $8) AND ("token" IS NULL OR "expires_at" IS NULL OR "expires_at" <= ` + pgNow + `) ` +
					`RETURNING "generation"`,
				engine.SQLite: `UPDATE "app"."lease_item" SET ` +
					`"generation" = "generation" + 1, ` +
					`"expires_at" = (` + liteNow + ` + ?), ` +
					`"token" = ?, "holder" = ?, "state" = ?, "note" = ?, "updated_at" = ` + liteNow + ` ` +
					`WHERE "item_key" = ? AND "state" IN (?, ?) AND ("token" IS NULL OR "expires_at" IS NULL OR "expires_at" <= ` + liteNow + `) ` +
					`RETURNING "generation"`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{int64(5000000), mockTok, "alice", "processing", "n1", "k", "queued", "error"},
				engine.Postgres: []any{int64(5000000), mockTok, "alice", "processing", "n1", "k", "queued", "error"},
				engine.SQLite:   []any{int64(5000000), mockTok, "alice", "processing", "n1", "k", "queued", "error"},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, _ engine.Grant[string]) (int64, engine.Token, error) {
				g, err := l.AcquireWith(ctx, db, "k", "alice", 5*time.Second, engine.AcquireOptions{
					InStates: []string{"queued", "error"}, SetState: "processing", Set: []engine.Assignment{engine.Set("note", "n1")},
				})
				return g.Generation, g.Token, err
			},
		},
		{
			name: "Renew", kind: kindUpdate,
			sql: map[engine.Dialect]any{
				engine.MySQL: "UPDATE `app`.`lease_item` SET `generation` = LAST_INSERT_ID(`generation`), " +
					"`expires_at` = CASE WHEN `token` = ? AND `expires_at` IS NOT NULL AND `expires_at` >= (" + myNow + " + INTERVAL ? MICROSECOND) " +
					"THEN (`expires_at` + INTERVAL 1 MICROSECOND) ELSE (" + myNow + " + INTERVAL ? MICROSECOND) END, " +
					"`updated_at` = " + myNow + " WHERE `item_key` = ? AND `token` = ? AND `generation` = ?",
				engine.Postgres: `UPDATE "app"."lease_item" SET ` +
					`"expires_at" = CASE WHEN "token" = $1 AND "expires_at" IS NOT NULL AND "expires_at" >= (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') ` +
					`THEN ("expires_at" + CAST(1 AS bigint) * INTERVAL '1 microsecond') ELSE (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') END, ` +
					`"updated_at" = ` + pgNow + ` WHERE "item_key" = $3 AND "token" = $1 AND "generation" = $4 RETURNING "generation"`,
				engine.SQLite: `UPDATE "app"."lease_item" SET ` +
					`"expires_at" = CASE WHEN "token" = ? AND "expires_at" IS NOT NULL AND "expires_at" >= (` + liteNow + ` + ?) ` +
					`THEN ("expires_at" + 1) ELSE (` + liteNow + ` + ?) END, ` +
					`"updated_at" = ` + liteNow + ` WHERE "item_key" = ? AND "token" = ? AND "generation" = ? RETURNING "generation"`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{mockTok, int64(7000000), int64(7000000), "k", mockTok, int64(2)},
				engine.Postgres: []any{mockTok, int64(7000000), "k", int64(2)},
				engine.SQLite:   []any{mockTok, int64(7000000), int64(7000000), "k", mockTok, int64(2)},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, g engine.Grant[string]) (int64, engine.Token, error) {
				g2, err := l.Renew(ctx, db, g, 7*time.Second)
				return g2.Generation, g2.Token, err
			},
		},
		{
			name: "Confirm", kind: kindUpdate,
			sql: map[engine.Dialect]any{
				engine.MySQL: "UPDATE `app`.`lease_item` SET `generation` = LAST_INSERT_ID(`generation`), " +
					"`expires_at` = CASE WHEN `token` = ? AND `expires_at` IS NOT NULL AND `expires_at` >= (" + myNow + " + INTERVAL ? MICROSECOND) " +
					"THEN (`expires_at` + INTERVAL 1 MICROSECOND) ELSE (" + myNow + " + INTERVAL ? MICROSECOND) END, " +
					"`updated_at` = " + myNow + " WHERE `item_key` = ? AND `token` = ? AND `generation` = ? AND `expires_at` > " + myNow,
				engine.Postgres: `UPDATE "app"."lease_item" SET ` +
					`"expires_at" = CASE WHEN "token" = $1 AND "expires_at" IS NOT NULL AND "expires_at" >= (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') ` +
					`THEN ("expires_at" + CAST(1 AS bigint) * INTERVAL '1 microsecond') ELSE (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') END, ` +
					`"updated_at" = ` + pgNow + ` WHERE "item_key" = $3 AND "token" = $1 AND "generation" = $4 AND "expires_at" > ` + pgNow + ` RETURNING "generation"`,
				engine.SQLite: `UPDATE "app"."lease_item" SET ` +
					`"expires_at" = CASE WHEN "token" = ? AND "expires_at" IS NOT NULL AND "expires_at" >= (` + liteNow + ` + ?) ` +
					`THEN ("expires_at" + 1) ELSE (` + liteNow + ` + ?) END, ` +
					`"updated_at" = ` + liteNow + ` WHERE "item_key" = ? AND "token" = ? AND "generation" = ? AND "expires_at" > ` + liteNow + ` RETURNING "generation"`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{mockTok, int64(5000000), int64(5000000), "k", mockTok, int64(2)},
				engine.Postgres: []any{mockTok, int64(5000000), "k", int64(2)},
				engine.SQLite:   []any{mockTok, int64(5000000), int64(5000000), "k", mockTok, int64(2)},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, g engine.Grant[string]) (int64, engine.Token, error) {
				gen, err := l.Confirm(ctx, db, g) // renews for g.TTL (5s)
				return gen, engine.Token{}, err
			},
		},
		{
			name: "Release", kind: kindRelease,
			sql: map[engine.Dialect]any{
				engine.MySQL: "UPDATE `app`.`lease_item` SET `generation` = LAST_INSERT_ID(`generation`), " +
					"`expires_at` = NULL, `token` = NULL, `holder` = NULL, `updated_at` = " + myNow + " " +
					"WHERE `item_key` = ? AND `token` = ? AND `generation` = ?",
				engine.Postgres: `UPDATE "app"."lease_item" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, ` +
					`"updated_at" = ` + pgNow + ` WHERE "item_key" = $1 AND "token" = $2 AND "generation" = $3`,
				engine.SQLite: `UPDATE "app"."lease_item" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, ` +
					`"updated_at" = ` + liteNow + ` WHERE "item_key" = ? AND "token" = ? AND "generation" = ?`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{"k", mockTok, int64(2)},
				engine.Postgres: []any{"k", mockTok, int64(2)},
				engine.SQLite:   []any{"k", mockTok, int64(2)},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, g engine.Grant[string]) (int64, engine.Token, error) {
				return -1, engine.Token{}, l.Release(ctx, db, g)
			},
		},
		{
			name: "Delete", kind: kindRelease,
			sql: map[engine.Dialect]any{
				engine.MySQL:    "DELETE FROM `app`.`lease_item` WHERE `item_key` = ? AND `token` = ? AND `generation` = ?",
				engine.Postgres: `DELETE FROM "app"."lease_item" WHERE "item_key" = $1 AND "token" = $2 AND "generation" = $3`,
				engine.SQLite:   `DELETE FROM "app"."lease_item" WHERE "item_key" = ? AND "token" = ? AND "generation" = ?`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{"k", mockTok, int64(2)},
				engine.Postgres: []any{"k", mockTok, int64(2)},
				engine.SQLite:   []any{"k", mockTok, int64(2)},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, g engine.Grant[string]) (int64, engine.Token, error) {
				return -1, engine.Token{}, l.Delete(ctx, db, g)
			},
		},
		{
			name: "TransitionKeep", kind: kindUpdate,
			sql: map[engine.Dialect]any{
				engine.MySQL: "UPDATE `app`.`lease_item` SET `generation` = LAST_INSERT_ID(`generation`), " +
					"`expires_at` = CASE WHEN `token` = ? AND `expires_at` IS NOT NULL AND `expires_at` >= (" + myNow + " + INTERVAL ? MICROSECOND) " +
					"THEN (`expires_at` + INTERVAL 1 MICROSECOND) ELSE (" + myNow + " + INTERVAL ? MICROSECOND) END, " +
					"`state` = ?, `note` = ?, `updated_at` = " + myNow + " WHERE `item_key` = ? AND `token` = ? AND `generation` = ? AND `state` IN (?)",
				engine.Postgres: `UPDATE "app"."lease_item" SET ` +
					`"expires_at" = CASE WHEN "token" = $1 AND "expires_at" IS NOT NULL AND "expires_at" >= (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') ` +
					`THEN ("expires_at" + CAST(1 AS bigint) * INTERVAL '1 microsecond') ELSE (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') END, ` +
					`"state" = $3, "note" = $4, "updated_at" = ` + pgNow + ` WHERE "item_key" = $5 AND "token" = $1 AND "generation" = $6 AND "state" IN ($7) RETURNING "generation"`,
				engine.SQLite: `UPDATE "app"."lease_item" SET ` +
					`"expires_at" = CASE WHEN "token" = ? AND "expires_at" IS NOT NULL AND "expires_at" >= (` + liteNow + ` + ?) ` +
					`THEN ("expires_at" + 1) ELSE (` + liteNow + ` + ?) END, ` +
					`"state" = ?, "note" = ?, "updated_at" = ` + liteNow + ` WHERE "item_key" = ? AND "token" = ? AND "generation" = ? AND "state" IN (?) RETURNING "generation"`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{mockTok, int64(3000000), int64(3000000), "review", "n2", "k", mockTok, int64(2), "processing"},
				engine.Postgres: []any{mockTok, int64(3000000), "review", "n2", "k", int64(2), "processing"},
				engine.SQLite:   []any{mockTok, int64(3000000), int64(3000000), "review", "n2", "k", mockTok, int64(2), "processing"},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, g engine.Grant[string]) (int64, engine.Token, error) {
				g2, err := l.Transition(ctx, db, g, engine.ChangeOptions{From: []string{"processing"}, To: "review",
					Keep: true, TTL: 3 * time.Second, Set: []engine.Assignment{engine.Set("note", "n2")}})
				return g2.Generation, g2.Token, err
			},
		},
		{
			name: "TransitionRelease", kind: kindUpdate,
			sql: map[engine.Dialect]any{
				engine.MySQL: "UPDATE `app`.`lease_item` SET `generation` = LAST_INSERT_ID(`generation`), " +
					"`expires_at` = NULL, `token` = NULL, `holder` = NULL, `state` = ?, `note` = ?, `updated_at` = " + myNow + " " +
					"WHERE `item_key` = ? AND `token` = ? AND `generation` = ? AND `state` IN (?, ?)",
				engine.Postgres: `UPDATE "app"."lease_item" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, ` +
					`"state" = $1, "note" = $2, "updated_at" = ` + pgNow + ` WHERE "item_key" = $3 AND "token" = $4 AND "generation" = $5 AND "state" IN ($6, $7) RETURNING "generation"`,
				engine.SQLite: `UPDATE "app"."lease_item" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, ` +
					`"state" = ?, "note" = ?, "updated_at" = ` + liteNow + ` WHERE "item_key" = ? AND "token" = ? AND "generation" = ? AND "state" IN (?, ?) RETURNING "generation"`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{"done", "n3", "k", mockTok, int64(2), "processing", "review"},
				engine.Postgres: []any{"done", "n3", "k", mockTok, int64(2), "processing", "review"},
				engine.SQLite:   []any{"done", "n3", "k", mockTok, int64(2), "processing", "review"},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, g engine.Grant[string]) (int64, engine.Token, error) {
				g2, err := l.Transition(ctx, db, g, engine.ChangeOptions{From: []string{"processing", "review"}, To: "done",
					Set: []engine.Assignment{engine.Set("note", "n3")}})
				return g2.Generation, g2.Token, err
			},
		},
		{
			name: "Verify", kind: kindVerify,
			sql: map[engine.Dialect]any{
				engine.MySQL:    "SELECT `generation` FROM `app`.`lease_item` WHERE `item_key` = ? AND `token` = ? AND `generation` = ? AND `expires_at` > " + myNow,
				engine.Postgres: `SELECT "generation" FROM "app"."lease_item" WHERE "item_key" = $1 AND "token" = $2 AND "generation" = $3 AND "expires_at" > ` + pgNow,
				engine.SQLite:   `SELECT "generation" FROM "app"."lease_item" WHERE "item_key" = ? AND "token" = ? AND "generation" = ? AND "expires_at" > ` + liteNow,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{"k", mockTok, int64(2)},
				engine.Postgres: []any{"k", mockTok, int64(2)},
				engine.SQLite:   []any{"k", mockTok, int64(2)},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, g engine.Grant[string]) (int64, engine.Token, error) {
				gen, err := engine.Verify(ctx, l, db, g, false)
				return gen, engine.Token{}, err
			},
		},
		{
			// SQLite has no FOR UPDATE: the transaction's database lock does it.
			name: "VerifyLock", kind: kindVerify,
			sql: map[engine.Dialect]any{
				engine.MySQL:    "SELECT `generation` FROM `app`.`lease_item` WHERE `item_key` = ? AND `token` = ? AND `generation` = ? AND `expires_at` > " + myNow + " FOR UPDATE",
				engine.Postgres: `SELECT "generation" FROM "app"."lease_item" WHERE "item_key" = $1 AND "token" = $2 AND "generation" = $3 AND "expires_at" > ` + pgNow + ` FOR UPDATE`,
				engine.SQLite:   `SELECT "generation" FROM "app"."lease_item" WHERE "item_key" = ? AND "token" = ? AND "generation" = ? AND "expires_at" > ` + liteNow,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{"k", mockTok, int64(2)},
				engine.Postgres: []any{"k", mockTok, int64(2)},
				engine.SQLite:   []any{"k", mockTok, int64(2)},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, g engine.Grant[string]) (int64, engine.Token, error) {
				gen, err := engine.Verify(ctx, l, db, g, true)
				return gen, engine.Token{}, err
			},
		},
		{
			name: "Inspect", kind: kindInspect,
			sql: map[engine.Dialect]any{
				engine.MySQL: "SELECT COALESCE(`holder`, ''), `generation`, COALESCE(`state`, ''), " +
					"CASE WHEN `token` IS NOT NULL AND `expires_at` > " + myNow + " THEN 1 ELSE 0 END, " +
					"CASE WHEN `expires_at` IS NULL THEN 0 ELSE TIMESTAMPDIFF(MICROSECOND, " + myNow + ", `expires_at`) END " +
					"FROM `app`.`lease_item` WHERE `item_key` = ?",
				engine.Postgres: `SELECT COALESCE("holder", ''), "generation", COALESCE("state", ''), ` +
					`CASE WHEN "token" IS NOT NULL AND "expires_at" > ` + pgNow + ` THEN 1 ELSE 0 END, ` +
					`CASE WHEN "expires_at" IS NULL THEN 0 ELSE CAST(FLOOR(EXTRACT(EPOCH FROM ("expires_at" - ` + pgNow + `)) * 1000000) AS bigint) END ` +
					`FROM "app"."lease_item" WHERE "item_key" = $1`,
				engine.SQLite: `SELECT COALESCE("holder", ''), "generation", COALESCE("state", ''), ` +
					`CASE WHEN "token" IS NOT NULL AND "expires_at" > ` + liteNow + ` THEN 1 ELSE 0 END, ` +
					`CASE WHEN "expires_at" IS NULL THEN 0 ELSE ("expires_at" - ` + liteNow + `) END ` +
					`FROM "app"."lease_item" WHERE "item_key" = ?`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{"k"},
				engine.Postgres: []any{"k"},
				engine.SQLite:   []any{"k"},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, _ engine.Grant[string]) (int64, engine.Token, error) {
				st, err := l.Inspect(ctx, db, "k")
				return st.Generation, engine.Token{}, err
			},
		},
		{
			name: "Create", kind: kindInsert, freshTok: true,
			sql: map[engine.Dialect]any{
				engine.MySQL: "INSERT INTO `app`.`lease_item` (`item_key`, `holder`, `token`, `expires_at`, `generation`, `updated_at`) " +
					"VALUES (?, ?, ?, (" + myNow + " + INTERVAL ? MICROSECOND), 1, " + myNow + ")",
				engine.Postgres: `INSERT INTO "app"."lease_item" ("item_key", "holder", "token", "expires_at", "generation", "updated_at") ` +
					`VALUES ($1, $2, $3, (` + pgNow + ` + CAST($4 AS bigint) * INTERVAL '1 microsecond'), 1, ` + pgNow + `)`,
				engine.SQLite: `INSERT INTO "app"."lease_item" ("item_key", "holder", "token", "expires_at", "generation", "updated_at") ` +
					`VALUES (?, ?, ?, (` + liteNow + ` + ?), 1, ` + liteNow + `)`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{"k", "alice", mockTok, int64(5000000)},
				engine.Postgres: []any{"k", "alice", mockTok, int64(5000000)},
				engine.SQLite:   []any{"k", "alice", mockTok, int64(5000000)},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, _ engine.Grant[string]) (int64, engine.Token, error) {
				g, err := l.Create(ctx, db, "k", "alice", 5*time.Second, engine.CreateOptions{})
				return g.Generation, g.Token, err
			},
		},
		{
			name: "CreateWithStateAndSet", kind: kindInsert, freshTok: true,
			sql: map[engine.Dialect]any{
				engine.MySQL: "INSERT INTO `app`.`lease_item` (`item_key`, `holder`, `token`, `expires_at`, `generation`, `state`, `note`, `updated_at`) " +
					"VALUES (?, ?, ?, (" + myNow + " + INTERVAL ? MICROSECOND), 1, ?, ?, " + myNow + ")",
				engine.Postgres: `INSERT INTO "app"."lease_item" ("item_key", "holder", "token", "expires_at", "generation", "state", "note", "updated_at") ` +
					`VALUES ($1, $2, $3, (` + pgNow + ` + CAST($4 AS bigint) * INTERVAL '1 microsecond'), 1, $5, $6, ` + pgNow + `)`,
				engine.SQLite: `INSERT INTO "app"."lease_item" ("item_key", "holder", "token", "expires_at", "generation", "state", "note", "updated_at") ` +
					`VALUES (?, ?, ?, (` + liteNow + ` + ?), 1, ?, ?, ` + liteNow + `)`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{"k", "alice", mockTok, int64(5000000), "queued", "n4"},
				engine.Postgres: []any{"k", "alice", mockTok, int64(5000000), "queued", "n4"},
				engine.SQLite:   []any{"k", "alice", mockTok, int64(5000000), "queued", "n4"},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, _ engine.Grant[string]) (int64, engine.Token, error) {
				g, err := l.Create(ctx, db, "k", "alice", 5*time.Second, engine.CreateOptions{State: "queued",
					Set: []engine.Assignment{engine.Set("note", "n4")}})
				return g.Generation, g.Token, err
			},
		},
		{
			name: "Ensure", kind: kindInsert,
			sql: map[engine.Dialect]any{
				engine.MySQL: "INSERT INTO `app`.`lease_item` (`item_key`, `generation`, `updated_at`) VALUES (?, 0, " + myNow + ") " +
					"ON DUPLICATE KEY UPDATE `item_key` = `item_key`",
				engine.Postgres: `INSERT INTO "app"."lease_item" ("item_key", "generation", "updated_at") VALUES ($1, 0, ` + pgNow + `) ` +
					`ON CONFLICT ("item_key") DO NOTHING`,
				engine.SQLite: `INSERT INTO "app"."lease_item" ("item_key", "generation", "updated_at") VALUES (?, 0, ` + liteNow + `) ` +
					`ON CONFLICT ("item_key") DO NOTHING`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{"k"},
				engine.Postgres: []any{"k"},
				engine.SQLite:   []any{"k"},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, _ engine.Grant[string]) (int64, engine.Token, error) {
				return -1, engine.Token{}, l.Ensure(ctx, db, "k", engine.CreateOptions{})
			},
		},
		{
			name: "EnsureWithStateAndSet", kind: kindInsert,
			sql: map[engine.Dialect]any{
				engine.MySQL: "INSERT INTO `app`.`lease_item` (`item_key`, `generation`, `state`, `note`, `updated_at`) VALUES (?, 0, ?, ?, " + myNow + ") " +
					"ON DUPLICATE KEY UPDATE `item_key` = `item_key`",
				engine.Postgres: `INSERT INTO "app"."lease_item" ("item_key", "generation", "state", "note", "updated_at") VALUES ($1, 0, $2, $3, ` + pgNow + `) ` +
					`ON CONFLICT ("item_key") DO NOTHING`,
				engine.SQLite: `INSERT INTO "app"."lease_item" ("item_key", "generation", "state", "note", "updated_at") VALUES (?, 0, ?, ?, ` + liteNow + `) ` +
					`ON CONFLICT ("item_key") DO NOTHING`,
			},
			args: map[engine.Dialect]any{
				engine.MySQL:    []any{"k", "queued", "n5"},
				engine.Postgres: []any{"k", "queued", "n5"},
				engine.SQLite:   []any{"k", "queued", "n5"},
			},
			run: func(ctx context.Context, l *engine.Lease[string], db engine.DB, _ engine.Grant[string]) (int64, engine.Token, error) {
				return -1, engine.Token{}, l.Ensure(ctx, db, "k", engine.CreateOptions{State: "queued",
					Set: []engine.Assignment{engine.Set("note", "n5")}})
			},
		},
	}
}

// mockOpsFilled returns mockOps with the reentry SQL copied from Acquire.
func mockOpsFilled() []mockOp {
	ops := mockOps()
	for i := range ops {
		if ops[i].name == "AcquireReentry" && ops[i].sql == nil {
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

package schema

import (
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// requireStartedAllowed checks the status CHECKs of a database at the
// current schema: a tool execution may be 'started', a bogus status is
// refused, and a request still may not be 'started'.
func requireStartedAllowed(t *testing.T, db *sqlx.DB) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, insertTool(ctx, db, "started-ok", StoredStarted), "a tool execution may be 'started'")
	requireCheckViolation(t, insertTool(ctx, db, "bogus", "bogus"), toolStatusCheck)
	requireCheckViolation(t, insertTool(ctx, db, "bogus-case", "Started"), toolStatusCheck)
	requireCheckViolation(t, insertRequest(ctx, db, "req-started", StoredStarted), "rowlease_request_status_ck")
	for _, s := range []string{StoredProcessing, StoredSucceeded, StoredFailed} {
		require.NoError(t, insertTool(ctx, db, "ok-"+s, s))
	}
}

// TestStartedStatus: a tool execution may have status 'started' however
// the database got its tables, and nothing else new is allowed.
func TestStartedStatus(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		ctx := t.Context()
		cases := []struct {
			name  string
			setup func(db *sqlx.DB)
		}{
			{"Apply on an empty database", applyDDL(t, d)},
			{"golang-migrate 1+2", func(db *sqlx.DB) { migrateUp(t, db, d, "golang-migrate", 2) }},
			{"goose 1+2", func(db *sqlx.DB) { migrateUp(t, db, d, "goose", 2) }},
			{"Apply on the tables of an older Apply", func(db *sqlx.DB) {
				olderApply(t, d)(db)
				requireCheckViolation(t, insertTool(ctx, db, "before", StoredStarted), toolStatusCheck)
				require.NoError(t, Apply(ctx, db, d))
			}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				db := testdb.Open(t, d)
				c.setup(db)
				requireStartedAllowed(t, db)
			})
		}
	})
}

// requireQueueStatusesAllowed checks the request status CHECK of a
// database at the current schema: a request may be 'queued',
// 'interrupted', 'cancelled', 'expired' or 'waiting', has deaths and recorded steps
// (StepTable, unique per request and seq), its queue position is unique
// per session, and a bogus status is refused.
func requireQueueStatusesAllowed(t *testing.T, db *sqlx.DB) {
	t.Helper()
	ctx := t.Context()
	for _, s := range []string{StoredQueued, StoredProcessing, StoredSucceeded, StoredFailed, StoredInterrupted, StoredCancelled, StoredExpired, StoredWaiting} {
		require.NoError(t, insertRequest(ctx, db, "req-"+s, s), "a request may be %q", s)
	}
	requireCheckViolation(t, insertRequest(ctx, db, "req-bogus", "aborted"), requestStatusCheck)
	_, err := db.ExecContext(ctx, db.Rebind("UPDATE "+RequestTable+" SET "+ColSessionKey+" = ?, "+ColQueueSeq+" = ?, "+
		ColContent+" = ?, "+ColOnBusy+" = ?, "+ColInterruptedBy+" = ?, "+ColDeaths+" = ? WHERE id = ?"),
		"s-q", int64(1), "hello", "queue", "c-x", int64(2), "req-queued")
	require.NoError(t, err)
	insertStep := "INSERT INTO " + StepTable + " (" + ColRequestID + ", " + ColSeq + ", " + ColName + ", " +
		ColOutput + ", " + ColGeneration + ") VALUES (?, ?, ?, ?, ?)"
	_, err = db.ExecContext(ctx, db.Rebind(insertStep), "req-queued", 0, "model", `{"tool":"write"}`, int64(1))
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, db.Rebind(insertStep), "req-queued", 0, "model", `{}`, int64(1))
	require.Error(t, err, "(request_id, seq) is unique")
	_, err = db.ExecContext(ctx, db.Rebind("UPDATE "+RequestTable+" SET "+ColSessionKey+" = ?, "+ColQueueSeq+" = ? WHERE id = ?"),
		"s-q", int64(1), "req-error")
	require.Error(t, err, "(session_key, queue_seq) is unique")
}

// TestQueueStatuses: a request may be 'queued', 'interrupted',
// 'cancelled', 'expired' or 'waiting', and has the columns of migrations 3 and 5 and its steps
// table, however the database got its tables.
func TestQueueStatuses(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		ctx := t.Context()
		cases := []struct {
			name  string
			setup func(db *sqlx.DB)
		}{
			{"Apply on an empty database", applyDDL(t, d)},
			{"golang-migrate, all", func(db *sqlx.DB) { migrateUp(t, db, d, "golang-migrate", lastMigration) }},
			{"goose, all", func(db *sqlx.DB) { migrateUp(t, db, d, "goose", lastMigration) }},
			{"Apply on the tables of the Apply of migration 2", func(db *sqlx.DB) {
				applyOf(t, d, 2)(db)
				requireCheckViolation(t, insertRequest(ctx, db, "before", StoredQueued), requestStatusCheck)
				require.NoError(t, Apply(ctx, db, d))
			}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				db := testdb.Open(t, d)
				c.setup(db)
				requireQueueStatusesAllowed(t, db)
			})
		}
	})
}

package schema

// The checks runRealSuite makes of a schema applied to a real database:
// structure, constraints, times; and the harness's helpers for them.

import (
	"database/sql"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
)

// rebind turns ? placeholders into $n for PostgreSQL.
func (h *harness) rebind(query string) string {
	if h.dialect != lease.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (h *harness) exec(t *testing.T, query string, args ...any) error {
	t.Helper()
	_, err := h.db.ExecContext(t.Context(), h.rebind(query), args...)
	return err
}

func (h *harness) mustExec(t *testing.T, query string, args ...any) {
	t.Helper()
	require.NoError(t, h.exec(t, query, args...), query)
}

func (h *harness) strings(t *testing.T, query string, args ...any) []string {
	t.Helper()
	rows, err := h.db.QueryContext(t.Context(), h.rebind(query), args...)
	require.NoError(t, err, query)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s), query)
		out = append(out, s)
	}
	require.NoError(t, rows.Err(), query)
	return out
}

// timeArg converts a time to what the dialect stores.
func (h *harness) timeArg(tm time.Time) any {
	if h.dialect == lease.SQLite {
		return tm.UnixMicro()
	}
	return tm.UTC()
}

// readTime reads one time column of one row.
func (h *harness) readTime(t *testing.T, query string, args ...any) time.Time {
	t.Helper()
	row := h.db.QueryRowContext(t.Context(), h.rebind(query), args...)
	if h.dialect == lease.SQLite {
		var us int64
		require.NoError(t, row.Scan(&us), query)
		return time.UnixMicro(us).UTC()
	}
	var tm time.Time
	require.NoError(t, row.Scan(&tm), query)
	return tm
}

func (h *harness) tables(t *testing.T) []string {
	t.Helper()
	switch h.dialect {
	case lease.SQLite:
		return h.strings(t, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
	case lease.MySQL:
		return h.strings(t, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY table_name")
	default:
		return h.strings(t, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name")
	}
}

func (h *harness) columns(t *testing.T, table string) []string {
	t.Helper()
	switch h.dialect {
	case lease.SQLite:
		return h.strings(t, "SELECT name FROM pragma_table_info(?) ORDER BY cid", table)
	case lease.MySQL:
		return h.strings(t, "SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position", table)
	default:
		return h.strings(t, "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position", table)
	}
}

func (h *harness) columnType(t *testing.T, table, column string) string {
	t.Helper()
	var q string
	switch h.dialect {
	case lease.SQLite:
		q = "SELECT type FROM pragma_table_info(?) WHERE name = ?"
	case lease.MySQL:
		q = "SELECT column_type FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?"
	default:
		q = "SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? AND column_name = ?"
	}
	out := h.strings(t, q, table, column)
	require.Len(t, out, 1, "%s.%s", table, column)
	return strings.ToLower(out[0])
}

// indexes lists the named secondary indexes and unique keys of a table,
// without the primary key.
func (h *harness) indexes(t *testing.T, table string) []string {
	t.Helper()
	switch h.dialect {
	case lease.SQLite:
		return h.strings(t, "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND name NOT LIKE 'sqlite_autoindex_%' ORDER BY name", table)
	case lease.MySQL:
		return h.strings(t, "SELECT DISTINCT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? AND index_name <> 'PRIMARY' ORDER BY index_name", table)
	default:
		return h.strings(t, "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = ? AND indexname <> ? ORDER BY indexname", table, table+"_pk")
	}
}

var allTables = []string{RequestTable, SessionTable, StepTable, ToolExecutionTable} // sorted

var wantColumns = map[string][]string{
	SessionTable: {ColSessionKey, ColHolder, ColToken, ColExpiresAt, ColGeneration, ColCreatedAt, ColUpdatedAt},
	RequestTable: {ColID, ColSessionKey, ColClientRequestID, ColFingerprint, ColStatus, ColHolder, ColToken,
		ColExpiresAt, ColGeneration, ColReply, ColResult, ColError, ColCreatedAt, ColUpdatedAt,
		ColContent, ColQueueSeq, ColOnBusy, ColInterruptedBy, ColDeaths, ColAgent, ColMetadata,
		ColWaitName, ColWaitQuestion, ColWaitSeq, ColWaitUntil},
	ToolExecutionTable: {ColID, ColSessionKey, ColRequestID, ColToolName, ColArgumentsHash, ColIdempotencyKey,
		ColStatus, ColHolder, ColToken, ColExpiresAt, ColGeneration, ColResult, ColError, ColCreatedAt, ColUpdatedAt,
		ColStepSeq, ColOccurrence},
	StepTable: {ColRequestID, ColSeq, ColName, ColOutput, ColGeneration, ColCreatedAt},
}

var wantIndexes = map[string][]string{
	SessionTable:       nil,
	StepTable:          nil,
	RequestTable:       {RequestSessionClientUnique, RequestSessionQueueUnique, RequestStatusUpdatedIndex},
	ToolExecutionTable: {ToolExecutionCallUnique, ToolExecutionIdemUnique, ToolExecutionSessionRequestIndex},
}

// wantIndexesOf is wantIndexes[table] as h lists them: SQLite's index of a
// UNIQUE table constraint is an sqlite_autoindex_…, which h.indexes leaves
// out.
func (h *harness) wantIndexesOf(table string) []string {
	if h.dialect != lease.SQLite {
		return wantIndexes[table]
	}
	var out []string
	for _, ix := range wantIndexes[table] {
		if ix != RequestSessionQueueUnique {
			out = append(out, ix)
		}
	}
	return out
}

func (h *harness) checkStructure(t *testing.T) {
	t.Helper()
	require.Equal(t, allTables, h.tables(t), "tables")
	for table, cols := range wantColumns {
		assert.Equal(t, cols, h.columns(t, table), "columns of %s", table)
		assert.ElementsMatch(t, h.wantIndexesOf(table), h.indexes(t, table), "indexes of %s", table)
		for _, col := range []string{ColExpiresAt, ColCreatedAt, ColUpdatedAt, ColWaitUntil} {
			if !slices.Contains(cols, col) {
				continue // StepTable has created_at only
			}
			want := map[string]string{"mysql": "datetime(6)", "postgres": "timestamp with time zone", "sqlite": "integer"}[h.dialect.String()]
			assert.Equal(t, want, h.columnType(t, table, col), "%s.%s", table, col)
		}
	}
	if h.dialect == lease.MySQL {
		for _, table := range allTables {
			got := h.strings(t, "SELECT CONCAT(engine, ' ', table_collation) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", table)
			assert.Equal(t, []string{"InnoDB utf8mb4_bin"}, got, table)
		}
	}
}

// pkName is the name a primary-key violation reports.
func (h *harness) pkName(table string) string {
	if h.dialect == lease.MySQL {
		return "PRIMARY"
	}
	return table + "_pk"
}

// wantUnique asserts that err is a unique-key violation of the named key.
func (h *harness) wantUnique(t *testing.T, err error, name, table string, cols ...string) {
	t.Helper()
	require.Error(t, err, "expected a violation of %s", name)
	msg := err.Error()
	if h.dialect == lease.SQLite {
		// SQLite names the columns, not the index.
		var qualified []string
		for _, c := range cols {
			qualified = append(qualified, table+"."+c)
		}
		assert.Contains(t, msg, "UNIQUE constraint failed: "+strings.Join(qualified, ", "))
		return
	}
	assert.Contains(t, msg, name)
	assert.Contains(t, strings.ToLower(msg), "duplicate")
}

// wantCheck asserts that err is a violation of the named CHECK constraint.
func (h *harness) wantCheck(t *testing.T, err error, name string) {
	t.Helper()
	require.Error(t, err, "expected a violation of %s", name)
	assert.Contains(t, err.Error(), name)
}

// concurrentApply runs Apply from several goroutines at once on an empty
// database, a few rounds, as replicas starting together would.
func (h *harness) concurrentApply(t *testing.T, dropScript string) {
	t.Helper()
	const rounds, workers = 5, 8
	for round := range rounds {
		errs := make(chan error, workers)
		for range workers {
			go func() { errs <- Apply(t.Context(), h.db, h.dialect) }()
		}
		for range workers {
			require.NoError(t, <-errs, "concurrent Apply, round %d", round+1)
		}
		require.Equal(t, allTables, h.tables(t))
		require.NoError(t, h.execScript(t.Context(), dropScript))
		require.Empty(t, h.tables(t))
	}
}

func runRealSuite(t *testing.T, h *harness) {
	ctx := t.Context()

	mfs, err := Migrations(h.dialect, "golang-migrate")
	require.NoError(t, err)
	gfs, err := Migrations(h.dialect, "goose")
	require.NoError(t, err)
	readFile := func(fsys fs.FS, name string) string {
		b, err := fs.ReadFile(fsys, name)
		require.NoError(t, err)
		return string(b)
	}
	// Every version, up in order and down in reverse order, as the tools
	// run them.
	var migrateUp, migrateDown []string
	var gooseUp, gooseDown []string
	for v := 1; v <= len(migrateFiles); v++ {
		migrateUp = append(migrateUp, readFile(mfs, migrateFiles[v][0]))
		migrateDown = append([]string{readFile(mfs, migrateFiles[v][1])}, migrateDown...)
		up, down, err := parseGoose(readFile(gfs, gooseFiles[v]))
		require.NoError(t, err)
		gooseUp = append(gooseUp, up...)
		gooseDown = append(down, gooseDown...)
	}
	execAll := func(scripts []string) error {
		for _, sc := range scripts {
			if err := h.execScript(ctx, sc); err != nil {
				return err
			}
		}
		return nil
	}
	// Down 1 drops the tables of migration 1; StepTable goes first.
	dropScript := "DROP TABLE IF EXISTS " + StepTable + ";\n" + readFile(mfs, migrateFiles[1][1])

	h.concurrentApply(t, dropScript)

	// Idempotent: twice on an empty database.
	require.NoError(t, Apply(ctx, h.db, h.dialect))
	require.NoError(t, Apply(ctx, h.db, h.dialect), "second Apply")
	h.checkStructure(t)

	t.Run("constraints", func(t *testing.T) { h.checkConstraints(t) })
	t.Run("times", func(t *testing.T) { h.checkTimes(t) })

	// Re-applying on a database with rows changes nothing.
	require.NoError(t, Apply(ctx, h.db, h.dialect), "Apply with data present")
	var n int
	require.NoError(t, h.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+RequestTable).Scan(&n))
	assert.Positive(t, n, "Apply must not touch existing rows")

	// golang-migrate down, then up: whole files in one call each.
	require.NoError(t, h.execScript(ctx, "DELETE FROM "+RequestTable), "rows in statuses that down 3 refuses")
	require.NoError(t, execAll(migrateDown), "golang-migrate down")
	assert.Empty(t, h.tables(t), "tables left after golang-migrate down")
	require.NoError(t, execAll(migrateUp), "golang-migrate up")
	h.checkStructure(t)
	h.mustExec(t, "INSERT INTO "+SessionTable+" (session_key) VALUES (?)", "after-migrate")

	// goose Down, then Up: statement by statement, as goose runs them.
	for _, s := range gooseDown {
		require.NoError(t, h.exec(t, s), "goose Down: %s", s)
	}
	assert.Empty(t, h.tables(t), "tables left after goose Down")
	for _, s := range gooseUp {
		require.NoError(t, h.exec(t, s), "goose Up: %s", s)
	}
	h.checkStructure(t)

	// Apply on tables created by a migration is a no-op too.
	require.NoError(t, Apply(ctx, h.db, h.dialect), "Apply after goose Up")
	h.checkStructure(t)
}

const (
	uuid1 = "00000000-0000-4000-8000-000000000001"
	uuid2 = "00000000-0000-4000-8000-000000000002"
	uuid3 = "00000000-0000-4000-8000-000000000003"
	uuid4 = "00000000-0000-4000-8000-000000000004"
	uuid5 = "00000000-0000-4000-8000-000000000005"
	uuid6 = "00000000-0000-4000-8000-000000000006"
	hashA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	hashB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func (h *harness) checkConstraints(t *testing.T) {
	insSession := "INSERT INTO " + SessionTable + " (session_key) VALUES (?)"
	insRequest := "INSERT INTO " + RequestTable + " (id, session_key, client_request_id, fingerprint, status) VALUES (?, ?, ?, ?, ?)"
	insTool := "INSERT INTO " + ToolExecutionTable +
		" (id, session_key, request_id, tool_name, arguments_hash, idempotency_key, status) VALUES (?, ?, ?, ?, ?, ?, ?)"

	// Sessions: primary key, binary (case-sensitive) comparison, defaults.
	h.mustExec(t, insSession, "s1")
	h.wantUnique(t, h.exec(t, insSession, "s1"), h.pkName(SessionTable), SessionTable, ColSessionKey)
	h.mustExec(t, insSession, "S1")
	h.mustExec(t, insSession, "ü")
	h.mustExec(t, insSession, "u")
	var holder, token sql.NullString
	var expires sql.NullInt64
	var generation int64
	if h.dialect == lease.SQLite {
		require.NoError(t, h.db.QueryRowContext(t.Context(), h.rebind("SELECT holder, token, expires_at, generation FROM "+SessionTable+" WHERE session_key = ?"), "s1").
			Scan(&holder, &token, &expires, &generation))
		assert.False(t, expires.Valid)
	} else {
		var exp sql.NullTime
		require.NoError(t, h.db.QueryRowContext(t.Context(), h.rebind("SELECT holder, token, expires_at, generation FROM "+SessionTable+" WHERE session_key = ?"), "s1").
			Scan(&holder, &token, &exp, &generation))
		assert.False(t, exp.Valid)
	}
	assert.False(t, holder.Valid)
	assert.False(t, token.Valid)
	assert.Zero(t, generation)

	// PAD SPACE: MySQL's utf8mb4_bin ignores trailing spaces in comparisons.
	h.mustExec(t, insSession, "pad")
	err := h.exec(t, insSession, "pad ")
	if h.dialect == lease.MySQL {
		h.wantUnique(t, err, h.pkName(SessionTable), SessionTable, ColSessionKey)
	} else {
		require.NoError(t, err, "trailing space must make a different key")
	}

	// Requests: (session_key, client_request_id) unique, status checked.
	h.mustExec(t, insRequest, uuid1, "s1", "c1", hashA, StoredProcessing)
	h.wantUnique(t, h.exec(t, insRequest, uuid2, "s1", "c1", hashB, StoredSucceeded),
		RequestSessionClientUnique, RequestTable, ColSessionKey, ColClientRequestID)
	h.mustExec(t, insRequest, uuid2, "s1", "c2", hashA, StoredSucceeded)
	h.mustExec(t, insRequest, uuid3, "s2", "c1", hashA, StoredFailed)
	h.mustExec(t, insRequest, uuid4, "s1", "C1", hashA, StoredFailed)
	h.wantUnique(t, h.exec(t, insRequest, uuid1, "s9", "c9", hashA, StoredSucceeded), h.pkName(RequestTable), RequestTable, ColID)
	for i, st := range []string{StoredQueued, StoredInterrupted, StoredExpired, StoredWaiting} {
		h.mustExec(t, insRequest, fmt.Sprintf("q-%d", i), "s1", fmt.Sprintf("q%d", i), hashA, st)
	}
	h.mustExec(t, "UPDATE "+RequestTable+" SET queue_seq = ? WHERE id = ?", int64(1), "q-0")
	h.wantUnique(t, h.exec(t, "UPDATE "+RequestTable+" SET queue_seq = ? WHERE id = ?", int64(1), "q-1"),
		RequestSessionQueueUnique, RequestTable, ColSessionKey, ColQueueSeq)
	h.wantCheck(t, h.exec(t, insRequest, uuid5, "s1", "c5", hashA, "done"), "rowlease_request_status_ck")
	h.wantCheck(t, h.exec(t, insRequest, uuid5, "s1", "c5", hashA, "Success"), "rowlease_request_status_ck")
	require.Error(t, h.exec(t, insRequest, uuid5, "s1", "c5", hashA, nil), "status is NOT NULL")
	require.Error(t, h.exec(t, insRequest, uuid5, "s1", nil, hashA, StoredSucceeded), "client_request_id is NOT NULL")
	h.mustExec(t, "UPDATE "+RequestTable+" SET reply = ?, result = ?, error = ?, holder = ?, token = ?, generation = generation + 1 WHERE id = ?",
		strings.Repeat("r", 100000), `{"ok":true}`, "none", "worker-1", uuid6, uuid1)
	assert.Equal(t, []string{"0"}, h.strings(t, "SELECT "+ColDeaths+" FROM "+RequestTable+" WHERE id = ?", uuid1), "deaths defaults to 0")
	require.Error(t, h.exec(t, "UPDATE "+RequestTable+" SET "+ColDeaths+" = NULL WHERE id = ?", uuid1), "deaths is NOT NULL")
	assert.Equal(t, []string{"1"}, h.strings(t, "SELECT COUNT(*) FROM "+RequestTable+" WHERE id = ? AND "+ColAgent+" IS NULL AND "+
		ColMetadata+" IS NULL", uuid1), "agent and metadata default to NULL")
	h.mustExec(t, "UPDATE "+RequestTable+" SET "+ColAgent+" = ?, "+ColMetadata+" = ? WHERE id = ?",
		strings.Repeat("a", MaxAgentNameLen), `{"m":"`+strings.Repeat("m", 100000)+`"}`, uuid1)
	if h.dialect != lease.SQLite {
		require.Error(t, h.exec(t, "UPDATE "+RequestTable+" SET "+ColAgent+" = ? WHERE id = ?",
			strings.Repeat("a", MaxAgentNameLen+1), uuid1), "agent holds at most MaxAgentNameLen")
	}

	// Steps: (request_id, seq) is the primary key; the output is large text.
	insStep := "INSERT INTO " + StepTable + " (request_id, seq, name, output, generation) VALUES (?, ?, ?, ?, ?)"
	h.mustExec(t, insStep, uuid1, 0, "model", `{"text":"`+strings.Repeat("o", 100000)+`"}`, int64(1))
	h.mustExec(t, insStep, uuid1, 1, "model", `null`, int64(1))
	h.mustExec(t, insStep, uuid2, 0, "model", `"x"`, int64(2))
	h.wantUnique(t, h.exec(t, insStep, uuid1, 1, "tool", `1`, int64(2)), h.pkName(StepTable), StepTable, ColRequestID, ColSeq)
	require.Error(t, h.exec(t, insStep, uuid3, 0, "model", nil, int64(1)), "output is NOT NULL")

	// Tool executions: both unique keys, status checked.
	h.mustExec(t, insTool, uuid1, "s1", uuid1, "search", hashA, "idem-1", StoredProcessing)
	h.wantUnique(t, h.exec(t, insTool, uuid2, "s1", uuid2, "fetch", hashB, "idem-1", StoredProcessing),
		ToolExecutionIdemUnique, ToolExecutionTable, ColSessionKey, ColIdempotencyKey)
	h.wantUnique(t, h.exec(t, insTool, uuid2, "s1", uuid1, "search", hashA, "idem-2", StoredProcessing),
		ToolExecutionCallUnique, ToolExecutionTable, ColRequestID, ColToolName, ColArgumentsHash, ColOccurrence)
	assert.Equal(t, []string{"0"}, h.strings(t, "SELECT "+ColOccurrence+" FROM "+ToolExecutionTable+" WHERE id = ?", uuid1), "occurrence defaults to 0")
	// The second identical call is occurrence 1, a row of its own.
	insToolOcc := "INSERT INTO " + ToolExecutionTable +
		" (id, session_key, request_id, tool_name, arguments_hash, idempotency_key, status, occurrence) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
	h.mustExec(t, insToolOcc, "occ-1", "s1", uuid1, "search", hashA, "idem-occ-1", StoredProcessing, 1)
	h.wantUnique(t, h.exec(t, insToolOcc, "occ-1b", "s1", uuid1, "search", hashA, "idem-occ-1b", StoredProcessing, 1),
		ToolExecutionCallUnique, ToolExecutionTable, ColRequestID, ColToolName, ColArgumentsHash, ColOccurrence)
	require.Error(t, h.exec(t, insToolOcc, "occ-null", "s1", uuid1, "search", hashA, "idem-occ-null", StoredProcessing, nil),
		"occurrence is NOT NULL")
	h.mustExec(t, insTool, uuid2, "s2", uuid3, "search", hashA, "idem-1", StoredSucceeded)
	h.mustExec(t, insTool, uuid3, "s1", uuid1, "search", hashB, "idem-2", StoredFailed)
	h.mustExec(t, insTool, uuid4, "s1", uuid1, "Search", hashA, "idem-3", StoredSucceeded)
	h.mustExec(t, insTool, uuid5, "s1", uuid2, "search", hashA, "IDEM-1", StoredSucceeded) // key differs from idem-1 only in case
	h.wantCheck(t, h.exec(t, insTool, uuid6, "s1", uuid2, "x", hashA, "idem-9", "failed"), "rowlease_tool_execution_status_ck")
}

func (h *harness) checkTimes(t *testing.T) {
	// Defaults are "now" in UTC. Server clocks may differ a little from ours;
	// a default in the wrong time zone would be hours off.
	const slack = 2 * time.Minute
	before := time.Now()
	h.mustExec(t, "INSERT INTO "+SessionTable+" (session_key) VALUES (?)", "t-default")
	h.mustExec(t, "INSERT INTO "+RequestTable+" (id, session_key, client_request_id, fingerprint, status) VALUES (?, ?, ?, ?, ?)",
		uuid6, "t-default", "c", hashA, StoredProcessing)
	h.mustExec(t, "INSERT INTO "+ToolExecutionTable+" (id, session_key, request_id, tool_name, arguments_hash, idempotency_key, status) VALUES (?, ?, ?, ?, ?, ?, ?)",
		uuid6, "t-default", uuid6, "tool", hashA, "k", StoredProcessing)
	h.mustExec(t, "INSERT INTO "+StepTable+" (request_id, seq, name, output, generation) VALUES (?, ?, ?, ?, ?)",
		uuid6, 0, "model", "{}", int64(1))
	after := time.Now()
	for _, q := range []struct{ table, keyCol, key string }{
		{SessionTable, ColSessionKey, "t-default"},
		{RequestTable, ColID, uuid6},
		{ToolExecutionTable, ColID, uuid6},
		{StepTable, ColRequestID, uuid6},
	} {
		for _, col := range []string{ColCreatedAt, ColUpdatedAt} {
			if q.table == StepTable && col == ColUpdatedAt {
				continue
			}
			got := h.readTime(t, "SELECT "+col+" FROM "+q.table+" WHERE "+q.keyCol+" = ?", q.key)
			assert.WithinRange(t, got, before.Add(-slack), after.Add(slack), "%s.%s default", q.table, col)
			if h.dialect == lease.SQLite {
				assert.Zero(t, got.UnixMicro()%1000, "SQLite default has millisecond resolution")
			}
		}
	}

	// An explicit time keeps its microseconds and compares correctly in SQL.
	exp := time.Date(2031, 2, 3, 4, 5, 6, 123456000, time.UTC)
	h.mustExec(t, "INSERT INTO "+SessionTable+" (session_key, holder, token, expires_at, generation) VALUES (?, ?, ?, ?, ?)",
		"t-exp", "worker", uuid1, h.timeArg(exp), int64(7))
	got := h.readTime(t, "SELECT expires_at FROM "+SessionTable+" WHERE session_key = ?", "t-exp")
	assert.True(t, exp.Equal(got), "expires_at round trip: put %v, got %v", exp, got)
	count := func(op string, tm time.Time) int {
		var n int
		require.NoError(t, h.db.QueryRowContext(t.Context(), h.rebind("SELECT COUNT(*) FROM "+SessionTable+" WHERE session_key = ? AND expires_at "+op+" ?"),
			"t-exp", h.timeArg(tm)).Scan(&n))
		return n
	}
	assert.Equal(t, 1, count(">", exp.Add(-time.Microsecond)))
	assert.Equal(t, 0, count(">", exp))
	assert.Equal(t, 1, count("=", exp))

	if h.dialect != lease.SQLite {
		return
	}
	// SQLite: only integers go into time columns.
	for _, bad := range []any{"2031-02-03 04:05:06", exp, 1.5} {
		h.wantCheck(t, h.exec(t, "INSERT INTO "+SessionTable+" (session_key, expires_at) VALUES (?, ?)", "t-bad", bad), "rowlease_session_time_ck")
		h.wantCheck(t, h.exec(t, "UPDATE "+SessionTable+" SET updated_at = ? WHERE session_key = ?", bad, "t-exp"), "rowlease_session_time_ck")
		h.wantCheck(t, h.exec(t, "UPDATE "+RequestTable+" SET expires_at = ? WHERE id = ?", bad, uuid6), "rowlease_request_time_ck")
		h.wantCheck(t, h.exec(t, "UPDATE "+RequestTable+" SET "+ColWaitUntil+" = ? WHERE id = ?", bad, uuid6), "rowlease_request_time_ck")
		h.wantCheck(t, h.exec(t, "UPDATE "+ToolExecutionTable+" SET created_at = ? WHERE id = ?", bad, uuid6), "rowlease_tool_execution_time_ck")
	}
	// A text that looks like an integer is converted by INTEGER affinity.
	h.mustExec(t, "UPDATE "+SessionTable+" SET expires_at = ? WHERE session_key = ?", "1700000000000000", "t-exp")
}

package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/proccpu"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// The designs compared end to end: one new message each, an agent with no
// model latency whose one tool call writes one ledger row.
const (
	flowLibrary = "rowlease"
	flowArticle = "article, by hand"
	flowFloor   = "floor (no lock)"
)

var flowKinds = []string{flowLibrary, flowArticle, flowFloor}

// The library's flow on MySQL with go-sql-driver's default DSN, which
// leaves interpolateParams off (the kinds above have it on): as it is,
// and with the Runner's leases keeping their statements prepared
// (lease.PrepareAlways); and with interpolateParams and prepared
// statements. See mysqldsn.go.
const (
	flowLibraryNoInterp       = "rowlease, no interpolateParams"
	flowLibraryPrepared       = "rowlease, no interpolateParams, PrepareAlways"
	flowLibraryInterpPrepared = "rowlease, PrepareAlways"
)

// throughputPoint is one measurement: sessions goroutines, each its own
// session, each sending new messages one after another for a while.
type throughputPoint struct {
	Dialect    string
	Kind       string
	Sessions   int
	Messages   int
	PerSec     float64
	P50Micros  int64
	P99Micros  int64
	Statements float64 // per message, the ledger row included
	RoundTrips float64 // per message: statements, BEGIN, COMMIT, ROLLBACK, prepares
	// ClientCPUMicros is this process's CPU time (user + system) per
	// message: the Go side of the design and the driver (SQLite's engine
	// included, as it runs in process; the servers' own CPU is not).
	ClientCPUMicros float64
	// ServerCPUMicros is the database server's CPU time per message (see
	// serverCPU): what the design costs the database every agent run
	// shares. 0 for SQLite, whose engine is in the client's.
	ServerCPUMicros float64
	ElapsedSec      float64
}

// ledgerDDL is the business table all three designs write to.
const ledgerDDL = "CREATE TABLE ledger_entry (request_id VARCHAR(64) NOT NULL, amount VARCHAR(32) NOT NULL)"

// message runs one new message of session s (its n-th) through a design.
type message func(ctx context.Context, s, n int) error

// measureThroughput measures kind on d at each of the given concurrencies,
// on one fresh database (so the tables grow across the points of one kind
// alike for every kind).
func measureThroughput(ctx context.Context, d lease.Dialect, kind string, sessions []int, dur time.Duration) ([]throughputPoint, error) {
	return measureThroughputVia(ctx, d, kind, sessions, dur, "")
}

// measureThroughputVia is measureThroughput with the pool dialling via
// (a delaying proxy of the server; "" for the server itself).
func measureThroughputVia(ctx context.Context, d lease.Dialect, kind string, sessions []int, dur time.Duration, via string) ([]throughputPoint, error) {
	c := &countdb.Counter{}
	var tweak func(*mysql.Config)
	switch kind {
	case flowArticle:
		// The article's code checks rows affected after a touch that may
		// change nothing within the same second: it needs matched rows.
		tweak = func(cfg *mysql.Config) { cfg.ClientFoundRows = true }
	case flowLibraryNoInterp, flowLibraryPrepared:
		tweak = func(cfg *mysql.Config) { cfg.InterpolateParams = false }
	}
	db, done, err := freshVia(ctx, d, c, tweak, via)
	if err != nil {
		return nil, err
	}
	defer done()
	if _, err := db.ExecContext(ctx, ledgerDDL); err != nil {
		return nil, err
	}
	var msg message
	var prepare func(ctx context.Context, s int) error
	switch kind {
	case flowLibrary, flowLibraryNoInterp, flowLibraryPrepared, flowLibraryInterpPrepared:
		mode := lease.PrepareAuto
		if kind == flowLibraryPrepared || kind == flowLibraryInterpPrepared {
			mode = lease.PrepareAlways
		}
		m, closeFn, err := libraryFlow(ctx, d, db, mode)
		if err != nil {
			return nil, err
		}
		defer closeFn()
		msg = m
		prepare = func(ctx context.Context, s int) error { return m(ctx, s, -1) } // creates the session row
	case flowArticle:
		a, err := newArticle(ctx, d, db)
		if err != nil {
			return nil, err
		}
		msg, prepare = a.message, a.createSession
	case flowFloor:
		ins := d.Rebind("INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)")
		msg = func(ctx context.Context, s, n int) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, ins, reqID(s, n), "35"); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}
		prepare = func(ctx context.Context, s int) error { return msg(ctx, s, -1) }
	default:
		return nil, fmt.Errorf("unknown kind %q", kind)
	}
	var out []throughputPoint
	prepared := 0
	for _, n := range sessions {
		for ; prepared < n; prepared++ {
			if err := prepare(ctx, prepared); err != nil {
				return nil, fmt.Errorf("preparing session %d: %w", prepared, err)
			}
		}
		// Statistics, as a database in service has them (autovacuum
		// analyses a table within a minute of its first rows): without
		// them PostgreSQL may plan a lookup by the wrong index of two that
		// start with the same column, for every point of a fresh table.
		if err := analyze(ctx, d, db); err != nil {
			return nil, fmt.Errorf("analyze: %w", err)
		}
		// A warm-up at the same concurrency, not measured: the pool opens
		// its connections for this point (on PostgreSQL each is a backend
		// process, a SCRAM handshake and empty caches: tens of
		// milliseconds of CPU on the client and the server, which a 1 s
		// point at 64 sessions would otherwise count as messages' cost),
		// and every connection prepares and plans its statements once. A
		// service in steady state has both.
		if _, err := runThroughput(ctx, d, c, msg, n, warmUp(dur)); err != nil {
			return nil, fmt.Errorf("x%d, warming up: %w", n, err)
		}
		p, err := runThroughput(ctx, d, c, msg, n, dur)
		if err != nil {
			return nil, fmt.Errorf("x%d: %w", n, err)
		}
		p.Dialect, p.Kind = d.String(), kind
		out = append(out, p)
	}
	return out, nil
}

// warmUp is the unmeasured run before a point of length dur: a quarter of
// it, at least 250 ms.
func warmUp(dur time.Duration) time.Duration { return max(dur/4, 250*time.Millisecond) }

// seq numbers messages across the points of one run, so that no client
// request id repeats (a repeat would be a replay, not a new message).
var seq sync.Map // session -> *int

func runThroughput(ctx context.Context, d lease.Dialect, c *countdb.Counter, msg message, sessions int, dur time.Duration) (throughputPoint, error) {
	lat := make([][]int64, sessions)
	errs := make([]error, sessions)
	next := make([]int, sessions)
	for s := range sessions {
		v, _ := seq.LoadOrStore(s, new(int))
		next[s] = *v.(*int)
	}
	c.Reset()
	cpu0, srv0 := proccpu.Used(), serverCPU(d)
	start := time.Now()
	stop := start.Add(dur)
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Go(func() {
			for time.Now().Before(stop) {
				t0 := time.Now()
				if err := msg(ctx, s, next[s]); err != nil {
					errs[s] = err
					return
				}
				next[s]++
				lat[s] = append(lat[s], time.Since(t0).Microseconds())
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu, srv := proccpu.Used()-cpu0, serverCPU(d)-srv0
	st := c.Stats()
	var all []int64
	for s := range sessions {
		v, _ := seq.Load(s)
		*v.(*int) = next[s]
		if errs[s] != nil {
			return throughputPoint{}, errs[s]
		}
		all = append(all, lat[s]...)
	}
	slices.Sort(all)
	n := float64(max(len(all), 1))
	return throughputPoint{Sessions: sessions, Messages: len(all), PerSec: float64(len(all)) / elapsed.Seconds(),
		P50Micros: quantile(all, 0.50), P99Micros: quantile(all, 0.99),
		Statements:      float64(st.Statements) / n,
		RoundTrips:      float64(st.Statements+st.Begins+st.Commits+st.Rollbacks+st.Prepares) / n,
		ClientCPUMicros: float64(cpu.Microseconds()) / n,
		ServerCPUMicros: float64(srv.Microseconds()) / n,
		ElapsedSec:      elapsed.Seconds()}, nil
}

// analyze refreshes the planner's statistics of every table of db.
func analyze(ctx context.Context, d lease.Dialect, db *sqlx.DB) error {
	switch d {
	case lease.MySQL:
		var tables []string
		if err := db.SelectContext(ctx, &tables, "SHOW TABLES"); err != nil {
			return err
		}
		for _, t := range tables {
			rows, err := db.QueryContext(ctx, "ANALYZE TABLE "+t)
			if err != nil {
				return err
			}
			if err := rows.Close(); err != nil {
				return err
			}
		}
		return nil
	default:
		_, err := db.ExecContext(ctx, "ANALYZE")
		return err
	}
}

func reqID(s, n int) string { return "s" + strconv.Itoa(s) + "-c" + strconv.Itoa(n) }

// libraryFlow is one message through request.Runner.Handle: the agent
// calls one tool, which writes one ledger row in the tool's transaction.
// prepare is the Runner's lease.Options.Prepare.
func libraryFlow(ctx context.Context, d lease.Dialect, db *sqlx.DB, prepare lease.PrepareMode) (message, func(), error) {
	if err := schema.Apply(ctx, db, d); err != nil {
		return nil, nil, err
	}
	insert := d.Rebind("INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)")
	tools := toolexec.NewRegistry()
	if err := tools.Register("write", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		_, err := x.Tx.ExecContext(ctx, insert, x.Call.RequestID, "35")
		return json.RawMessage(`{"ok":true}`), err
	}); err != nil {
		return nil, nil, err
	}
	r, err := request.New(request.Config{DB: db, Dialect: d, Tools: tools, Session: session.Config{AutoCreate: true}, Lease: lease.Options{Prepare: prepare}})
	if err != nil {
		return nil, nil, err
	}
	agent := func(ctx context.Context, run *request.Run) (request.Answer, error) {
		res, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":35}`))
		if err != nil {
			return request.Answer{}, err
		}
		return request.Answer{Reply: "recorded", Result: res.Output}, nil
	}
	m := func(ctx context.Context, s, n int) error {
		_, err := r.Handle(ctx, request.Message{SessionKey: "s" + strconv.Itoa(s), ClientRequestID: "c" + strconv.Itoa(n), Content: "x"}, agent)
		return err
	}
	return m, func() { _ = r.Close(context.Background()) }, nil
}

// article is the design of the article written by hand in Go, its
// statements as the article lists them (ChatSessionMapper,
// ChatRequestMapper, ChatToolExecutionMapper, sendMessage), on tables of
// the article's shape: the session lock in three columns of chat_session,
// chat_request unique on (session_id, client_request_id),
// chat_tool_execution unique on the idempotent key and on (request_id,
// tool_name, arguments_hash). Ids are generated by the application (the
// article's are AUTO_INCREMENT; an INSERT returns either in its one round
// trip on MySQL). Left out, as in the library's flow: the chat_message rows
// and the recovery reads that look them up (tryRecoverCompletedRequest,
// tryRecoverToolSideEffect), the heartbeat thread (60 s, it never fires
// within one message here), the Redis cache. Stale is 5 minutes, as in the
// article.
type article struct {
	db *sqlx.DB
	q  map[string]string
}

func articleDDL(d lease.Dialect) []string {
	ts, text := "DATETIME", "TEXT"
	switch d {
	case lease.Postgres:
		ts = "TIMESTAMP"
	case lease.SQLite:
		ts = "TEXT"
	}
	return []string{
		"CREATE TABLE chat_session (id VARCHAR(64) NOT NULL PRIMARY KEY, current_request_id VARCHAR(64) NULL, " +
			"current_request_lease_token VARCHAR(64) NULL, current_request_heartbeat_at " + ts + " NULL, updated_at " + ts + " NULL)",
		"CREATE TABLE chat_request (id VARCHAR(64) NOT NULL PRIMARY KEY, session_id VARCHAR(64) NOT NULL, " +
			"client_request_id VARCHAR(64) NOT NULL, status VARCHAR(16) NOT NULL, lease_token VARCHAR(64) NULL, reply " + text + " NULL, " +
			"created_at " + ts + " NULL, updated_at " + ts + " NULL, CONSTRAINT uk_session_request UNIQUE (session_id, client_request_id))",
		"CREATE TABLE chat_tool_execution (id VARCHAR(64) NOT NULL PRIMARY KEY, request_id VARCHAR(64) NOT NULL, " +
			"tool_name VARCHAR(64) NOT NULL, arguments_hash CHAR(64) NOT NULL, idempotent_key VARCHAR(255) NOT NULL, " +
			"status VARCHAR(16) NOT NULL, lease_token VARCHAR(64) NULL, result_json " + text + " NULL, updated_at " + ts + " NULL, " +
			"CONSTRAINT uk_idempotent_key UNIQUE (idempotent_key), CONSTRAINT uk_request_tool_args UNIQUE (request_id, tool_name, arguments_hash))",
	}
}

func newArticle(ctx context.Context, d lease.Dialect, db *sqlx.DB) (*article, error) {
	for _, s := range articleDDL(d) {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return nil, err
		}
	}
	now, stale := "CURRENT_TIMESTAMP", "DATE_SUB(CURRENT_TIMESTAMP, INTERVAL 5 MINUTE)"
	switch d {
	case lease.Postgres:
		stale = "CURRENT_TIMESTAMP - INTERVAL '5 minutes'"
	case lease.SQLite:
		stale = "datetime('now', '-5 minutes')"
	}
	q := map[string]string{
		"createSession": "INSERT INTO chat_session (id, updated_at) VALUES (?, " + now + ")",
		// ChatRequestMapper.selectBySessionAndClientRequest
		"selectRequest": "SELECT id, status, lease_token, updated_at FROM chat_request WHERE session_id = ? AND client_request_id = ?",
		// findOrCreateChatRequest's insert: born processing with a token
		"insertRequest": "INSERT INTO chat_request (id, session_id, client_request_id, status, lease_token, created_at, updated_at) " +
			"VALUES (?, ?, ?, 'processing', ?, " + now + ", " + now + ")",
		// ChatSessionMapper: take, touch, release
		"claimSession": "UPDATE chat_session SET current_request_id = ?, current_request_lease_token = ?, " +
			"current_request_heartbeat_at = " + now + ", updated_at = " + now + " WHERE id = ? AND (current_request_id IS NULL " +
			"OR (current_request_id = ? AND current_request_lease_token = ?) OR current_request_heartbeat_at IS NULL " +
			"OR current_request_heartbeat_at < " + stale + ")",
		"touchSession": "UPDATE chat_session SET current_request_heartbeat_at = " + now +
			" WHERE id = ? AND current_request_id = ? AND current_request_lease_token = ?",
		"releaseSession": "UPDATE chat_session SET current_request_id = NULL, current_request_lease_token = NULL, " +
			"current_request_heartbeat_at = NULL WHERE id = ? AND current_request_id = ? AND current_request_lease_token = ?",
		// ChatRequestMapper: touch, markSuccess
		"touchRequest": "UPDATE chat_request SET updated_at = " + now + " WHERE id = ? AND status = 'processing' AND lease_token = ?",
		"markRequest": "UPDATE chat_request SET status = 'success', reply = ?, updated_at = " + now +
			" WHERE id = ? AND status = 'processing' AND lease_token = ?",
		// BookingAgent.acquireExecution, ChatToolExecutionMapper.markSuccess
		"selectExecution": "SELECT id, status, lease_token, result_json, updated_at FROM chat_tool_execution WHERE idempotent_key = ?",
		"insertExecution": "INSERT INTO chat_tool_execution (id, request_id, tool_name, arguments_hash, idempotent_key, status, lease_token, updated_at) " +
			"VALUES (?, ?, ?, ?, ?, 'processing', ?, " + now + ")",
		"markExecution": "UPDATE chat_tool_execution SET status = 'success', result_json = ?, updated_at = " + now +
			" WHERE id = ? AND status = 'processing' AND lease_token = ?",
		"insertLedger": "INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)",
	}
	for k, v := range q {
		q[k] = d.Rebind(v)
	}
	return &article{db: db, q: q}, nil
}

func (a *article) createSession(ctx context.Context, s int) error {
	_, err := a.db.ExecContext(ctx, a.q["createSession"], "s"+strconv.Itoa(s))
	return err
}

// errConflict is the article's 409: it never happens here (each session
// sends one message at a time), so meeting it is a fault of the baseline.
var errConflict = errors.New("article baseline: 409")

func (a *article) exec1(ctx context.Context, q string, args ...any) error {
	res, err := a.db.ExecContext(ctx, a.q[q], args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%w: %s matched %d rows (%v)", errConflict, q, n, err)
	}
	return nil
}

func uuid() string {
	t, err := engine.NewToken()
	if err != nil {
		panic(err)
	}
	b := sha256.Sum256([]byte(engine.Secret(t)))
	return hex.EncodeToString(b[:16])
}

// message is sendMessage of one new message whose agent runs two model
// rounds (the first asks for the tool, the second writes the reply), each
// between two ownership checks (assertRequestOwnership: touch the request,
// touch the session), and one create_transaction call: the ledger row and
// the execution's success in one transaction.
func (a *article) message(ctx context.Context, s, n int) error {
	sid, crid := "s"+strconv.Itoa(s), "c"+strconv.Itoa(n)
	// 1. findOrCreateChatRequest
	rows, err := a.db.QueryContext(ctx, a.q["selectRequest"], sid, crid)
	if err != nil {
		return err
	}
	found := rows.Next()
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	if found {
		return fmt.Errorf("%w: request %s exists", errConflict, crid)
	}
	rid, tok := uuid(), uuid()
	if _, err := a.db.ExecContext(ctx, a.q["insertRequest"], rid, sid, crid, tok); err != nil {
		return err
	}
	// 5. the session lock
	if err := a.exec1(ctx, "claimSession", rid, tok, sid, rid, tok); err != nil {
		return err
	}
	assert := func() error {
		if err := a.exec1(ctx, "touchRequest", rid, tok); err != nil {
			return err
		}
		return a.exec1(ctx, "touchSession", sid, rid, tok)
	}
	run := func() error {
		for round := range 2 {
			if err := assert(); err != nil { // before the model call
				return err
			}
			if err := assert(); err != nil { // after it
				return err
			}
			if round == 0 {
				if err := a.tool(ctx, rid); err != nil {
					return err
				}
			}
		}
		// 7. markRequestSuccess
		return a.exec1(ctx, "markRequest", "recorded", rid, tok)
	}
	err = run()
	// 8. finally: releaseSessionExecution
	if rerr := a.exec1(ctx, "releaseSession", sid, rid, tok); err == nil {
		err = rerr
	}
	return err
}

// tool is executeTool of create_transaction with {"amount":35}.
func (a *article) tool(ctx context.Context, rid string) error {
	const name, args = "create_transaction", `{"amount":35}` // keys sorted: normalizeJson
	h := sha256.Sum256([]byte(args))
	hash := hex.EncodeToString(h[:])
	key := rid + ":" + name + ":" + hash
	var id, status string
	var tok, result sql.NullString
	var updated any
	err := a.db.QueryRowContext(ctx, a.q["selectExecution"], key).Scan(&id, &status, &tok, &result, &updated)
	if err == nil {
		return fmt.Errorf("%w: execution exists", errConflict)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	id, etok := uuid(), uuid()
	if _, err := a.db.ExecContext(ctx, a.q["insertExecution"], id, rid, name, hash, key, etok); err != nil {
		return err
	}
	tx, err := a.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, a.q["insertLedger"], rid, "35"); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, a.q["markExecution"], `{"ok":true}`, id, etok)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: markExecution matched %d rows", errConflict, n)
	}
	return tx.Commit()
}

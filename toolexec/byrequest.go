package toolexec

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/valid"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// What a request's flow asks of the tool-execution table besides single
// calls: the calls that committed, for a run that takes the request over
// (ReleaseForRequest, in takeover.go, frees the ones still running), and
// the rows of requests that the sweeper has turned into tombstones. Every
// name in these statements is a schema constant or was validated by
// lease.NewTable.

// Record is a tool call of a request that succeeded: its row, the tool,
// the hash of its canonical arguments, the stored result and its
// occurrence among identical calls (Call.Occurrence).
type Record struct {
	ExecutionID   string
	Tool          string
	ArgumentsHash string
	Result        json.RawMessage // nil when none was stored
	Occurrence    int
}

// Succeeded reads the request's tool executions that succeeded, in the
// order they were created (identical calls created at one instant by
// occurrence): one statement. It is for the flow that has
// just taken the request over, in the transaction that took it (package
// request calls it there, to hand the calls to the agent as Run.Prior).
// No success gives nil. Bad input gives an error matching lease.ErrInvalid before
// any SQL.
func (s *Store) Succeeded(ctx context.Context, db lease.DB, sessionKey, requestID string) ([]Record, error) {
	if err := s.checkRequest(db, sessionKey, requestID); err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, s.succeededQuery(), sessionKey, requestID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var rec Record
		var res string
		if err := rows.Scan(&rec.ExecutionID, &rec.Tool, &rec.ArgumentsHash, &res, &rec.Occurrence); err != nil {
			return nil, err
		}
		if res != "" {
			rec.Result = json.RawMessage(res)
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}

// succeededQuery is Succeeded's statement.
func (s *Store) succeededQuery() string {
	d := engine.DialectOf(s.l)
	return d.Rebind("SELECT " + schema.ColID + ", " + schema.ColToolName + ", " + schema.ColArgumentsHash + ", COALESCE(" +
		schema.ColResult + ", ''), " + schema.ColOccurrence + " FROM " + engine.QuotedTable(engine.TableOf(s.l), d) + " WHERE " + schema.ColSessionKey + " = ? AND " +
		schema.ColRequestID + " = ? AND " + schema.ColStatus + " = '" + schema.StoredSucceeded + "' ORDER BY " +
		schema.ColCreatedAt + ", " + schema.ColOccurrence + ", " + schema.ColID)
}

// StepsBefore reads, in one statement, the most steps that a tool call of
// the request had before it (Call.StepSeq) among the calls whose effect
// may have happened: succeeded, or started (an external effect whose
// intent was recorded). No such call gives 0. Package request keeps that
// many of a failed request's steps: the ones that decided an effect.
// Bad input gives an error matching lease.ErrInvalid before any SQL.
func (s *Store) StepsBefore(ctx context.Context, db lease.DB, sessionKey, requestID string) (int, error) {
	if err := s.checkRequest(db, sessionKey, requestID); err != nil {
		return 0, err
	}
	d := engine.DialectOf(s.l)
	var n int
	err := db.QueryRowContext(ctx, d.Rebind("SELECT COALESCE(MAX("+schema.ColStepSeq+"), 0) FROM "+engine.QuotedTable(engine.TableOf(s.l), d)+
		" WHERE "+schema.ColSessionKey+" = ? AND "+schema.ColRequestID+" = ? AND "+schema.ColStatus+" IN ('"+
		schema.StoredSucceeded+"', '"+schema.StoredStarted+"')"), sessionKey, requestID).Scan(&n)
	return n, err
}

// DeleteExpired deletes, in one statement, the tool executions of the
// requests requestIDs whose row in the request table requests is a
// tombstone (status expired), and returns how many it deleted. It keeps
// those in status started (an external effect whose outcome was never
// recorded: reconcile them yourself) and those whose lease is live. The
// request rows are read by the same statement, so a request that is not
// expired (resent and running again) keeps its tool executions.
//
// It is for the sweeper (package request), in the transaction that made
// the tombstones. No ids send nothing. Bad input gives an
// error matching lease.ErrInvalid before any SQL.
func (s *Store) DeleteExpired(ctx context.Context, db lease.DB, requests lease.Table, requestIDs []string) (int64, error) {
	if err := valid.DB("toolexec", db); err != nil {
		return 0, err
	}
	if len(requestIDs) == 0 {
		return 0, nil
	}
	args := make([]any, 0, 2*len(requestIDs))
	for _, id := range requestIDs {
		if err := valid.Text("toolexec", "request id", id, 36); err != nil {
			return 0, err
		}
		args = append(args, id)
	}
	args = append(args, args...)
	d := engine.DialectOf(s.l)
	in := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(requestIDs)), ", ") + ")"
	res, err := db.ExecContext(ctx, d.Rebind("DELETE FROM "+engine.QuotedTable(engine.TableOf(s.l), d)+" WHERE "+schema.ColRequestID+" IN "+in+
		" AND "+schema.ColStatus+" <> '"+schema.StoredStarted+"' AND ("+schema.ColToken+" IS NULL OR "+schema.ColExpiresAt+
		" <= "+engine.Now(d)+") AND "+schema.ColRequestID+" IN (SELECT "+schema.ColID+" FROM "+engine.QuotedTable(requests, d)+
		" WHERE "+schema.ColID+" IN "+in+" AND "+schema.ColStatus+" = '"+schema.StoredExpired+"')"), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// checkRequest refuses a nil db and a session key or request id that
// no tool execution can have, before any SQL.
func (s *Store) checkRequest(db lease.DB, sessionKey, requestID string) error {
	if err := valid.DB("toolexec", db); err != nil {
		return err
	}
	if err := valid.Text("toolexec", "session key", sessionKey, schema.MaxSessionKeyLen); err != nil {
		return err
	}
	return valid.Text("toolexec", "request id", requestID, 36)
}

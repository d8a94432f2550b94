package toolexec

import (
	"context"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// ReleaseForRequest frees, in one statement, the leases of the request's
// tool executions that are still running — status processing, or started
// (an external effect's intent recorded, its result not yet): holder,
// token and expiry become NULL; status, generation and result stay. It
// returns how many it freed. Bad input gives an error matching lease.ErrInvalid
// before any SQL.
//
// It is for the flow that has just taken the request over, in the
// transaction that took it (package request calls it there). A run that
// died leaves its tool lease live for up to one heartbeat interval after
// its request lease expired; without this, the new owner repeating the
// same call would be refused with *BusyError. Freed, the call is claimed
// at once by the new owner, and the old holder's token-checked mark fails
// with lease.ErrLost (its side effect is fenced by the request token as
// well, which it no longer holds). It checks no token itself: call it only
// while holding the request.
func (s *Store) ReleaseForRequest(ctx context.Context, db lease.DB, sessionKey, requestID string) (int64, error) {
	switch {
	case db == nil || reflect.ValueOf(db).Kind() == reflect.Pointer && reflect.ValueOf(db).IsNil():
		return 0, &engine.ValidationError{Package: "toolexec", Field: "db", Reason: "nil"}
	case sessionKey == "" || len(sessionKey) > schema.MaxSessionKeyLen || !utf8.ValidString(sessionKey):
		return 0, &engine.ValidationError{Package: "toolexec", Field: "session key", Reason: "empty, too long or not UTF-8"}
	case requestID == "" || len(requestID) > 36:
		return 0, &engine.ValidationError{Package: "toolexec", Field: "request id", Reason: "empty or longer than 36"}
	}
	res, err := db.ExecContext(ctx, s.releaseForRequestQuery(), sessionKey, requestID, schema.StoredProcessing, schema.StoredStarted)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// releaseForRequestQuery is ReleaseForRequest's statement. Every name in
// it was validated by lease.NewTable or is a schema constant.
func (s *Store) releaseForRequestQuery() string {
	d, t := engine.DialectOf(s.l), engine.TableOf(s.l)
	c := t.Columns()
	q := func(id string) string {
		v, _ := engine.QuoteIdent(d, id)
		return v
	}
	set := []string{q(c.Holder) + " = NULL", q(c.Token) + " = NULL", q(c.ExpiresAt) + " = NULL"}
	if c.UpdatedAt != "" {
		set = append(set, q(c.UpdatedAt)+" = "+engine.Now(d))
	}
	return d.Rebind("UPDATE " + engine.QuotedTable(t, d) + " SET " + strings.Join(set, ", ") +
		" WHERE " + q(schema.ColSessionKey) + " = ? AND " + q(schema.ColRequestID) + " = ? AND " +
		q(c.State) + " IN (?, ?) AND " + q(c.Token) + " IS NOT NULL")
}

package toolexec

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/rowlease/rowlease/lease"
)

// effectKeyNamespace is the namespace of the name-based UUIDs that
// ExecutionID makes. It never changes: a call in flight across an upgrade
// must keep its key.
var effectKeyNamespace = uuid.MustParse("653b54d5-2b68-4712-a5d3-4755e83ab626")

// ExecutionID is the id of the tool execution of a call that carries its
// client request id (Call.ClientRequestID), and so its external effect's
// EffectKey: the name-based UUID (version 5, SHA-1, RFC 9562) in the
// namespace 653b54d5-2b68-4712-a5d3-4755e83ab626 of
//
//	sessionKey NUL clientRequestID NUL tool NUL argsHash
//
// for occurrence 0 (Call.Occurrence: the first of identical calls, and
// every call made before occurrences, whose ids stay what they were), and
//
//	sessionKey NUL clientRequestID NUL tool NUL argsHash NUL occurrence
//
// for an occurrence above 0, in decimal, where argsHash is the hex SHA-256
// of the canonical arguments (see CanonicalArguments). None of the parts
// can hold a NUL (keys, ids and tool names are refused with one, the hash
// is hex and the occurrence digits), so two different calls never give
// one text. It is made from what the client sends again and the call
// itself, nothing random and nothing the database issued, so a call made
// again after its row and its request's row were lost gets the same id.
// It fits the 36-character id column.
func ExecutionID(sessionKey, clientRequestID, tool, argsHash string, occurrence int) string {
	name := make([]byte, 0, len(sessionKey)+len(clientRequestID)+len(tool)+len(argsHash)+4+20)
	name = append(name, sessionKey...)
	name = append(name, 0)
	name = append(name, clientRequestID...)
	name = append(name, 0)
	name = append(name, tool...)
	name = append(name, 0)
	name = append(name, argsHash...)
	if occurrence > 0 {
		name = append(name, 0)
		name = strconv.AppendInt(name, int64(occurrence), 10)
	}
	return uuid.NewSHA1(effectKeyNamespace, name).String()
}

// *KeyTakenError means the id a call derives from its client request id
// (ExecutionID) is already the id of a call of another request that
// still exists: the same session, client request id, tool, arguments and
// occurrence, under a request id that is not this call's. Nothing is
// written and nothing acts: acting under that key would be answered, by a
// remote side that honours it, with the other request's outcome. The
// error is a *KeyTakenError.
//
// A call whose request no longer exists is not in the way: the library
// makes one request per (session key, client request id), so such a
// request was lost with a tail of commits that an asynchronous failover
// dropped (its run went on against the new primary, where its tool
// call's row was inserted without it) or deleted by hand. Its call is
// adopted (adopt): the row moves to the new request, keeping its id, its
// state and its stored result, and the call goes on from there — a
// succeeded call's result is returned, a started external effect is
// acted again under the same key, which the remote side deduplicates.
// Its effect in the database, if any, cannot have committed: it is fenced
// by the request's lease, whose row did not exist.
//
// KeyTakenError reports a call whose derived id (its effect key) is
// another request's call. It matches lease.ErrExists, as a call whose
// request id belongs to another session does, through the duplicate-key
// error it unwraps to.
type KeyTakenError struct {
	Tool string
	// EffectKey is the derived id, the other call's execution id.
	EffectKey string
	// RequestID is the request the existing call belongs to.
	RequestID string
	// Err is the insert's *engine.DuplicateKeyError.
	Err error
}

// Error describes the conflict; it never contains a token.
func (e *KeyTakenError) Error() string {
	return fmt.Sprintf("tool %s: effect key %s is the key of a call of request %s: the client request id was used again for another request",
		e.Tool, e.EffectKey, e.RequestID)
}

// Unwrap returns the insert's duplicate-key error (lease.ErrExists).
func (e *KeyTakenError) Unwrap() error { return e.Err }

// adopt deals with an insert that hit a unique key when no call of this
// session has the call's idempotency key (dup is the insert's error). The
// derived id (key) is another request's call: when the request it names
// no longer exists in the request table (see *KeyTakenError), one
// conditional UPDATE, within the call's session, moves it to call's
// request, and adopted is true: the caller reads it as this call's. When
// that request still exists, err is a *KeyTakenError. Without a derived
// id, or when no call has it, the insert hit the (request, tool,
// arguments, occurrence) key under another session: the request id
// belongs to another session (lease.ErrExists).
func (s *Store) adopt(ctx context.Context, db Beginner, call Call, key, idem string, dup error) (adopted bool, err error) {
	otherSession := fmt.Errorf("%w: the call exists under another session key", lease.ErrExists)
	if call.ClientRequestID == "" {
		return false, otherSession // a random id is nobody else's
	}
	var owner string
	err = db.QueryRowContext(ctx, s.byIDQ, key).Scan(&owner)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, otherSession
	case err != nil:
		return false, fmt.Errorf("toolexec: reading the call under the effect key: %w", err)
	}
	res, err := db.ExecContext(ctx, s.adoptQ, call.RequestID, idem, key, call.SessionKey, owner, owner)
	if err != nil {
		return false, fmt.Errorf("toolexec: adopting the call of a request that no longer exists: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err == nil, err
	}
	return false, &KeyTakenError{Tool: call.Tool, EffectKey: key, RequestID: owner, Err: dup}
}

package toolexec

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/retry"
	"github.com/rowlease/rowlease/internal/valid"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// ErrUnknownTool means the tool name is not registered. Nothing is
// written, and it is never reported as a success. It is none of lease's
// kinds: a name the program itself got wrong, not input to correct or a
// state to wait out (500 in httpapi).
var ErrUnknownTool = errors.New("toolexec: unknown tool")

// BusyError is a tool call that another live flow is running: it matches
// lease.ErrHeld. Err is the *lease.ConflictError naming that flow's
// holder and the time left, or why the call could not be claimed.
type BusyError struct {
	Tool string
	Err  error
}

// Error describes the conflict; it never contains a token.
func (e *BusyError) Error() string {
	return fmt.Sprintf("tool %s: call running elsewhere: %v", e.Tool, e.Err)
}

// Is makes errors.Is(err, lease.ErrHeld) true.
func (e *BusyError) Is(target error) bool { return target == lease.ErrHeld }

// Unwrap returns Err.
func (e *BusyError) Unwrap() error { return e.Err }

// TransientError is a side effect's transaction that kept ending in a
// transient database error (deadlock, serialization failure, lock wait
// timeout, SQLite busy) after a few runs: nothing committed, the call is
// not marked failed, and it can be retried as it is. It unwraps to the
// database error, so lease.IsTransient is true of it.
type TransientError struct {
	Tool string
	Err  error
}

// Error describes the failure; it never contains a token.
func (e *TransientError) Error() string {
	return fmt.Sprintf("tool %s: transient database error, nothing committed: %v", e.Tool, e.Err)
}

// Unwrap returns the database error.
func (e *TransientError) Unwrap() error { return e.Err }

// FailedError carries a tool's own failure: the tool ran and failed, the
// failure is recorded (status error) and the call can be retried. It is
// none of lease's kinds: the tool's error, which it unwraps to. Its
// message is what a model should see.
type FailedError struct {
	Tool string
	Err  error
}

// Error describes the failure; it never contains a token.
func (e *FailedError) Error() string { return fmt.Sprintf("tool %s failed: %v", e.Tool, e.Err) }

// Unwrap returns the tool's error.
func (e *FailedError) Unwrap() error { return e.Err }

// Foreign makes it a engine.ForeignError: the tool's error is not the
// database's, whatever it wraps (a mail server's refusal, say), so
// lease.IsUnavailable, and httpapi's 503, do not look below it.
func (e *FailedError) Foreign() {}

// Grant is a held tool execution.
type Grant = lease.Grant[string]

// Columns returns the tool-execution table's lease columns: a copy, so
// that no package can change what New uses.
func Columns() lease.Columns {
	return lease.Columns{
		Key: schema.ColID, Holder: schema.ColHolder, Token: schema.ColToken, ExpiresAt: schema.ColExpiresAt,
		Generation: schema.ColGeneration, State: schema.ColStatus, UpdatedAt: schema.ColUpdatedAt,
	}
}

// Call is one tool call of one request.
type Call struct {
	SessionKey string
	RequestID  string
	Tool       string
	Arguments  json.RawMessage // a JSON object; canonicalized per RFC 8785
	// ClientRequestID is the client's id of the message the call serves
	// (request.Run.CallTool sets it); optional. When set, the tool
	// execution's id, which is an external effect's EffectKey, is derived
	// from the session key, this id, the tool name and the canonical
	// arguments (see ExecutionID) instead of drawn at random, so that the
	// same call made again after its row was lost — with the tail of an
	// asynchronous failover, together with its request row — gets the same
	// key. Empty, the id is random, and such a call gets a new one.
	ClientRequestID string
	// StepSeq is stored with a new call (schema.ColStepSeq): how many steps
	// the caller's run had recorded or replayed when it made the call
	// (request.Run.CallTool sets it). StepsBefore reads it back. It must
	// not be negative.
	StepSeq int
	// Occurrence numbers identical calls of one request (the same tool
	// and canonical arguments), from 0: occurrence n is an effect of its
	// own, with its own row (schema.ColOccurrence), idempotency key and
	// execution id, and the same call made again with the same occurrence
	// — a retry, a resumed run — finds that row. request.Run.CallTool
	// counts a run's identical calls (see its doc). 0, the
	// default, is the call as it was before occurrences: its keys and ids
	// leave the occurrence out (IdempotencyKey, ExecutionID). It must not
	// be negative or above math.MaxInt32 (the column is an INT).
	Occurrence int
}

// Exec is what a side effect receives.
type Exec struct {
	// Tx is the transaction the side effect writes in. It also holds the
	// fences' row locks and, at commit, the success mark.
	Tx *sql.Tx
	// Generation is the tool execution's fencing generation: hand it to
	// systems outside the database, which must refuse a lower one.
	Generation int64
	// Fences are the generations of the other levels (session, request), by name.
	Fences map[string]int64
	// Call is the call, and Canonical its canonical arguments.
	Call      Call
	Canonical []byte
	// ExecutionID is the tool execution's row id.
	ExecutionID string
}

// SideEffect runs a tool. It returns the JSON result to store. Writes to
// the database go through x.Tx; they commit if and only if the tool is
// marked done in the same transaction. A write through another connection
// is outside the fence: SQLite refuses it (*OutsideTxError), PostgreSQL
// and MySQL commit it on its own (see the package documentation).
type SideEffect func(ctx context.Context, x Exec) (json.RawMessage, error)

// Result is the outcome of a call.
type Result struct {
	ExecutionID string
	Output      json.RawMessage // the stored result
	Reused      bool            // true when a previous success was returned without running the tool
	Generation  int64
}

// Beginner is a database that can also begin transactions (*sql.DB, *sqlx.DB).
type Beginner = lease.TxBeginner

// Config configures a Store.
type Config struct {
	Dialect lease.Dialect
	// Table is the tool-execution table; empty means the shipped one.
	Table string
	// Lease are the lease options.
	Lease lease.Options
	// RequestTable is the request table of the calls' requests (package
	// request's; empty means the shipped one): a call whose derived id
	// (ExecutionID) is held by a call of a request that no longer exists
	// there is adopted by the new request (see Store.Execute).
	RequestTable string
}

// Store keeps tool executions. It is safe for concurrent use.
type Store struct {
	l      *lease.Lease[string]
	findQ  string
	byIDQ  string         // the request of the call with an id (adopt)
	adoptQ string         // a call of a request that no longer exists, taken by this one (adopt)
	obs    lease.Observer // from Config.Lease.Observer; nil costs nothing
}

// New validates cfg and returns a Store.
func New(cfg Config) (*Store, error) {
	name := cfg.Table
	if name == "" {
		name = schema.ToolExecutionTable
	}
	t, err := lease.NewTable(name, Columns())
	if err != nil {
		return nil, err
	}
	l, err := lease.New[string](cfg.Dialect, t, cfg.Lease)
	if err != nil {
		return nil, err
	}
	// The idempotency key holds the occurrence (above 0); the column is
	// matched as well, so that a row whose key was written otherwise is
	// never taken for another occurrence's.
	find := "SELECT id, status, COALESCE(result, ''), generation FROM " + engine.QuotedTable(t, cfg.Dialect) +
		" WHERE session_key = ? AND idempotency_key = ? AND " + schema.ColOccurrence + " = ?"
	byID := "SELECT request_id FROM " + engine.QuotedTable(t, cfg.Dialect) + " WHERE id = ?"
	reqName := cfg.RequestTable
	if reqName == "" {
		reqName = schema.RequestTable
	}
	rt, err := lease.NewTable(reqName, lease.Columns{Key: schema.ColID, Holder: schema.ColHolder, Token: schema.ColToken,
		ExpiresAt: schema.ColExpiresAt, Generation: schema.ColGeneration})
	if err != nil {
		return nil, err
	}
	// The call's row moves to the new request only while the request it
	// names is absent from the request table (a tail an asynchronous
	// failover lost, or a row deleted by hand), and only within its
	// session: an absent request can never write the row again, as every
	// write of a call is fenced by its request's lease.
	adopt := "UPDATE " + engine.QuotedTable(t, cfg.Dialect) + " SET " + schema.ColRequestID + " = ?, " +
		schema.ColIdempotencyKey + " = ? WHERE id = ? AND " + schema.ColSessionKey + " = ? AND " + schema.ColRequestID +
		" = ? AND NOT EXISTS (SELECT 1 FROM " + engine.QuotedTable(rt, cfg.Dialect) + " r WHERE r." + schema.ColID + " = ?)"
	return &Store{l: l, findQ: cfg.Dialect.Rebind(find), byIDQ: cfg.Dialect.Rebind(byID), adoptQ: cfg.Dialect.Rebind(adopt),
		obs: cfg.Lease.Observer}, nil
}

// Lease returns the underlying lease.
func (s *Store) Lease() *lease.Lease[string] { return s.l }

// ExecOptions carry what a call needs besides the call itself.
type ExecOptions struct {
	Holder string        // the flow running the call
	TTL    time.Duration // the tool lease's TTL
	// Fences are checked, in order, inside the side effect's transaction
	// (session first, then request), so the side effect commits only if they
	// all still hold.
	Fences []lease.Fence
	// Watch, when set, is called with the tool grant while the tool runs
	// (e.g. to add it to a heartbeat); the returned func is called after.
	// Execute calls it again, with the same grant, for each run of the side
	// effect's transaction after a transient error (the previous stop
	// called first): the watch should carry on from the lease's last
	// renewal, as request.Run's does (one heartbeat.LeaseRenewer per call).
	Watch func(g Grant) (stop func())
	// ReleaseTimeout bounds the clean-up writes made after a failure, even
	// when ctx is already cancelled, and the statement that asks a side
	// effect's transaction whether its connection still works after the
	// side effect returned a network error. Zero means 5s.
	ReleaseTimeout time.Duration
	// Flow, when set, is the database the flow's heartbeat renews through
	// (the same FlowDB given to heartbeat.ForLease). On SQLite it lets
	// those renewals run inside the side effect's transaction instead of
	// waiting behind it; see engine.FlowDB. request.Run sets it.
	Flow *engine.FlowDB
}

// db is where the clean-up writes go: the pool, never into an open
// transaction of the flow (o.Flow routes its heartbeat's renewals there on
// SQLite), whose rollback would undo the write after it was reported
// made and leave the tool lease held until its TTL. On SQLite a clean-up
// write made while another transaction of the flow holds the write lock
// (a parallel tool call, an InTx) waits for it, up to ReleaseTimeout.
func (o ExecOptions) db(db Beginner) lease.DB {
	return db
}

const defaultReleaseTimeout = 5 * time.Second

// IdempotencyKey is the key of one call: request id, tool name and the
// hex SHA-256 of the canonical arguments, separated by colons, and then,
// for an occurrence above 0 (Call.Occurrence), a colon and its decimal
// number. Occurrence 0 gives the key calls had before occurrences, so
// their rows are still found. A key ends in the 64 hex digits of the hash
// or in a colon and digits, so a key with an occurrence is never one
// without; it fits the 255-character column.
func IdempotencyKey(requestID, tool, argsHash string, occurrence int) string {
	key := requestID + ":" + tool + ":" + argsHash
	if occurrence > 0 {
		key += ":" + strconv.Itoa(occurrence)
	}
	return key
}

func validateCall(c Call) error {
	if err := valid.Text("toolexec", "session key", c.SessionKey, schema.MaxSessionKeyLen); err != nil {
		return err
	}
	if err := valid.Text("toolexec", "request id", c.RequestID, 36); err != nil {
		return err
	}
	if c.ClientRequestID != "" {
		if err := valid.Text("toolexec", "client request id", c.ClientRequestID, schema.MaxClientRequestIDLen); err != nil {
			return err
		}
	}
	if c.StepSeq < 0 {
		return &engine.ValidationError{Package: "toolexec", Field: "step seq", Reason: "negative"}
	}
	if c.Occurrence < 0 || c.Occurrence > math.MaxInt32 {
		return &engine.ValidationError{Package: "toolexec", Field: "occurrence", Reason: "negative or above math.MaxInt32"}
	}
	// A tool name is part of a unique key: the same text rule as keys.
	return valid.Text("toolexec", "tool name", c.Tool, schema.MaxToolNameLen)
}

// Execute runs one tool call with exactly-once commit of its side effect:
//
//   - a previous success returns its stored result without running fn;
//   - a previous error is retried;
//   - a call left processing by a holder whose lease expired is taken over;
//   - a call processing under a live lease gives *BusyError;
//   - a call whose external effect was announced and never recorded
//     (started) gives *UnknownOutcomeError: running it here could do it twice.
//
// fn runs in a transaction that then confirms every fence (session,
// request: a token-checked write each) and finally marks the tool done,
// token-checked (on PostgreSQL the confirmations and the mark are one
// statement, see lease.RunFenced); it commits only if all of them
// still hold. The lease rows
// are locked only for that end, so the heartbeat keeps renewing them while
// fn works. If fn fails, the transaction rolls back and the failure is
// recorded (status error) and returned as *FailedError; a transient
// database error is run again a few times, then returned as
// *TransientError. Invalid arguments give *ArgumentsError and write
// nothing.
func (s *Store) Execute(ctx context.Context, db Beginner, call Call, o ExecOptions, fn SideEffect) (Result, error) {
	if fn == nil {
		return Result{}, &engine.ValidationError{Package: "toolexec", Field: "side effect", Reason: "nil"}
	}
	c, err := s.start(ctx, db, call, &o)
	if err != nil || c.res != nil {
		return c.result(err)
	}
	g := c.g
	if c.started {
		// An effect outside the database was announced for this call and
		// never recorded: running it in a transaction now could do it twice.
		return Result{}, s.giveBack(ctx, db, g, o, s.unknown(call, g, nil))
	}
	unwatch := func() {}
	defer func() { unwatch() }()
	var out json.RawMessage
	err = s.retryTransient(ctx, call.Tool, func() error {
		// Every run of the transaction is supervised: the mark lets go of
		// the tool lease (see runTx), so a run after a transient error at
		// the mark or at the commit watches it again.
		unwatch = watch(o, g)
		var err error
		out, err = s.runTx(ctx, db, call, c.canonical, g, o, fn, unwatch)
		unwatch()
		return err
	})
	if err == nil {
		return Result{ExecutionID: g.Key, Output: out, Generation: g.Generation}, nil
	}
	return Result{}, s.afterFailure(ctx, db, g, o, err)
}

// claimed is a validated call, claimed: a grant to run under, or a stored
// result.
type claimed struct {
	g         Grant
	started   bool // the call's external effect was announced before, without a result
	canonical []byte
	res       *Result
}

func (c claimed) result(err error) (Result, error) {
	if c.res != nil {
		return *c.res, nil
	}
	return Result{}, err
}

// start validates a call (before any SQL) and claims it (see claim). It
// fills in o's defaults.
func (s *Store) start(ctx context.Context, db Beginner, call Call, o *ExecOptions) (claimed, error) {
	if db == nil {
		return claimed{}, &engine.ValidationError{Package: "toolexec", Field: "db", Reason: "nil"}
	}
	if err := validateCall(call); err != nil {
		return claimed{}, err
	}
	canonical, hash, err := CanonicalArguments(call.Arguments)
	if err != nil {
		return claimed{}, err
	}
	if o.ReleaseTimeout <= 0 {
		o.ReleaseTimeout = defaultReleaseTimeout
	}
	g, started, res, err := s.claim(ctx, db, call, hash, *o)
	return claimed{g: g, started: started, canonical: canonical, res: res}, err
}

// watch supervises the tool lease while the call runs (o.Watch). The
// returned unwatch is idempotent; call it before the statement that marks
// or releases the lease, or a renewal racing that statement would report a
// loss.
func watch(o ExecOptions, g Grant) (unwatch func()) {
	if o.Watch == nil {
		return func() {}
	}
	var once sync.Once
	stop := o.Watch(g)
	return func() { once.Do(stop) }
}

// generations are the fences' generations by name, as handed to effects.
func generations(fences []lease.Fence) map[string]int64 {
	gens := make(map[string]int64, len(fences))
	for _, f := range fences {
		gens[f.Name()] = f.Generation()
	}
	return gens
}

// maxTxAttempts bounds the runs of a side effect's transaction that end in
// a transient database error (deadlock, serialization failure, lock wait
// timeout, SQLite busy): each rolled back entirely, so running it again is
// safe.
const maxTxAttempts = retry.MaxAttempts

// retryTransient runs f again after a transient database error, at most
// maxTxAttempts runs in all, with backoff, while ctx lasts. A transient
// error it gives up on is returned as a *TransientError.
//
// The wait before run attempt+1 is retry.Backoff(ctx, attempt+1): retry's
// first delay is 5ms and doubles, so the waits here are 10ms, 20ms, 40ms
// (each jittered between half and one and a half times), as toolexec's
// waits have always been.
func (s *Store) retryTransient(ctx context.Context, tool string, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || !lease.IsTransient(err) || attempt == maxTxAttempts || !retry.Backoff(ctx, attempt+1) {
			if lease.IsTransient(err) {
				var te *TransientError
				if !errors.As(err, &te) {
					err = &TransientError{Tool: tool, Err: err}
				}
			}
			return err
		}
	}
}

// afterFailure records what a failed call leaves behind and returns the
// error to report: a tool's own failure is marked error; anything else (a
// lost fence, a database error, a cancelled run) gives the tool lease back,
// so the flow that owns the request now can take the call over at once.
// Its writes run with a bounded context, even when ctx is done. A
// transient error comes as retryTransient left it: a *TransientError.
func (s *Store) afterFailure(ctx context.Context, db Beginner, g Grant, o ExecOptions, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.ReleaseTimeout)
	defer cancel()
	var failed *FailedError
	if errors.As(err, &failed) {
		_, merr := s.l.Transition(cctx, o.db(db), g, lease.ChangeOptions{
			From: []string{schema.StoredProcessing, schema.StoredStarted}, To: schema.StoredFailed,
			Set: []lease.Assignment{lease.Set(schema.ColError, schema.ErrorText(failed.Err.Error()))},
		})
		return errors.Join(err, releaseTimeout(o).Of(cctx, merr))
	}
	if rerr := s.l.Release(cctx, o.db(db), g); rerr != nil && !errors.Is(rerr, lease.ErrLost) {
		return errors.Join(err, releaseTimeout(o).Of(cctx, rerr))
	}
	return err
}

// claim inserts the call held, or deals with the existing row. It returns
// either a grant to run under, or a stored result.
func (s *Store) claim(ctx context.Context, db Beginner, call Call, hash string, o ExecOptions) (g Grant, started bool, res *Result, err error) {
	idem := IdempotencyKey(call.RequestID, call.Tool, hash, call.Occurrence)
	key := uuid.NewString()
	if call.ClientRequestID != "" {
		key = ExecutionID(call.SessionKey, call.ClientRequestID, call.Tool, hash, call.Occurrence)
	}
	g, err = s.l.Create(ctx, db, key, o.Holder, o.TTL, lease.CreateOptions{State: schema.StoredProcessing, Set: []lease.Assignment{
		lease.Set(schema.ColSessionKey, call.SessionKey), lease.Set(schema.ColRequestID, call.RequestID),
		lease.Set(schema.ColToolName, call.Tool), lease.Set(schema.ColArgumentsHash, hash),
		lease.Set(schema.ColIdempotencyKey, idem), lease.Set(schema.ColStepSeq, call.StepSeq),
		lease.Set(schema.ColOccurrence, call.Occurrence),
	}})
	if err == nil || !errors.Is(err, lease.ErrExists) {
		return g, false, nil, err
	}
	dup := err
	for attempt := 0; attempt < 3; attempt++ {
		var id, status, result string
		var generation int64
		err := db.QueryRowContext(ctx, s.findQ, call.SessionKey, idem, call.Occurrence).Scan(&id, &status, &result, &generation)
		if errors.Is(err, sql.ErrNoRows) {
			adopted, aerr := s.adopt(ctx, db, call, key, idem, dup)
			if adopted {
				continue // now this call's: read it, and take it as it stands
			}
			return Grant{}, false, nil, aerr
		}
		if err != nil {
			return Grant{}, false, nil, fmt.Errorf("toolexec: reading the existing call: %w", err)
		}
		if status == schema.StoredSucceeded {
			return Grant{}, false, &Result{ExecutionID: id, Output: json.RawMessage(result), Reused: true, Generation: generation}, nil
		}
		// error → retry; processing → take over if its lease expired;
		// started → take over, keeping the state: the outcome of its
		// external effect is unknown. The acquire itself decides: a live
		// lease makes it a conflict.
		opts := lease.AcquireOptions{InStates: []string{status}}
		if status == schema.StoredFailed {
			opts.SetState = schema.StoredProcessing
			opts.Set = []lease.Assignment{lease.Set(schema.ColError, nil)}
		}
		g, err := s.l.AcquireWith(ctx, db, id, o.Holder, o.TTL, opts)
		switch {
		case err == nil:
			return g, status == schema.StoredStarted, nil, nil
		case errors.Is(err, lease.ErrHeld):
			return Grant{}, false, nil, &BusyError{Tool: call.Tool, Err: err}
		case errors.Is(err, lease.ErrState):
			continue // it moved on (e.g. to success) under us: read again
		default:
			return Grant{}, false, nil, err
		}
	}
	return Grant{}, false, nil, &BusyError{Tool: call.Tool, Err: errors.New("the call kept changing state")}
}

func (s *Store) runTx(ctx context.Context, db Beginner, call Call, canonical []byte, g Grant, o ExecOptions, fn SideEffect, unwatch func()) (out json.RawMessage, err error) {
	gens := generations(o.Fences)
	err = s.runFenced(ctx, db, call.Tool, "effect", engine.FencedTx{
		Fences: o.Fences,
		Flow:   o.Flow,
		Keep:   []lease.Fence{s.l.Fence("tool:"+call.Tool, g)},
		// The mark comes last (session → request → tool, the one lock
		// order), in the fences' statement where the dialect has one
		// (see lease.RunFenced). From here the transaction holds the tool
		// row until commit, so the heartbeat lets go of it first: a
		// renewal racing the token-clearing mark would report a loss.
		Mark: func() []engine.JointOp {
			unwatch()
			return []engine.JointOp{s.succeededOp(g, schema.StoredProcessing, out)}
		},
	}, func(tx *sql.Tx) error {
		var ferr error
		out, ferr = fn(ctx, Exec{Tx: tx, Generation: g.Generation, Fences: gens, Call: call, Canonical: canonical, ExecutionID: g.Key})
		if ferr != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if oerr := outsideTx(call.Tool, o, ferr); oerr != nil {
				return oerr // not transient: a write through the pool, see OutsideTxError
			}
			if lease.IsTransient(ferr) {
				return &TransientError{Tool: call.Tool, Err: ferr}
			}
			unavailable := s.unavailableIn(ctx, tx, ferr, o)
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if unavailable {
				// The database, not the tool: the connection broke or the
				// server went away. Nothing committed (the error came
				// before the commit); the call is left free, not marked
				// error, and the run ends with the database's error.
				return fmt.Errorf("toolexec: tool %s: the side effect's transaction: %w", call.Tool, ferr)
			}
			// The tool's own failure, a network error of another service
			// it called included.
			return &FailedError{Tool: call.Tool, Err: ferr}
		}
		if len(out) == 0 {
			out = json.RawMessage("null")
		}
		if !json.Valid(out) {
			return &FailedError{Tool: call.Tool, Err: errors.New("result is not valid JSON")}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// unavailableIn reports whether ferr, a side effect's error, is its
// transaction's database gone (engine.IsUnavailableIn): a driver's error
// of a broken connection, or a network error while tx's own connection
// is broken too. A network error of another service the side effect
// called (mail, Redis, gRPC) with tx working is the tool's failure. The
// statement that asks tx is bounded by o.ReleaseTimeout.
func (s *Store) unavailableIn(ctx context.Context, tx *sql.Tx, ferr error, o ExecOptions) bool {
	pctx, cancel := context.WithTimeout(ctx, o.ReleaseTimeout)
	defer cancel()
	return engine.IsUnavailableIn(pctx, tx, ferr)
}

// succeededOp marks the call that g holds success, from state from, with
// its result out: the last write of a call's fenced transaction (its
// FencedTx.Mark), token-checked (lease.ErrLost if g no longer holds it).
func (s *Store) succeededOp(g Grant, from string, out json.RawMessage) engine.JointOp {
	return engine.TransitionOp(s.l, g, lease.ChangeOptions{
		From: []string{from}, To: schema.StoredSucceeded,
		Set: []lease.Assignment{lease.Set(schema.ColResult, string(out))},
	})
}

// Close closes the prepared statements the Store's lease keeps (see
// lease.Lease.Close). It is safe to call while other goroutines use the
// Store, and more than once; the Store stays usable and sends text from
// then on. Close it before the pools it was used with.
func (s *Store) Close() error { return s.l.Close() }

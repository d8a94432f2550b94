package request

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/retry"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// begin takes the session and the request for msg (run), or answers it
// from its request (out), or has the queue place it (p), trying again
// while the request changes under it. Handle acts on what it returns: it
// runs run, acts on p (onPlaced), or returns out. p is kept across the
// attempts, so that a message is queued under one id, and an interrupting
// Handle registers once to run it (own); Handle gives that registration
// up (disown) whatever begin came to.
func (r *Runner) begin(ctx context.Context, msg Message) (*Run, Outcome, placement, error) {
	holder := r.holder()
	var p placement
	// A request read as missing may be inserted by a duplicate a moment
	// later, and one read as existing may change state before it is taken;
	// and MySQL or PostgreSQL may roll a transaction back to break a
	// deadlock. Either way nothing was changed: start again.
	var last error // the last attempt's error, kept as the cause
	for attempt := 0; attempt < 5; attempt++ {
		run, out, err := r.beginOnce(ctx, msg, holder, &p)
		if errors.Is(err, errVanished) {
			last = nil
			continue
		}
		if engine.IsRetryable(err) && retry.Backoff(ctx, attempt+1) {
			last = err
			continue // a jittered pause: a certification failure repeats at once on Galera
		}
		return run, out, p, err
	}
	if last != nil {
		// A database that keeps refusing (a deadlock each time, SQLite busy
		// with no busy timeout) is told apart from a request that kept
		// changing state: errors.Is matches both ErrInFlight and the cause.
		return nil, Outcome{}, p, fmt.Errorf("%w: the database kept refusing the locks: %w", ErrInFlight, last)
	}
	return nil, Outcome{}, p, fmt.Errorf("%w: the request kept changing state", ErrInFlight)
}

// errVanished: the request row appeared, was deleted, or changed state,
// between two statements of beginOnce; begin tries again.
var errVanished = errors.New("request: row changed under us")

// step is where an attempt to start a message stands, and what it does
// next: the claimer's first statement gives the first step, and each step
// of beginOnce the next, until one ends the attempt.
type step struct {
	// run: the locks are taken; the attempt ends, and the run starts.
	run *Run
	// claim: take the locks for this request: a new one, through the
	// claimer, or the existing one, taken over.
	claim *claim
	// read: answer from the request (answer): ex as the claimer's
	// statement read it, or, with ex nil, as read now.
	read bool
	ex   *existing
	// busy: a new message's claim found its session busy
	// (*session.BusyError). Its request is read again (read), and if it is
	// still missing, the message is refused, or the queue places it.
	busy error
}

// beginOnce makes one attempt to start msg. The claimer chosen by New
// makes its first step: the read of the request, or on PostgreSQL, for a
// message with OnBusy Reject, the read and the claim of a new request in
// one statement. Then each turn takes the step the last one left: claim a
// new request (through the claimer) or take the existing one over
// (claim); answer from the request as read (answer, existing.go), which
// may leave a takeover to claim, or, when there is no request, a new one;
// and, when a new message's session is busy and its request still
// missing, refuse it (OnBusy Reject) or let the queue place it (onBusy,
// queue.go, into p). No step calls back into another.
func (r *Runner) beginOnce(ctx context.Context, msg Message, holder string, p *placement) (*Run, Outcome, error) {
	s, err := r.claimer.first(ctx, msg, holder)
	for err == nil && s.run == nil {
		switch {
		case s.claim != nil && s.claim.kind == newRequest:
			s.run, err = r.claimer.claimNew(ctx, *s.claim)
			if errors.As(err, new(*session.BusyError)) {
				// Busy with this very message, sent a moment ago by a
				// duplicate? Then the answer is about the request.
				s, err = step{read: true, busy: err}, nil
			}
		case s.claim != nil:
			s.run, err = r.claim(ctx, *s.claim)
			switch {
			case errors.As(err, new(*session.NotFoundError)):
				// The session row is gone: that is final, and the same
				// answer as on the new-request path (it also matches
				// lease.ErrNotFound, so it is told apart first).
			case errors.Is(err, lease.ErrState) || errors.Is(err, lease.ErrNotFound) || errors.Is(err, errAskedToStop):
				err = errVanished // it finished, failed, went away or was asked to stop under us
			}
		case s.read:
			c, out, aerr := r.answer(ctx, msg, s.ex, holder)
			switch {
			case c != nil:
				s = step{claim: c}
			case !errors.Is(aerr, sql.ErrNoRows):
				return nil, out, aerr
			case s.busy == nil:
				s = step{claim: &claim{kind: newRequest, msg: msg, id: uuid.NewString(), holder: holder}}
			default:
				s = step{busy: s.busy}
			}
		default: // s.busy, and the request is still missing
			if msg.OnBusy == Reject {
				return nil, Outcome{}, s.busy
			}
			return nil, Outcome{}, r.onBusy(ctx, msg, p)
		}
	}
	if errors.Is(err, lease.ErrExists) {
		err = errVanished // a duplicate inserted the new request meanwhile: read it
	}
	return s.run, Outcome{}, err
}

// claimer takes the locks for a new message, in the way its dialect
// allows: chosen once, by New (newClaimer). The conditions that depend on
// the message itself (OnBusy) are the claimer's own.
type claimer interface {
	// first is an attempt's first step: the read of msg's request, left to
	// answer; or, where the claimer can, the read and the claim of a new
	// request in one statement.
	first(ctx context.Context, msg Message, holder string) (step, error)
	// claimNew takes the session and inserts the new request c, both or
	// neither (see claim); a busy session is its *session.BusyError.
	claimNew(ctx context.Context, c claim) (*Run, error)
}

// newClaimer returns the claimer of r's dialect: one statement where
// PostgreSQL allows it (atOnceClaimer), two autocommit statements on
// MySQL (requestFirstClaimer), a transaction on SQLite (txClaimer).
func newClaimer(r *Runner) claimer {
	switch r.cfg.Dialect {
	case lease.Postgres:
		return atOnceClaimer{r}
	case lease.MySQL:
		return requestFirstClaimer{r}
	}
	return txClaimer{r}
}

// txClaimer takes a new message's locks in claim's transaction, the
// session first: MySQL and SQLite cannot write two tables in one INSERT or
// UPDATE. Its first step is the read of the request (answer, find).
type txClaimer struct{ r *Runner }

// first leaves the read to answer.
func (t txClaimer) first(context.Context, Message, string) (step, error) {
	return step{read: true}, nil
}

// claimNew is claim's transaction (withSession: a missing session row is
// created first when Config.Session.AutoCreate is set).
func (t txClaimer) claimNew(ctx context.Context, c claim) (*Run, error) {
	return t.r.withSession(ctx, c, t.r.claim)
}

// atOnceClaimer takes a new message with OnBusy Reject (nothing to count
// ahead of it) in one autocommit statement, no transaction: PostgreSQL is
// the only dialect with a statement that writes two tables. Its first
// step is also the read (claimUnless, engine.AcquireCreateUnless): a
// replay stays one statement. When the statement does not take the
// session (busy, or its lock row missing), it wrote nothing, and claim's
// transaction gives the answer, exactly as for every other message. Queue
// and Interrupt messages read the messages ahead between the session and
// the request, and keep the transaction.
type atOnceClaimer struct{ r *Runner }

// first reads the request and, if there is none, takes the session and
// inserts the request, for a Reject message; for the others it leaves the
// read to answer.
func (a atOnceClaimer) first(ctx context.Context, msg Message, holder string) (step, error) {
	if msg.OnBusy != Reject {
		return step{read: true}, nil
	}
	run, ex, found, done, err := a.r.claimUnless(ctx, msg, holder)
	switch {
	case found:
		return step{read: true, ex: &ex}, nil
	case done:
		return step{run: run}, err
	}
	// Not taken: the session is busy or has no lock row, and the request
	// did not exist. The transaction answers.
	return step{claim: &claim{kind: newRequest, msg: msg, id: uuid.NewString(), holder: holder, tried: true}}, nil
}

// requestFirstClaimer takes a new message with OnBusy Reject on MySQL in
// two autocommit statements, no transaction and no read before them: the
// request is inserted first, born held by its run, and then the session
// taken in the request's name. Where the claim's transaction costs five
// round trips (the read, BEGIN, two writes, COMMIT), this costs two, which
// is what a message pays across a network.
//
// The request first, so that a duplicate is refused at once and told
// apart: its insert fails on the (session, client request id) key, having
// written nothing, and answer reads the request that exists (a replay
// costs that failed insert and the read). The session first would leave a
// window, between the two writes, in which a duplicate found the session
// held and no request, and was refused as session-busy, not in flight.
//
// Between the two writes the request is processing and held, with no
// session: a resend of it is in flight (as it is a moment later), and a
// process that dies there leaves a request whose lease expires with no
// session held, which is resumed like any dead run. When the session is
// busy (or has no lock row) the request is deleted again, token-checked,
// and the answer is the transaction's path: a busy session reads the
// request once more (a duplicate may have been inserted since) and
// refuses the message; a missing lock row goes to claimNew (withSession,
// Session.AutoCreate). Queue and Interrupt messages read the messages
// ahead between the session and the request, and keep the transaction.
type requestFirstClaimer struct{ r *Runner }

// first inserts the request and takes the session, for a Reject message;
// for the others it leaves the read to answer.
func (q requestFirstClaimer) first(ctx context.Context, msg Message, holder string) (step, error) {
	if msg.OnBusy != Reject {
		return step{read: true}, nil
	}
	r := q.r
	c := claim{kind: newRequest, msg: msg, id: uuid.NewString(), holder: holder}
	g, err := r.req.Create(ctx, r.db, c.id, c.holder, r.cfg.TTL, newRow(msg))
	switch {
	case errors.Is(err, lease.ErrExists):
		return step{read: true}, nil // the request exists: answer it
	case errors.Is(err, lease.ErrInvalid):
		return step{}, err // nothing was written
	case err != nil:
		// The insert's outcome is unknown: a row it made is deleted
		// (token-checked: a row it did not make is left alone).
		r.releaseQuietly(ctx, func(cctx context.Context) error { return r.req.Delete(cctx, r.db, g) })
		return step{}, err
	}
	sg, err := r.sessions.AcquireExisting(ctx, r.db, msg.SessionKey, c.id, r.cfg.TTL)
	if err == nil {
		return step{run: &Run{r: r, msg: msg, id: c.id, holder: c.holder, sess: sg, req: g}}, nil
	}
	busy := errors.As(err, new(*session.BusyError))
	missing := errors.As(err, new(*session.NotFoundError))
	if !busy && !missing {
		// The acquire's outcome is unknown: the session too is given back
		// if this request holds it (sg is the grant it tried).
		r.giveBack(ctx, sg, g)
		return step{}, err
	}
	// Not taken, and nothing was written to the session: the request goes
	// again, at once, with a bounded context that survives ctx's end (a
	// caller that gives up now must not leave a request to be run). A
	// delete that fails returns its error, and leaves the request to
	// expire and be resumed, as a run that died there.
	cctx, cancel := r.detached(ctx)
	derr := r.req.Delete(cctx, r.db, g)
	cancel()
	if derr != nil && !errors.Is(derr, lease.ErrLost) {
		return step{}, derr
	}
	if busy {
		return step{read: true, busy: err}, nil
	}
	return step{claim: &c}, nil // no lock row: claimNew's transaction, with AutoCreate
}

// claimNew is claim's transaction, through withSession, for the messages
// first leaves to the read and for a session without a lock row.
func (q requestFirstClaimer) claimNew(ctx context.Context, c claim) (*Run, error) {
	return q.r.withSession(ctx, c, q.r.claim)
}

// claimNew makes once, through withSession: a missing session row is
// created first when Config.Session.AutoCreate is set, and the statement
// is made again.
func (a atOnceClaimer) claimNew(ctx context.Context, c claim) (*Run, error) {
	return a.r.withSession(ctx, c, a.once)
}

// once claims c in one statement (claimAtOnce) for a Reject message,
// unless first's statement has just tried, and in claim's transaction
// when that did not take the session.
func (a atOnceClaimer) once(ctx context.Context, c claim) (*Run, error) {
	if c.msg.OnBusy == Reject && !c.tried {
		if run, done, err := a.r.claimAtOnce(ctx, c); done {
			return run, err
		}
	}
	return a.r.claim(ctx, c)
}

// withSession makes a claim of the new request c (take). A session
// without a lock row gets one first when Config.Session.AutoCreate is set:
// inserted on its own, outside the claim's transaction, and the claim made
// again (an at-once claim too: c.tried is reset).
func (r *Runner) withSession(ctx context.Context, c claim, take func(context.Context, claim) (*Run, error)) (*Run, error) {
	run, err := take(ctx, c)
	if errors.As(err, new(*session.NotFoundError)) && r.cfg.Session.AutoCreate {
		if err := r.sessions.Create(ctx, r.db, c.msg.SessionKey); err != nil {
			return nil, err
		}
		c.tried = false
		run, err = take(ctx, c)
		// On a multi-primary cluster the transaction may run on a node
		// that has not applied the insert yet (inside a transaction
		// wsrep_sync_wait does not wait): try again, briefly.
		for attempt := 1; errors.As(err, new(*session.NotFoundError)) && r.cfg.Lease.MultiPrimary &&
			attempt < retry.MaxAttempts && retry.Backoff(ctx, attempt); attempt++ {
			run, err = take(ctx, c)
		}
	}
	return run, err
}

// claimKind is the path that takes a request.
type claimKind int

const (
	// newRequest: a new message; its request is inserted, born held by
	// the run.
	newRequest claimKind = iota
	// resend: a resend of a failed request, or of one whose run died (its
	// lease expired or given back): the request is taken over.
	resend
	// queueHead: the head of a session's queue: a queued message started
	// (queued → processing), or the dead run of a message that came
	// through the queue (or was accepted at once) taken over.
	queueHead
)

// claim is what claim needs to take one request.
type claim struct {
	kind   claimKind
	msg    Message // for queueHead, as it was stored
	id     string  // the request's id: the session's holder
	holder string  // this run, in the request's holder column
	// from is the request's stored status (resend, queueHead): the claim
	// takes it only in that status. A dead or failed run's request
	// (processing, error) is taken over with its tool calls and steps.
	from string
	// fromQueue: the request came through the queue (see Run.fromQueue).
	fromQueue bool
	// tried: a new request's at-once claim was made and did not take the
	// session: the claimer does not make it again.
	tried bool
}

// claim takes the session and then the request, in one transaction: the
// one lock order, and both or neither. Every path that runs a request
// comes through it (claimKind), but a new message that its claimer takes
// in one statement (atOnceClaimer). A busy session is an error matching
// *session.BusyError (lease.ErrHeld); a request held by a live run, one
// matching ErrInFlight (and lease.ErrHeld); either way the transaction
// rolls back and nothing was written, so no session is left held by a
// request that does not exist.
//
// Inside the transaction, after the session:
//   - a new Queue or Interrupt message counts the messages it must not
//     overtake (ahead): if there are any, the session counts as busy;
//   - a queue head first marks interrupted (or cancelled) the dead runs of
//     the session that were asked to stop;
//   - a takeover of a dead run (from processing) reads whether the
//     request was asked to stop (Cancel, an interrupt) after the read that
//     chose it: then it rolls back with errAskedToStop, and the caller
//     settles the request instead of running it;
//   - a takeover (from processing or error) frees the leases of the
//     request's tool executions still marked running — a dead run's tool
//     lease can outlive its request lease, and freed, this run claims the
//     same call at once and the old run can mark none of them — and reads
//     the tool calls that committed (Run.Prior) and the recorded steps.
//
// When the commit's outcome is unknown (the connection dropped, or ctx was
// cancelled, with the reply on the wire) whatever took effect is given
// back at once, token-checked, so no lock is left held for a TTL with no
// heartbeat: the session first (its release waits for a commit still in
// progress to end, so the request's undo then sees the row), then a new
// request is deleted and a taken one released (it stays processing and
// free, and a retry resumes it).
func (r *Runner) claim(ctx context.Context, c claim) (run *Run, err error) {
	// What the claim writes into the request's row besides its lease,
	// known before the transaction begins.
	var row lease.CreateOptions
	var opts lease.AcquireOptions
	if c.kind == newRequest {
		row = newRow(c.msg)
	} else {
		opts = lease.AcquireOptions{InStates: []string{c.from}, SetState: schema.StoredProcessing}
		if c.from == schema.StoredFailed {
			opts.Set = []lease.Assignment{lease.Set(schema.ColError, nil)}
		}
		if c.kind == resend {
			// A resend's agent runs the request now: its name is the one
			// a later resume looks for.
			opts.Set = append(opts.Set, lease.Set(schema.ColAgent, agentValue(c.msg.Agent)))
		}
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	key := c.msg.SessionKey
	// The lease operations run their kept statements in tx (engine.InTx).
	ltx := engine.InTx(r.db, tx)
	var sg session.Grant
	if c.kind == resend {
		// Acquire: with Session.AutoCreate it creates a missing lock
		// row inside this transaction. A new message creates it outside
		// (withSession), and a queue head does not create it.
		sg, err = r.sessions.Acquire(ctx, ltx, key, c.id, r.cfg.TTL)
	} else {
		sg, err = r.sessions.AcquireExisting(ctx, ltx, key, c.id, r.cfg.TTL)
	}
	switch {
	case err != nil:
	case c.kind == newRequest && c.msg.OnBusy != Reject:
		// The session is free, but messages queued before this one (or,
		// for Interrupt, interrupting ones) go first.
		var ahead bool
		if ahead, err = r.ahead(ctx, tx, c.msg); err == nil && ahead {
			err = &session.BusyError{Key: key, Err: errQueueAhead}
		}
	case c.kind == queueHead:
		_, err = tx.ExecContext(ctx, r.sql.settle, key)
	}
	if err != nil {
		return nil, err // a busy session: the session's *session.BusyError
	}
	if c.kind != newRequest && c.from == schema.StoredProcessing {
		// A run that still holds the request's lease, expired, died: it
		// did not give it back. The acquire below fails if the lease is
		// live, and the transaction then undoes this too.
		if _, err = tx.ExecContext(ctx, r.sql.death, c.id); err != nil {
			return nil, err
		}
	}
	var g lease.Grant[string]
	if c.kind == newRequest {
		g, err = r.req.Create(ctx, ltx, c.id, c.holder, r.cfg.TTL, row)
	} else {
		g, err = r.req.AcquireWith(ctx, ltx, c.id, c.holder, r.cfg.TTL, opts)
		if errors.Is(err, lease.ErrHeld) {
			err = fmt.Errorf("%w: %w", ErrInFlight, err)
		}
	}
	if err != nil {
		return nil, err
	}
	if c.from == schema.StoredProcessing {
		// Asked to stop (a cancel or an interrupt) after the read that
		// chose it? Its interrupted_by, read after the write that took it
		// over: a flag that committed before that write is seen (the write
		// read the row's latest version, and the transaction sees its own
		// write), and a later one waits for the commit, then finds a live
		// run, which its heartbeat (or, in this process, Cancel) stops.
		var by string
		if err := tx.QueryRowContext(ctx, r.sql.flagRead, c.id).Scan(&by); err != nil {
			return nil, fmt.Errorf("request: reading whether the request was asked to stop: %w", err)
		}
		if by != "" {
			return nil, errAskedToStop
		}
	}
	run = &Run{r: r, msg: c.msg, id: c.id, holder: c.holder, sess: sg, req: g, fromQueue: c.fromQueue}
	if c.kind != newRequest && c.from != schema.StoredQueued {
		if _, err := r.tools.ReleaseForRequest(ctx, tx, key, c.id); err != nil {
			return nil, err
		}
		if run.prior, err = r.prior(ctx, tx, key, c.id); err != nil {
			return nil, err
		}
		if run.steps, err = r.loadSteps(ctx, tx, c.id); err != nil {
			return nil, err
		}
		run.resumed = true
	}
	if err := tx.Commit(); err != nil {
		r.releaseQuietly(ctx, func(cctx context.Context) error { return r.sessions.Release(cctx, r.db, sg) })
		if c.kind == newRequest {
			r.releaseQuietly(ctx, func(cctx context.Context) error { return r.req.Delete(cctx, r.db, g) })
		} else {
			r.releaseQuietly(ctx, func(cctx context.Context) error { return r.req.Release(cctx, r.db, g) })
		}
		return nil, err
	}
	return run, nil
}

// errAskedToStop: a claim took over a dead run's request that was asked
// to stop (its interrupted_by set, by Cancel or an interrupting message)
// after the read that chose it. The claim rolled back; the request is to
// be settled (interrupted or cancelled), never run again.
var errAskedToStop = errors.New("request: asked to stop before its takeover")

// newRow is what a new request's row holds besides its lease.
func newRow(msg Message) lease.CreateOptions {
	return lease.CreateOptions{State: schema.StoredProcessing, Set: []lease.Assignment{
		lease.Set(schema.ColSessionKey, msg.SessionKey), lease.Set(schema.ColClientRequestID, msg.ClientRequestID),
		lease.Set(schema.ColFingerprint, msg.Fingerprint),
		// The content, so that the service can resume the run if it
		// dies and its client never resends (see resume.go).
		lease.Set(schema.ColContent, msg.Content),
		// The agent's name (NULL: the default), so that only a Runner
		// that has it resumes the run.
		lease.Set(schema.ColAgent, agentValue(msg.Agent)),
		// The metadata (NULL: none), for the agent of every run.
		lease.Set(schema.ColMetadata, metadataValue(msg.Metadata)),
	}}
}

// claimAtOnce is claim for a new message with OnBusy Reject on
// PostgreSQL: the session taken and the request inserted in one
// autocommit statement (engine.AcquireCreate), no transaction. done is
// false when the session was not taken — busy, or its lock row missing —
// and nothing was written: claim's transaction then gives the answer,
// exactly as for every other message (*session.BusyError, *session.NotFoundError
// and AutoCreate, and so on). A duplicate request fails the statement as
// a whole: lease.ErrExists, nothing written.
//
// When the statement's outcome is unknown (a driver error: the connection
// dropped, or ctx was cancelled, with the statement on the wire) whatever
// took effect is given back at once, under a bounded context that
// survives ctx's cancellation: the session, if the new request's id (a
// fresh UUID) holds it, then the request row, both token-checked.
func (r *Runner) claimAtOnce(ctx context.Context, c claim) (run *Run, done bool, err error) {
	row := newRow(c.msg)
	sg, g, err := engine.AcquireCreate(ctx, r.db,
		engine.NewAcquireOp(r.sessions.Lease(), c.msg.SessionKey, c.id, r.cfg.TTL, lease.AcquireOptions{}),
		engine.NewCreateOp(r.req, c.id, c.holder, r.cfg.TTL, row))
	return r.atOnceResult(ctx, c, sg, g, err)
}

// claimUnless is find and claimAtOnce in one statement
// (engine.AcquireCreateUnless), for a new message with OnBusy Reject on
// PostgreSQL: the request read, and if there is none, the session taken
// and the request inserted. found: the request exists, read into ex, and
// nothing was written (a replay stays one statement). Otherwise run, done
// and err are claimAtOnce's.
func (r *Runner) claimUnless(ctx context.Context, msg Message, holder string) (run *Run, ex existing, found, done bool, err error) {
	c := claim{kind: newRequest, msg: msg, id: uuid.NewString(), holder: holder}
	var reply, result, interruptedBy sql.NullString
	var queueSeq sql.NullInt64
	row := newRow(msg)
	sg, g, found, err := engine.AcquireCreateUnless(ctx, r.db,
		engine.NewAcquireOp(r.sessions.Lease(), msg.SessionKey, c.id, r.cfg.TTL, lease.AcquireOptions{}),
		engine.NewCreateOp(r.req, c.id, c.holder, r.cfg.TTL, row),
		engine.Unless{
			Match: []lease.Assignment{lease.Set(schema.ColSessionKey, msg.SessionKey), lease.Set(schema.ColClientRequestID, msg.ClientRequestID)},
			Columns: []string{schema.ColID, schema.ColFingerprint, schema.ColStatus, schema.ColReply, schema.ColResult,
				schema.ColGeneration, schema.ColInterruptedBy, schema.ColQueueSeq},
		},
		&ex.id, &ex.fingerprint, &ex.status, &reply, &result, &ex.generation, &interruptedBy, &queueSeq)
	if found {
		// As find reads them (COALESCE, CASE) and the reads after it expect.
		ex.reply, ex.result, ex.interruptedBy = reply.String, result.String, interruptedBy.String
		if queueSeq.Valid {
			ex.queued = 1
		}
		return nil, ex, true, true, nil
	}
	run, done, err = r.atOnceResult(ctx, c, sg, g, err)
	return run, existing{}, false, done, err
}

// atOnceResult is what an at-once claim's statement (claimAtOnce,
// claimUnless) came to: the run, "not taken" (done false, nothing
// written), a final error with nothing written, or an unknown outcome,
// given back.
func (r *Runner) atOnceResult(ctx context.Context, c claim, sg session.Grant, g lease.Grant[string], err error) (run *Run, done bool, _ error) {
	switch {
	case err == nil:
		return &Run{r: r, msg: c.msg, id: c.id, holder: c.holder, sess: sg, req: g, fromQueue: c.fromQueue}, true, nil
	case errors.Is(err, lease.ErrHeld), errors.Is(err, lease.ErrNotFound), errors.Is(err, lease.ErrState):
		return nil, false, nil // the session was not taken, nothing was written
	case errors.Is(err, lease.ErrExists), errors.Is(err, lease.ErrInvalid):
		return nil, true, err // nothing was written
	}
	r.giveBack(ctx, sg, g)
	return nil, true, err
}

// giveBack gives back what an at-once claim whose outcome is unknown may
// have taken: the session if the request sg.Holder holds it (its
// generation read first: it was not handed back), then the request row
// g. Each write is token-checked: one that finds nothing of this claim's
// changes nothing.
func (r *Runner) giveBack(ctx context.Context, sg session.Grant, g lease.Grant[string]) {
	r.releaseQuietly(ctx, func(cctx context.Context) error {
		st, err := r.sessions.Inspect(cctx, r.db, sg.Key)
		if errors.As(err, new(*session.NotFoundError)) || (err == nil && st.Holder != sg.Holder) {
			return nil // not taken by this claim
		}
		if err != nil {
			return err
		}
		sg.Generation = st.Generation
		return r.sessions.Release(cctx, r.db, sg)
	})
	r.releaseQuietly(ctx, func(cctx context.Context) error { return r.req.Delete(cctx, r.db, g) })
}

// queuedHead is the head of a session's queue, as headQ reads it.
type queuedHead struct {
	id, clientRequestID, fingerprint, content, status string
	generation                                        int64
	deaths                                            int64  // see deaths in resume.go
	agent                                             string // its agent's name, "" for the default
	metadata                                          string // its metadata, "" for none
}

// claimHead takes the session for the head of its queue and starts it:
// the session, then the request (queued → processing, or a dead run's
// request taken over), in one transaction, which also marks interrupted
// the dead runs that were asked to stop. It returns nil when there is
// nothing to start or the session is busy, and when the head's agent is
// not one this Runner has: the head is left alone (and reported once, see
// skipForAgent), and nothing behind it overtakes it; a Runner that has
// its agent starts it. The bool reports a session with nothing queued to
// start (nor a dead run to resume): its caller forgets the session's hint
// (unhint).
func (r *Runner) claimHead(ctx context.Context, sessionKey string) (*Run, bool, error) {
	for attempt := 0; attempt < 5; attempt++ {
		var h queuedHead
		err := r.db.QueryRowContext(ctx, r.sql.head, sessionKey, sessionKey).Scan(&h.id, &h.clientRequestID, &h.fingerprint,
			&h.content, &h.status, &h.generation, &h.deaths, &h.agent, &h.metadata)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, true, nil
		}
		if err != nil {
			return nil, false, err
		}
		if r.agentOf(h.agent) == nil {
			r.skipForAgent(ctx, h.id, h.agent)
			return nil, false, nil
		}
		if h.status == schema.StoredWaiting {
			// A wait whose deadline passed: its expiry is recorded as the
			// wait's step, and the request, processing and free, is run
			// on now, as a dead run is resumed.
			ok, err := r.expireWait(ctx, h)
			if err != nil && !engine.IsRetryable(err) {
				return nil, false, err
			}
			if !ok {
				continue // answered, cancelled or interrupted meanwhile
			}
			h.status = schema.StoredProcessing
		}
		var slot *sync.Once
		if h.status == schema.StoredProcessing {
			// A dead run to resume: not after MaxAttempts runs, and not
			// more than MaxConcurrent at once in this Runner.
			if h.deaths >= int64(r.cfg.Resume.MaxAttempts) {
				if _, err := r.giveUp(ctx, h); err != nil {
					return nil, false, err
				}
				r.notify()
				continue
			}
			if !r.takeResumeSlot() {
				return nil, false, nil
			}
			slot = new(sync.Once)
		}
		run, err := r.claim(ctx, claim{kind: queueHead, id: h.id, holder: r.holder(), from: h.status, fromQueue: true,
			msg: Message{SessionKey: sessionKey, ClientRequestID: h.clientRequestID, Content: h.content, Fingerprint: h.fingerprint,
				Agent: h.agent, Metadata: rawOrNil(h.metadata)}})
		if slot != nil {
			if err != nil {
				r.giveResumeSlot()
			} else {
				run.slot = slot
			}
		}
		switch {
		case err == nil:
			r.notify()
			return run, false, nil
		case errors.Is(err, errAskedToStop):
			// Cancelled or interrupted after the head was read: it is
			// settled, not resumed; then the next head.
			if _, err := r.settleInterrupted(ctx, sessionKey, h.id); err != nil {
				return nil, false, err
			}
			r.notify()
			continue
		case errors.As(err, new(*session.BusyError)):
			return nil, false, nil
		case errors.As(err, new(*session.NotFoundError)):
			return nil, false, err
		case errors.Is(err, lease.ErrState), errors.Is(err, lease.ErrHeld), errors.Is(err, lease.ErrNotFound), engine.IsRetryable(err):
			continue // the head changed under us: read it again
		}
		return nil, false, err
	}
	return nil, false, nil
}

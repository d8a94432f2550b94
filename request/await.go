package request

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/jcs"
	"github.com/rowlease/rowlease/internal/retry"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// waitStepPrefix begins the step name under which a wait's answer is
// recorded in the step journal: "await:" and the wait's name. Step
// refuses names that begin with it, so no step is mistaken for a wait.
const waitStepPrefix = "await:"

// Question is the open question of a waiting request, as Status, Wait,
// Handle and Answer report it.
type Question struct {
	// Name is the wait's name, as the agent gave it to Await: the name an
	// answer is sent under.
	Name string `json:"name"`
	// Question is the JSON the agent asked with (null for none).
	Question json.RawMessage `json:"question"`
	// Deadline is when the wait expires (the database clock's deadline,
	// read as the time left and added to this process's clock); nil when
	// it has none.
	Deadline *time.Time `json:"deadline,omitempty"`
}

// AwaitOption refines Await.
type AwaitOption func(*awaitOptions)

type awaitOptions struct{ within time.Duration }

// Within gives the wait a deadline: d after the run stops to wait, by the
// database clock. When it passes, a Started Runner with an Agent resumes
// the run, and Await returns a *WaitExpiredError. d must be positive.
// Without it the request waits until it is answered, cancelled,
// interrupted, or swept by the retention (Runner.Sweep: a waiting request
// is swept RetentionConfig's age after it began to wait).
func Within(d time.Duration) AwaitOption { return func(o *awaitOptions) { o.within = d } }

// ErrWaiting is what Await returns when the request has no answer for the
// wait yet: the agent returns it (wrapped or not), and the run ends as
// waiting, its question stored and every lease given back. The run ends
// so whatever the agent returns: once Await said ErrWaiting, the run's
// later Step, Await, CallTool and InTx are refused with it, and its answer
// is not stored. None of lease's kinds: not an error of the request.
var ErrWaiting = errors.New("request: waiting for an answer")

// WaitExpiredError is what Await returns on the run resumed after the
// wait's deadline passed with no answer (Within): the agent turns it into
// a reply ("the approval expired"). An Answer sent after the deadline gets
// it too, and changes nothing. It matches lease.ErrState.
type WaitExpiredError struct {
	Name string // the wait's name
}

// Error names the wait.
func (e *WaitExpiredError) Error() string {
	return fmt.Sprintf("request: the wait %q passed its deadline with no answer", e.Name)
}

// Is matches lease.ErrState.
func (e *WaitExpiredError) Is(target error) bool { return target == lease.ErrState }

// NotWaitingError is Answer's error for a request that does not wait for
// an answer under that name, and never did: nothing was written. Waiting
// is the name it waits for now ("" when it waits for none). It matches
// lease.ErrState (409 "not waiting" in package httpapi).
type NotWaitingError struct {
	Name    string // the name the answer was sent under
	State   State  // the request's state
	Waiting string // the name it waits for, or ""
}

// Error says what the request is doing instead.
func (e *NotWaitingError) Error() string {
	if e.Waiting != "" {
		return fmt.Sprintf("request: not waiting for %q: it waits for %q", e.Name, e.Waiting)
	}
	return fmt.Sprintf("request: not waiting for %q: it is %s", e.Name, e.State)
}

// Is matches lease.ErrState.
func (e *NotWaitingError) Is(target error) bool { return target == lease.ErrState }

// AnsweredError is Answer's error for a wait already answered with
// another answer: the first answer stands, and nothing was written. It
// matches lease.ErrExists (409 "already answered otherwise" in package
// httpapi).
type AnsweredError struct {
	Name string // the wait's name
}

// Error names the wait.
func (e *AnsweredError) Error() string {
	return fmt.Sprintf("request: the wait %q was already answered otherwise", e.Name)
}

// Is matches lease.ErrExists.
func (e *AnsweredError) Is(target error) bool { return target == lease.ErrExists }

// waitEnvelope is what a wait's step records: the answer, or that the
// deadline passed.
type waitEnvelope struct {
	Answer  json.RawMessage `json:"answer,omitempty"`
	Expired bool            `json:"expired,omitempty"`
}

// parked is the wait a run stopped at: its request is marked waiting
// when the agent returns.
type parked struct {
	name     string
	question json.RawMessage
	seq      int
	within   time.Duration
}

// Await asks a person the question (any JSON value; nil for none) under
// name and returns their answer, as Runner.Answer stored it.
//
// A wait is a step of the run: its answer is recorded in the step journal
// at the position where the run asks, and every later run of the request
// replays it. When the request has no answer at that position yet, Await
// returns ErrWaiting, and the agent returns (with that error, or any
// other): the run ends as waiting (StateWaiting), its question stored,
// its session and request leases given back — no process holds or renews
// anything while the person thinks — and Handle returns an Outcome whose
// Waiting is the question. Runner.Answer records the answer and runs the
// request on: its steps replayed, this Await returning the answer, the
// tool calls committed before it not repeated. After the deadline of
// Within passes, a Started Runner with an Agent runs it on instead, and
// Await returns a *WaitExpiredError.
//
// name identifies the wait within its request: non-empty UTF-8 of at most
// schema.MaxWaitNameLen bytes without a NUL byte, asked once per request
// (a second Await under a name the request already asked is refused with
// an error matching lease.ErrInvalid). As with Step, the code before an
// Await must replay deterministically, and a resumed run that asks at a
// recorded position under another name gets a *StepDivergedError.
func (run *Run) Await(ctx context.Context, name string, question any, opts ...AwaitOption) (json.RawMessage, error) {
	if err := validWaitName(name); err != nil {
		return nil, err
	}
	var o awaitOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.within < 0 || (o.within > 0 && o.within < time.Microsecond) {
		return nil, invalid("wait deadline", "not positive")
	}
	q, err := json.Marshal(question)
	if err != nil {
		return nil, invalid("question", "not JSON: "+err.Error())
	}
	if len(q) > run.r.cfg.MaxStepOutput {
		return nil, invalid("question", fmt.Sprintf("%d bytes, more than Config.MaxStepOutput", len(q)))
	}
	if err := run.stopped(); err != nil {
		return nil, err
	}
	stepName := waitStepPrefix + name
	run.stepMu.Lock()
	defer run.stepMu.Unlock()
	if run.diverged != nil {
		return nil, run.diverged
	}
	if run.stepBusy {
		return nil, invalid("await", "called while a step of the run is running")
	}
	pos := run.stepPos
	for _, rec := range run.steps[:min(pos, len(run.steps))] {
		if rec.Name == stepName {
			return nil, invalid("wait name", fmt.Sprintf("%q was already asked in this request", name))
		}
	}
	if pos < len(run.steps) {
		rec := run.steps[pos]
		if rec.Name != stepName {
			run.diverged = &StepDivergedError{Position: pos, Recorded: rec.Name, Asked: stepName}
			return nil, run.diverged
		}
		run.stepPos++
		run.replayed++
		var env waitEnvelope
		if err := json.Unmarshal(rec.Output, &env); err != nil {
			return nil, fmt.Errorf("request: wait %q: reading its recorded answer: %w", name, err)
		}
		if env.Expired {
			return nil, &WaitExpiredError{Name: name}
		}
		return append(json.RawMessage(nil), env.Answer...), nil
	}
	run.parked = &parked{name: name, question: q, seq: pos, within: o.within}
	return nil, ErrWaiting
}

// Await is the typed form of Run.Await: the answer is unmarshalled into
// T (an answer that does not fit T is an error, and the run fails with
// it, as with any agent error).
func Await[T any](ctx context.Context, run *Run, name string, question any, opts ...AwaitOption) (T, error) {
	var zero T
	raw, err := run.Await(ctx, name, question, opts...)
	if err != nil {
		return zero, err
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return zero, fmt.Errorf("request: wait %q: the answer does not fit %T: %w", name, v, err)
	}
	return v, nil
}

// parkedAt returns the wait the run stopped at, or nil.
func (run *Run) parkedAt() *parked {
	run.stepMu.Lock()
	defer run.stepMu.Unlock()
	return run.parked
}

// park ends the run at its wait: in one transaction, the request is
// marked waiting with its question (token-checked: a stale run marks
// nothing), its lease given back, and the session freed — so that no
// process death between the two can leave the session held by a request
// that waits, and its answer told the session is busy until that lease
// expires. A request asked to stop meanwhile (an interrupt, a cancel) is
// marked as that asked instead.
func (r *Runner) park(ctx context.Context, run *Run, p *parked) (Outcome, error) {
	base := Outcome{RequestID: run.id, Resumed: run.resumed, Attempt: run.req.Generation}
	cctx, cancel := r.detached(ctx)
	defer cancel()
	var parked bool
	var err error
	for attempt := 1; ; attempt++ {
		parked, err = r.parkOnce(cctx, run, p)
		if err == nil || !engine.IsRetryable(err) || attempt == retry.MaxAttempts || !retry.Backoff(cctx, attempt) {
			break
		}
	}
	switch {
	case err != nil:
		// Nothing of it committed, or its outcome is unknown: give back
		// what is still this run's (token-checked); the request, still
		// processing and free if the mark did not commit, is resumed
		// and asks again.
		r.releaseAll(ctx, run)
		return base, fmt.Errorf("request: marking the request waiting: %w", err)
	case !parked:
		// Taken over, or asked to stop after the heartbeat's last read.
		var by string
		if ferr := r.db.QueryRowContext(cctx, r.sql.flagRead, run.id).Scan(&by); ferr == nil && by != "" {
			if by == run.msg.ClientRequestID {
				return base, r.markStopped(ctx, run, schema.StoredCancelled, ErrCancelled)
			}
			return base, r.markStopped(ctx, run, schema.StoredInterrupted, &InterruptedError{By: by})
		}
		r.releaseAll(ctx, run)
		return base, fmt.Errorf("%w: marking the request waiting: %w", ErrTakenOver, lease.ErrLost)
	}
	wq := &Question{Name: p.name, Question: p.question}
	if p.within > 0 {
		d := time.Now().Add(p.within)
		wq.Deadline = &d
	}
	base.Waiting = wq
	return base, nil
}

// parkOnce is one attempt of park's transaction. parked is false, and
// nothing was written, when the request was not this run's to mark (its
// token or generation moved on) or was asked to stop.
func (r *Runner) parkOnce(ctx context.Context, run *Run, p *parked) (parked bool, err error) {
	q, args := r.sql.park, []any{p.name, string(p.question), p.seq}
	if p.within > 0 {
		q, args = r.sql.parkUntil, append(args, p.within.Microseconds())
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() {
		if !parked || err != nil {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, q, append(args, run.id, engine.Secret(run.req.Token), run.req.Generation)...)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	// The session's lease is freed in the same transaction. A session
	// lease already lost (taken over) is no longer this run's to free.
	if err := r.sessions.Release(ctx, engine.InTx(r.db, tx), run.sess); err != nil && !errors.Is(err, lease.ErrLost) {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	return true, nil
}

// Answer answers the wait name of the request (sessionKey,
// clientRequestID) with answer (any JSON value; a json.RawMessage is sent
// as it is) and runs the request on from where it stopped, as Handle runs
// a message: its steps replayed, Await returning answer, the tool calls
// committed before the wait not repeated, with the agent that accepted
// the message. It returns the run's Outcome: a reply, or Waiting when the
// run stops at a later wait.
//
// The answer is recorded, and the request made runnable again, in one
// transaction, conditional on the request waiting for name: two answers
// at once record one. Answer is idempotent: the same answer (the same
// JSON, whatever its formatting) sent again runs nothing twice and
// returns the request's outcome — waiting for it while another process
// runs it. Another answer to a wait already answered is an
// *AnsweredError, and a request that does not wait for name a
// *NotWaitingError; a wait whose deadline passed a *WaitExpiredError:
// nothing is written for any of them. An unknown request gives an error
// matching ErrNotFound; bad input one matching lease.ErrInvalid, before
// any SQL.
//
// When the session is busy (a message taken under OnBusy Reject while the
// request waited), Answer records the answer and returns the
// *session.BusyError; the request then runs when the session is free: a
// Started Runner with the request's agent resumes it, or the same Answer
// sent again runs it. When the session is held in the request's own name
// by a run of it that died (the answer was recorded, and its process died
// running the rest), it is an error matching ErrInFlight until that lease
// expires, as for a resend of the message.
func (r *Runner) Answer(ctx context.Context, sessionKey, clientRequestID, name string, answer any) (Outcome, error) {
	if err := validateKeys(sessionKey, clientRequestID); err != nil {
		return Outcome{}, err
	}
	if err := validWaitName(name); err != nil {
		return Outcome{}, err
	}
	raw, err := json.Marshal(answer)
	if err != nil {
		return Outcome{}, invalid("answer", "not JSON: "+err.Error())
	}
	env, err := json.Marshal(waitEnvelope{Answer: raw})
	if err != nil {
		return Outcome{}, invalid("answer", err.Error())
	}
	if len(env) > r.cfg.MaxStepOutput {
		return Outcome{}, invalid("answer", fmt.Sprintf("%d bytes, more than Config.MaxStepOutput", len(env)))
	}
	for attempt := 1; ; attempt++ {
		w, err := r.readWait(ctx, sessionKey, clientRequestID, name)
		if err != nil {
			return Outcome{}, err
		}
		if w.status == schema.StoredWaiting {
			switch {
			case w.waitName != name:
				return Outcome{RequestID: w.id}, &NotWaitingError{Name: name, State: StateWaiting, Waiting: w.waitName}
			case w.expired:
				return Outcome{RequestID: w.id}, &WaitExpiredError{Name: name}
			}
			ok, err := r.recordWait(ctx, w, name, env, false)
			if err != nil {
				if engine.IsRetryable(err) && attempt < retry.MaxAttempts && retry.Backoff(ctx, attempt) {
					continue
				}
				return Outcome{RequestID: w.id}, fmt.Errorf("request: recording the answer: %w", err)
			}
			if !ok {
				continue // answered, cancelled or swept meanwhile: read it again
			}
			r.notify()
		} else {
			switch {
			case w.recorded == nil:
				return Outcome{RequestID: w.id}, &NotWaitingError{Name: name, State: stateOf(w.status)}
			case expiredEnvelope(w.recorded):
				return Outcome{RequestID: w.id}, &WaitExpiredError{Name: name}
			case !sameJSON(w.recorded, env):
				return Outcome{RequestID: w.id}, &AnsweredError{Name: name}
			}
		}
		return r.runAnswered(ctx, w)
	}
}

// runAnswered runs on a request whose wait has its answer recorded, as a
// resend of its message: a takeover of its free lease, its steps
// replayed. A run in flight elsewhere is waited for.
func (r *Runner) runAnswered(ctx context.Context, w waitRow) (Outcome, error) {
	r.hint(w.msg.SessionKey) // the session's queued messages start after it
	out, err := r.Handle(ctx, w.msg, nil)
	if errors.As(err, new(*session.BusyError)) {
		// Busy with this very request, taken by an answer sent at the
		// same time, or with another message: the status tells.
		st, serr := r.Status(ctx, w.msg.SessionKey, w.msg.ClientRequestID)
		var ce *lease.ConflictError
		switch {
		case serr != nil:
			return out, err
		case st.State == StateProcessing && st.Live:
			err = ErrInFlight
		case st.State != StateProcessing:
			return st.Outcome()
		case errors.As(err, &ce) && ce.Holder == w.id:
			// The session is held in this request's name by a run of it
			// that died holding it: the request is in flight until that
			// lease expires, and the same answer sent then takes it over
			// (or a Started Runner resumes it).
			return Outcome{RequestID: w.id}, fmt.Errorf("%w: %w", ErrInFlight, err)
		}
	}
	if !errors.Is(err, ErrInFlight) {
		return out, err
	}
	st, werr := r.Wait(ctx, w.msg.SessionKey, w.msg.ClientRequestID)
	if werr != nil {
		return Outcome{RequestID: w.id}, werr
	}
	return st.Outcome()
}

// waitRow is a request as readWait reads it for Answer.
type waitRow struct {
	id, status, waitName string
	seq                  int64
	expired              bool
	generation           int64
	msg                  Message
	// recorded is the envelope recorded under the wait's name, when the
	// request is not waiting; nil when there is none.
	recorded json.RawMessage
}

// readWait reads the request and, when it does not wait, the answer
// recorded for name.
func (r *Runner) readWait(ctx context.Context, sessionKey, clientRequestID, name string) (waitRow, error) {
	w := waitRow{msg: Message{SessionKey: sessionKey, ClientRequestID: clientRequestID}}
	var seq sql.NullInt64
	var expired int
	var metadata string
	err := r.db.QueryRowContext(ctx, r.sql.waitRead, sessionKey, clientRequestID).Scan(&w.id, &w.status, &w.waitName, &seq,
		&expired, &w.generation, &w.msg.Fingerprint, &w.msg.Content, &w.msg.Agent, &metadata)
	if errors.Is(err, sql.ErrNoRows) {
		return w, fmt.Errorf("request: no message %q in session %q: %w", clientRequestID, sessionKey, lease.ErrNotFound)
	}
	if err != nil {
		return w, fmt.Errorf("request: reading the request's wait: %w", err)
	}
	w.seq, w.expired, w.msg.Metadata = seq.Int64, expired == 1, rawOrNil(metadata)
	if w.status == schema.StoredWaiting {
		return w, nil
	}
	var out string
	err = r.db.QueryRowContext(ctx, r.sql.waitAnswer, w.id, waitStepPrefix+name).Scan(&out)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return w, fmt.Errorf("request: reading the recorded answer: %w", err)
	default:
		w.recorded = json.RawMessage(out)
	}
	return w, nil
}

// recordWait records env at the wait's position and makes the waiting
// request processing and free, in one transaction: the update first, so
// that two answers at once serialize on the request's row and the second
// finds it no longer waiting (ok false; nothing written). The update is
// conditional on the deadline: not passed for an answer, passed for an
// expiry (expired), by the database clock.
func (r *Runner) recordWait(ctx context.Context, w waitRow, name string, env json.RawMessage, expired bool) (ok bool, err error) {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() {
		if !ok || err != nil {
			_ = tx.Rollback()
		}
	}()
	q := r.sql.unpark
	if expired {
		q = r.sql.unparkExpired
	}
	res, err := tx.ExecContext(ctx, q, w.id, name)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, r.sql.waitRecord, w.id, w.seq, waitStepPrefix+name, string(env), w.generation); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	return true, nil
}

// expireWait records that the wait of the waiting request h passed its
// deadline, and makes the request processing and free, as recordWait
// does for an answer; ok false when it was answered, cancelled or
// interrupted meanwhile.
func (r *Runner) expireWait(ctx context.Context, h queuedHead) (bool, error) {
	var name string
	var seq sql.NullInt64
	err := r.db.QueryRowContext(ctx, r.sql.waitOf, h.id).Scan(&name, &seq)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	env, _ := json.Marshal(waitEnvelope{Expired: true})
	return r.recordWait(ctx, waitRow{id: h.id, seq: seq.Int64, generation: h.generation}, name, env, true)
}

// sameJSON reports whether two JSON texts are the same value (RFC 8785
// canonical forms compared).
func sameJSON(a, b json.RawMessage) bool {
	ca, _, err1 := jcs.Canonicalize(a)
	cb, _, err2 := jcs.Canonicalize(b)
	if err1 != nil || err2 != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca, cb)
}

// expiredEnvelope reports whether a wait's recorded step is its expiry.
func expiredEnvelope(raw json.RawMessage) bool {
	var env waitEnvelope
	return json.Unmarshal(raw, &env) == nil && env.Expired
}

// validWaitName checks a wait's name: non-empty UTF-8 of at most
// schema.MaxWaitNameLen bytes, without a NUL byte.
func validWaitName(name string) error {
	if name == "" || len(name) > schema.MaxWaitNameLen || !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
		return invalid("wait name", fmt.Sprintf("empty, longer than %d bytes, not UTF-8 or with a NUL byte", schema.MaxWaitNameLen))
	}
	return nil
}

package request

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/crash"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/retry"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// runAndContinue executes run and then, unless it was abandoned, wakes the
// local waiters and starts the session's next queued message if there may
// be one: the run came from the queue, was interrupted (its interrupter is
// queued), or this process knows of queued messages for the session.
func (r *Runner) runAndContinue(ctx context.Context, run *Run, agent Agent) (Outcome, error) {
	out, err := r.execute(ctx, run, agent)
	run.endResume()
	if run.abandoned != nil && run.isAbandoned() {
		return out, err
	}
	r.notify()
	if run.fromQueue || errors.As(err, new(*InterruptedError)) || r.hinted(run.msg.SessionKey) {
		r.continueQueue(run.msg.SessionKey)
	}
	return out, err
}

// execute runs the agent under supervision — a heartbeat that renews the
// session and request leases, and cancels the work's context when one is
// lost or the run is asked to stop — and finishes the request (finish).
func (r *Runner) execute(ctx context.Context, run *Run, agent Agent) (Outcome, error) {
	run.abandoned = make(chan struct{})
	crash.Arm(&run.crashPoint, run.abandon)
	hc := heartbeat.Config{Interval: r.cfg.HeartbeatInterval, TTL: r.cfg.TTL, Clock: r.cfg.Lease.Clock, Logger: r.log, Batcher: r.batcher}
	if r.cfg.Observer != nil {
		hc.OnEvent = heartbeatEvent(ctx, r.cfg.Observer)
	}
	sup, err := heartbeat.New(hc)
	if err != nil {
		r.releaseAll(ctx, run)
		return Outcome{}, err
	}
	// The request's renewals also read whether another message asked the
	// run to stop: then ictx, and with it the work context, is cancelled
	// with an *InterruptedError.
	ictx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	// An interrupt asked by the run's own client is a cancel (cancel.go).
	interrupt := func(cause error) { stop(run.stopCause(cause)) }
	defer r.addLocal(run.id, stop)()
	if r.batcher != nil {
		// The Batcher renews on a connection of its own, taken once before
		// any run's work holds the pool's others (heartbeat.Batcher.Reserve):
		// a pool that is short then makes the work wait, not the renewals.
		// When none is free now, the rounds try again until the trust
		// deadline.
		rctx, cancel := context.WithTimeout(ctx, r.cfg.HeartbeatInterval)
		if err := r.batcher.Reserve(rctx); err != nil && ctx.Err() == nil {
			r.log.Warn("rowlease: no connection free for the heartbeat yet; its rounds will wait for one", "err", err)
		}
		cancel()
	}
	sup.Add(heartbeat.ForLease("session", r.sessions.Lease(), run.flowDB(), run.sess))
	if r.batcher != nil {
		// Batched: the request lease is renewed with every run's, and one
		// read per round finds the runs asked to stop (checkInterrupts).
		sup.Add(heartbeat.ForLease("request", r.req, run.flowDB(), run.req))
		defer r.watchInterrupts(run.id, interrupt)()
	} else {
		sup.Add(&interruptWatch{LeaseRenewer: heartbeat.ForLease("request", r.req, run.flowDB(), run.req),
			r: r, run: run, cancel: interrupt})
	}
	work, err := sup.Start(ictx)
	if err != nil {
		r.releaseAll(ctx, run)
		return Outcome{}, err
	}
	run.sup, run.work = sup, work
	ans, aerr := runAgent(work, run, agent)
	sup.Stop()
	return r.finish(ctx, ictx, run, ans, aerr)
}

// runAgent calls the agent and turns a panic into an error, so the locks
// are still released.
func runAgent(ctx context.Context, run *Run, agent Agent) (ans Answer, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("request: agent panicked: %v", p)
		}
	}()
	return agent(ctx, run)
}

// Run is one run of a request, handed to the Agent.
type Run struct {
	r       *Runner
	msg     Message
	id      string
	holder  string
	sess    session.Grant
	req     lease.Grant[string]
	resumed bool
	prior   []ToolRecord
	sup     *heartbeat.Supervisor
	// parked is the wait the run stopped at (Await), under stepMu: the
	// request is marked waiting when the agent returns.
	parked *parked
	// fromQueue: the request came through the queue; when it ends, the
	// session's next queued message is started.
	fromQueue bool
	// work is the agent's context, set before the agent is called: once
	// it is done, CallTool and InTx refuse to write.
	work context.Context

	flowOnce sync.Once
	flow     *engine.FlowDB // the heartbeat's database; see flowDB

	abandoned   chan struct{}
	abandonOnce sync.Once
	// crashPoint is how rowleasetest.Crash reaches the run: armed by
	// execute with abandon.
	crashPoint

	// Steps (step.go): the request's recorded steps, the position of the
	// next one, how many were replayed, and the divergence that failed
	// the run.
	stepMu   sync.Mutex
	stepBusy bool // a step's function is running
	steps    []stepRecord
	stepPos  int
	replayed int
	diverged *StepDivergedError
	// slot: the run holds one of the Runner's resume slots (resume.go).
	slot *sync.Once
	// calls numbers the run's identical tool calls (occurrence.go).
	calls occurrences
}

// RequestID is the request's id (the session lock's holder).
func (run *Run) RequestID() string { return run.id }

// SessionKey is the session's key.
func (run *Run) SessionKey() string { return run.msg.SessionKey }

// ClientRequestID is the client's id of the message.
func (run *Run) ClientRequestID() string { return run.msg.ClientRequestID }

// Content is the message.
func (run *Run) Content() string { return run.msg.Content }

// Resumed reports whether this run took over a failed or crashed run.
func (run *Run) Resumed() bool { return run.resumed }

// ToolRecord is a tool call of this request that already succeeded (in an
// earlier run that crashed or failed). Occurrence numbers identical calls
// (the same tool and arguments hash) from 0, in the order the run made
// them (see CallTool).
type ToolRecord struct {
	ExecutionID   string
	Tool          string
	ArgumentsHash string
	Result        json.RawMessage
	Occurrence    int
}

// Prior lists tool calls of this request that committed in earlier runs.
func (run *Run) Prior() []ToolRecord { return append([]ToolRecord(nil), run.prior...) }

// prior reads the request's tool calls that committed (through toolexec,
// which owns their table).
func (r *Runner) prior(ctx context.Context, db lease.DB, sessionKey, requestID string) ([]ToolRecord, error) {
	recs, err := r.tools.Succeeded(ctx, db, sessionKey, requestID)
	if err != nil || recs == nil {
		return nil, err
	}
	out := make([]ToolRecord, len(recs))
	for i, rec := range recs {
		out[i] = ToolRecord(rec)
	}
	return out, nil
}

// Generations are the fencing generations of the session and the request.
func (run *Run) Generations() (sessionGen, requestGen int64) {
	return run.sess.Generation, run.req.Generation
}

// Fences check, inside a transaction, that the session and the request
// are still held by this run (see lease.Fence). CallTool uses them.
func (run *Run) Fences() []lease.Fence {
	return []lease.Fence{run.r.sessions.Fence(run.sess), run.r.req.Fence("request", run.req)}
}

// InTx runs fn in a transaction that ends by checking the run's fences, so
// fn's writes commit only if this run still holds its session and request
// (see lease.RunFenced). Use it for the flow's own writes that are not
// tool calls, such as storing the conversation. The lease rows are locked
// only for the end of the transaction, so a long fn does not hold up the
// heartbeat; on SQLite the heartbeat renews inside the transaction.
//
// fn may run more than once: a transaction that ended as a deadlock,
// serialization or (on Galera) certification victim committed nothing, and
// is run again from the start, fences included, a few times (the back-off
// of internal/retry, MaxAttempts runs in all) with a jittered pause; after
// the last, the database's error is returned (lease.IsTransient reports
// it).
func (run *Run) InTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	if obs := run.r.cfg.Observer; obs != nil {
		var end func(error, ...lease.Attr)
		ctx, end = obs.Start(ctx, lease.Span{Name: lease.SpanFencedTx, Attrs: []lease.Attr{{Key: toolexec.AttrPhase, Value: "flow"}}})
		defer func() { end(err, lease.Attr{Key: lease.AttrVerdict, Value: engine.VerdictOf(err, lease.VerdictOK)}) }()
	}
	if err := run.stopped(); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err = engine.RunFenced(ctx, run.r.db, engine.FencedTx{Fences: run.Fences(), Flow: run.flowDB()}, fn)
		if err == nil || !lease.IsTransient(err) || attempt == retry.MaxAttempts || !retry.Backoff(ctx, attempt) {
			return err
		}
	}
}

// flowDB is the database the run's heartbeat renews through (see
// engine.FlowDB).
func (run *Run) flowDB() *engine.FlowDB {
	run.flowOnce.Do(func() { run.flow = engine.NewFlowDB(run.r.db, run.r.cfg.Dialect) })
	return run.flow
}

// CallTool runs a registered tool through toolexec. Identical calls of
// the run — the same tool and canonical arguments — are counted: the n-th
// of them to succeed is occurrence n−1 (toolexec.Call.Occurrence), an
// effect of its own, so a model that asks book({"amount":5}) twice for two
// coffees books twice. A run that resumes the request and makes the same
// calls in the same order (recorded steps make it so; without steps it is
// what the model asks again) meets the same occurrences: each one that
// committed returns its stored result without running again (Reused),
// and the rest run. A call that did not succeed gives its number back, so
// the same call made again — a retry after a tool's failure, a transient
// error, a conflict or an unknown outcome — is the same occurrence, and
// retries, takes over or reconciles it: never an effect beside it.
//
// Identical calls made in parallel are numbered in the order CallTool was
// entered, which a resumed run may not repeat: the effects are still
// counted right (each occurrence is one effect at most), but which
// goroutine gets which stored result may change. When that matters, make
// them one after the other, or tell them apart in their arguments (an item
// number).
//
// A tool registered with Register writes its
// side effect in one transaction with the fences of the session, the
// request and the tool; one registered with RegisterExternal records its
// intent, acts outside the database with a stable effect key, and records
// the result (see toolexec.Store.ExecuteExternal). A tool's own failure is a
// *toolexec.FailedError (give its text to the model); an external effect
// whose outcome is unknown is a *toolexec.UnknownOutcomeError; an unknown
// tool is an error matching toolexec.ErrUnknownTool. ctx (with its values)
// is passed on to the effect.
func (run *Run) CallTool(ctx context.Context, tool string, args json.RawMessage) (res toolexec.Result, err error) {
	if obs := run.r.cfg.Observer; obs != nil {
		kind := "tx"
		if run.r.cfg.Tools.External(tool) {
			kind = "external"
		}
		var end func(error, ...lease.Attr)
		ctx, end = obs.Start(ctx, lease.Span{Name: toolexec.SpanTool, Attrs: []lease.Attr{
			{Key: toolexec.AttrTool, Value: tool}, {Key: toolexec.AttrToolKind, Value: kind}, {Key: AttrRequest, Value: run.id}}})
		defer func() { end(err, toolEnd(res, err)...) }()
	}
	if err := run.stopped(); err != nil {
		return toolexec.Result{}, err
	}
	occurrence, settle := run.calls.take(tool, args)
	defer func() { settle(err == nil) }()
	flow := run.flowDB()
	// One renewer per call: a run of the side effect after a transient
	// error is watched again from the tool lease's last renewal.
	var ren *heartbeat.LeaseRenewer[string]
	return run.r.tools.Call(ctx, run.r.db, run.r.cfg.Tools, toolexec.Call{
		SessionKey: run.msg.SessionKey, RequestID: run.id, Tool: tool, Arguments: args,
		ClientRequestID: run.msg.ClientRequestID, // the effect key derives from it, so a resend keeps it
		StepSeq:         run.stepsSoFar(),        // a failed request keeps the steps that decided it (finish)
		Occurrence:      occurrence,              // the n-th identical call of the run is its own effect
	}, toolexec.ExecOptions{
		Holder: run.holder, TTL: run.r.cfg.TTL, Fences: run.Fences(), ReleaseTimeout: run.r.cfg.ReleaseTimeout, Flow: flow,
		Watch: func(g toolexec.Grant) func() {
			if run.sup == nil {
				return func() {}
			}
			if ren == nil || ren.Grant().Token != g.Token || ren.Grant().Generation != g.Generation {
				ren = heartbeat.ForLease("tool:"+tool, run.r.tools.Lease(), flow, g)
			}
			return run.sup.Add(ren)
		},
	})
}

// stopped returns an *InterruptedError once another message has
// interrupted the run, so that an agent that carries on with another
// context writes nothing more: its leases are still valid until it marks
// itself interrupted, so the fences alone would let the write through. (A
// run that lost a lease is refused by the fences.)
func (run *Run) stopped() error {
	var ie *InterruptedError
	if run.work != nil && errors.As(context.Cause(run.work), &ie) {
		return ie
	}
	if run.work != nil && errors.Is(context.Cause(run.work), ErrCancelled) {
		return ErrCancelled
	}
	if run.parkedAt() != nil {
		return ErrWaiting // the run stopped at a wait: nothing after it runs
	}
	return nil
}

// crashPoint is the point where rowleasetest.Crash abandons a run
// (internal/crash). Run embeds it under this unexported name: it adds no
// field and no method to Run's API.
type crashPoint = crash.Point

// abandon stops the heartbeat and makes Handle return without writing or
// releasing anything, as if the process had crashed: the leases expire
// after their TTL and another run takes the request over. It is for crash
// tests (rowleasetest.Crash, through the run's crashPoint, and this
// package's own). The agent should return soon after.
func (run *Run) abandon() {
	run.abandonOnce.Do(func() { close(run.abandoned) })
	if run.sup != nil {
		run.sup.Stop()
	}
}

func (run *Run) isAbandoned() bool {
	select {
	case <-run.abandoned:
		return true
	default:
		return false
	}
}

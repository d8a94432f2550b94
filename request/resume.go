package request

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/schema"
)

// Defaults of ResumeConfig.
const (
	DefaultResumeMaxConcurrent = 4
	DefaultResumeMaxAttempts   = 5
)

// ResumeConfig bounds how a Started Runner with an Agent resumes, on its
// own, the runs whose process died (those whose agent it has: see
// Agents): a message accepted at once (Reject, or
// Interrupt/Queue started at once) whose run died is resumed after its
// lease expired plus Grace, ahead of the session's queue, as a dead run of
// a queued message always was. The zero value means the defaults.
type ResumeConfig struct {
	// Grace after the lease expired (or, for a run that gave its lease
	// back, after it did) before a Started Runner with an Agent resumes an
	// orphaned processing request that was accepted at once: the time a
	// client has to resend it itself. 0 means the TTL. The session's
	// queued messages wait for it: an orphan always runs first.
	Grace time.Duration
	// MaxConcurrent is the most resumed runs (of either kind) a Runner
	// runs at once; 0 means DefaultResumeMaxConcurrent. The others wait
	// for a later dispatch.
	MaxConcurrent int
	// MaxAttempts: a request whose runs died this many times (a run
	// that stopped holding its lease, a crash or a lost database
	// connection; a run that gave its leases back — Close, a caller that
	// gave up — does not count) is not resumed by the service again: it
	// is marked error, with the cause in its error text (Status.Error). 0
	// means DefaultResumeMaxAttempts. A client's resend may still retry
	// it, as any failed request.
	MaxAttempts int
	// Backoff is the base delay added per attempt before a request whose
	// runs keep dying is resumed again: after its n-th run died it waits
	// (n−1)·Backoff more (plus Grace for one accepted at once). 0 means
	// the TTL.
	Backoff time.Duration
	// Disabled turns the service's resume of runs accepted at once off:
	// they wait for their client's resend, as before, and do not hold up
	// the queue. Dead runs of queued messages are still resumed (without
	// that, their queue would stop).
	Disabled bool
}

func (c *ResumeConfig) fill(ttl time.Duration) error {
	if c.Grace == 0 {
		c.Grace = ttl
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = DefaultResumeMaxConcurrent
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultResumeMaxAttempts
	}
	if c.Backoff == 0 {
		c.Backoff = ttl
	}
	switch {
	case c.Grace < 0:
		return invalid("resume grace", "negative")
	case c.MaxConcurrent < 1 || c.MaxConcurrent > 10000:
		return invalid("resume max concurrent", "not between 1 and 10000")
	case c.MaxAttempts < 1 || c.MaxAttempts > 1000:
		return invalid("resume max attempts", "not between 1 and 1000")
	case c.Backoff < 0 || c.Backoff > 24*time.Hour:
		return invalid("resume backoff", "negative or longer than a day")
	}
	return nil
}

// resumeConds returns the SQL conditions (on the unqualified or
// alias-qualified columns of the request table, prefix p: "" or "p.") of
//
//   - resumable: the request is a candidate for a resumed run: a processing
//     one that came through the queue, or (unless resume is disabled) that
//     was accepted at once with its content stored, nobody asked to stop;
//   - due: its run is gone for long enough: its lease expired (or was
//     given back) at least the grace (for one accepted at once) plus the
//     back-off of its attempts ago, by the database clock.
//
// The durations are the Runner's configuration, written as integer
// literals: no input reaches the text.
func (r *Runner) resumeConds(p string) (resumable, due string) {
	d := r.cfg.Dialect
	c := r.cfg.Resume
	kind := p + schema.ColQueueSeq + " IS NOT NULL"
	if !c.Disabled {
		kind = "(" + kind + " OR " + p + schema.ColContent + " IS NOT NULL)"
	}
	resumable = p + schema.ColStatus + " = " + lit(schema.StoredProcessing) + " AND " + p + schema.ColInterruptedBy + " IS NULL AND " + kind
	delay := "CASE WHEN " + p + schema.ColQueueSeq + " IS NULL THEN " + strconv.FormatInt(c.Grace.Microseconds(), 10) +
		" ELSE 0 END + " + strconv.FormatInt(c.Backoff.Microseconds(), 10) + " * CASE WHEN " + deaths(p) + " > 0 THEN " +
		deaths(p) + " - 1 ELSE 0 END"
	at := minusMicros(d, engine.Now(d), delay)
	due = "((" + p + schema.ColToken + " IS NULL AND " + p + schema.ColUpdatedAt + " <= " + at + ") OR " +
		p + schema.ColExpiresAt + " <= " + at + ")"
	return resumable, due
}

// deaths is how many runs of a request died (p: "" or an alias and a
// dot): those counted by the claims that took it over from them
// (schema.ColDeaths), and the last run if it still holds the lease (it
// did not give it back; an expired lease is a death not yet counted).
// Graceful give-backs (Close, a cancelled caller) free the lease, and do
// not count.
func deaths(p string) string {
	return "(" + p + schema.ColDeaths + " + CASE WHEN " + p + schema.ColToken + " IS NOT NULL THEN 1 ELSE 0 END)"
}

// resumeSlots bounds the resumed runs of a Runner (ResumeConfig.MaxConcurrent).
type resumeSlots struct {
	mu sync.Mutex
	n  int
}

// takeResumeSlot reports whether one more resumed run may start now, and
// counts it.
func (r *Runner) takeResumeSlot() bool {
	r.resumes.mu.Lock()
	defer r.resumes.mu.Unlock()
	if r.resumes.n >= r.cfg.Resume.MaxConcurrent {
		return false
	}
	r.resumes.n++
	return true
}

func (r *Runner) giveResumeSlot() {
	r.resumes.mu.Lock()
	r.resumes.n--
	r.resumes.mu.Unlock()
}

// endResume gives the run's resume slot back, once.
func (run *Run) endResume() {
	if run.slot != nil {
		run.slot.Do(run.r.giveResumeSlot)
	}
}

// giveUp marks the head's request error after its runs died
// MaxAttempts times; it reports whether it did.
func (r *Runner) giveUp(ctx context.Context, h queuedHead) (bool, error) {
	msg := fmt.Sprintf("request: not resumed again: its run died %d times (its lease expired without an outcome; "+
		"ResumeConfig.MaxAttempts is %d); a resend of the message retries it", h.deaths, r.cfg.Resume.MaxAttempts)
	n, err := r.exec(ctx, r.sql.giveUp, schema.ErrorText(msg), h.id, h.generation)
	if err != nil {
		return false, fmt.Errorf("request: marking a dead run error after its attempts: %w", err)
	}
	if n == 1 {
		r.log.Warn("rowlease: a request's run kept dying; it is marked error and not resumed again",
			"request", h.id, "deaths", h.deaths)
	}
	return n == 1, nil
}

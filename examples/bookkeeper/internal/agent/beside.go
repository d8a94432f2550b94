package agent

import (
	"context"
	"database/sql"
	"errors"
	"sync"

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
)

// ErrBesideStep is how the transaction that Config.InTxBesideStep runs
// beside a model round's step ends every other time: it rolls back.
var ErrBesideStep = errors.New("agent: the transaction beside the step failed on purpose (-intx-beside-step)")

// beside is the fenced transaction run beside one model round's step
// (Config.InTxBesideStep).
type beside struct {
	a        *Agent
	run      *request.Run
	n        int           // the round
	fail     bool          // it ends in ErrBesideStep
	opened   chan struct{} // its round is journalled in it, and it is open
	answer   chan struct{} // the model answered, or the step returned
	recorded chan struct{} // the step returned
	done     chan error    // its outcome

	openOnce, answerOnce sync.Once
}

// startBeside starts the transaction beside step n on another goroutine
// and returns once it is open (or could not open): the step then runs
// while it is. End it with end, after the step returned.
func (a *Agent) startBeside(ctx context.Context, run *request.Run, n int) *beside {
	b := &beside{a: a, run: run, n: n, fail: a.besides.Add(1)%2 == 0, opened: make(chan struct{}),
		answer: make(chan struct{}), recorded: make(chan struct{}), done: make(chan error, 1)}
	// On SQLite the transaction holds the database's only write lock from
	// its BEGIN IMMEDIATE: the step's write waits for it, so it must end
	// once the model answered (the step's write then on its way), not
	// once the step is recorded. Elsewhere it stays open until the step is
	// recorded.
	release := b.recorded
	if a.st.Dialect == lease.SQLite {
		release = b.answer
	}
	go func() {
		b.done <- run.InTx(ctx, func(tx *sql.Tx) error {
			if err := a.st.AppendModelRound(ctx, tx, run.SessionKey(), run.RequestID(), n); err != nil {
				return err
			}
			b.openOnce.Do(func() { close(b.opened) })
			select {
			case <-release:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if b.fail {
				return ErrBesideStep
			}
			return nil
		})
	}()
	select {
	case <-b.opened:
	case err := <-b.done:
		b.done <- err // for end
	}
	return b
}

// answered says that the model answered the round. b may be nil.
func (b *beside) answered() {
	if b != nil {
		b.answerOnce.Do(func() { close(b.answer) })
	}
}

// end says that the step returned, waits for the transaction's outcome and
// logs it. Its failure is not the message's: the agent goes on.
func (b *beside) end() {
	b.answered()
	close(b.recorded)
	err := <-b.done
	log := b.a.log.With("request", b.run.RequestID(), "client_request_id", b.run.ClientRequestID(), "round", b.n)
	switch {
	case err == nil:
		log.Debug("agent: transaction beside the step committed")
	case errors.Is(err, ErrBesideStep):
		log.Info("agent: transaction beside the step rolled back", "err", err)
	default:
		log.Warn("agent: transaction beside the step failed", "err", err)
	}
}

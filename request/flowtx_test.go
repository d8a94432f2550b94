package request

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/session"
)

// seqLog orders events of several goroutines.
type seqLog struct {
	mu     sync.Mutex
	events []string
}

func (l *seqLog) add(ev string) {
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
}

func (l *seqLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// On SQLite a run's renewals go into its open fenced transaction. When
// that transaction ends without committing — here database/sql would roll
// it back because the context given to InTx ended — they are undone, and
// the leases' last committed expiry is long past. The run must know that
// before anyone else can take its session: its context is cancelled (a
// lost lease) before a second Runner's agent starts, never after.
func TestRolledBackRenewalsDoNotKeepTheRun(t *testing.T) {
	db := testdb.Open(t, lease.SQLite)
	e := newEnv(t, db, 600*time.Millisecond)
	mod := func(c *Config) { c.HeartbeatInterval = 200 * time.Millisecond }
	first, second := e.newRunner(t, mod), e.newRunner(t, mod)
	ctx := bg(t)

	var log seqLog
	var firstWork context.Context
	var mu sync.Mutex // guards firstWork
	inTx := make(chan struct{})
	txDone := make(chan error, 1)
	giveUp := make(chan struct{})
	firstAgent := func(work context.Context, run *Run) (Answer, error) {
		mu.Lock()
		firstWork = work
		mu.Unlock()
		// A transaction that waits for something that does not come, under
		// a context that gives up after 1.5s: far past the TTL.
		tctx, cancel := context.WithTimeout(work, 1500*time.Millisecond)
		defer cancel()
		err := run.InTx(tctx, func(tx *sql.Tx) error {
			close(inTx)
			<-tctx.Done()
			return tctx.Err()
		})
		txDone <- err
		select {
		case <-work.Done():
			log.add("first: work context done")
			return Answer{}, context.Cause(work)
		case <-giveUp:
			log.add("first: gave up waiting for its context")
			return Answer{}, errors.New("gave up")
		}
	}
	firstOut := make(chan error, 1)
	go func() {
		_, err := first.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "a", Content: "first"}, firstAgent)
		firstOut <- err
	}()
	<-inTx

	// A second Runner sends another message of the session until it runs.
	secondOut := make(chan error, 1)
	go func() {
		agent := func(context.Context, *Run) (Answer, error) {
			mu.Lock()
			w := firstWork
			mu.Unlock()
			if w.Err() == nil {
				log.add("second: agent started while the first run's context is live")
			} else {
				log.add("second: agent started after the first run's context ended")
			}
			return Answer{Reply: "second"}, nil
		}
		for {
			_, err := second.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "b", Content: "second"}, agent)
			if !errors.As(err, new(*session.BusyError)) {
				secondOut <- err
				return
			}
			select {
			case <-giveUp:
				secondOut <- err
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	terr := <-txDone
	require.Error(t, terr, "the transaction must not commit")
	t.Logf("InTx: %v", terr)
	var ferr error
	select {
	case ferr = <-firstOut:
	case <-time.After(30 * time.Second):
		// The first run kept trusting leases whose renewals were rolled
		// back; stop it.
		close(giveUp)
		ferr = <-firstOut
		<-secondOut
		t.Fatalf("the first run's context was never cancelled after its renewals were rolled back (first: %v); events: %q", ferr, log.list())
	}
	serr := <-secondOut
	close(giveUp)

	assert.ErrorIs(t, ferr, ErrTakenOver, "the first run lost its leases")
	var le *heartbeat.LostError
	if assert.ErrorAs(t, ferr, &le) {
		assert.Equal(t, heartbeat.ReasonDeadline, le.Reason, "lost by its trust deadline, which the rolled-back renewals no longer move")
	}
	require.NoError(t, serr, "the second message runs once the first run is gone")
	assert.Equal(t, []string{
		"first: work context done",
		"second: agent started after the first run's context ended",
	}, sortFirstDone(log.list()), "events")
}

// sortFirstDone returns events with the second agent's line last: the
// first agent's goroutine may record its context's end after the second
// agent started, but the second agent itself saw whether it had ended.
func sortFirstDone(events []string) []string {
	var out, last []string
	for _, ev := range events {
		if len(ev) > 7 && ev[:7] == "second:" {
			last = append(last, ev)
		} else {
			out = append(out, ev)
		}
	}
	return append(out, last...)
}

// On SQLite a fenced transaction whose fn fails is rolled back to a
// savepoint taken at its start, which undoes the renewals routed into it
// too, and the run's leases are then confirmed again. When the
// transaction outlived the leases' last committed expiry, that confirm
// used to find them expired and roll everything back: the run reported a
// loss that nobody caused. The renewals are made again instead, and
// committed.
func TestFailedTransactionKeepsTheRunsLeases(t *testing.T) {
	db := testdb.Open(t, lease.SQLite)
	e := newEnv(t, db, 2*time.Second)
	r := e.newRunner(t, func(c *Config) { c.HeartbeatInterval = 500 * time.Millisecond })
	ctx := bg(t)
	errFailed := errors.New("the side effect failed")
	var txErr error
	out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "a", Content: "x"}, func(work context.Context, run *Run) (Answer, error) {
		txErr = run.InTx(work, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(work, "INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)", run.RequestID(), "1"); err != nil {
				return err
			}
			// Work past the TTL: only the renewals inside this
			// transaction keep the leases.
			select {
			case <-time.After(3 * time.Second):
			case <-work.Done():
				return context.Cause(work)
			}
			return errFailed
		})
		if !errors.Is(txErr, errFailed) || errors.Is(txErr, lease.ErrLost) {
			return Answer{}, txErr
		}
		return Answer{Reply: "kept"}, nil
	})
	require.NoError(t, err, "the run keeps its leases (InTx: %v)", txErr)
	assert.Equal(t, "kept", out.Reply)
	assert.Equal(t, errFailed, txErr, "InTx returns fn's error alone")
	assert.Equal(t, 0, e.ledgerRows(t), "fn's write is rolled back")
}

// A run that makes two fenced transactions at once (parallel InTx or tool
// calls) on SQLite keeps its leases through both, whether the DSN begins
// transactions deferred or immediate: its renewals go into the one that
// holds the write lock, never into one still waiting for it (where, on a
// deferred DSN, they used to wait with no deadline, and the run lost its
// leases to its own transactions).
func TestParallelTransactionsOfOneRun(t *testing.T) {
	for name, q := range map[string]string{
		"deferred":  "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)",
		"immediate": "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, err := sqlx.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "p.db")+q)
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			const ttl = 900 * time.Millisecond
			e := newEnv(t, db, ttl)
			r := e.newRunner(t, nil)
			ctx := bg(t)
			insert := func(tx *sql.Tx, run *Run) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)", run.RequestID(), "1")
				return err
			}
			out, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "a", Content: "x"}, func(work context.Context, run *Run) (Answer, error) {
				in1 := make(chan struct{})
				errs := make(chan error, 2)
				go func() {
					errs <- run.InTx(work, func(tx *sql.Tx) error {
						if err := insert(tx, run); err != nil {
							return err
						}
						close(in1)
						// Hold the write lock past the TTL: only renewals
						// inside this transaction keep the run's leases.
						timer := time.NewTimer(2 * ttl)
						defer timer.Stop()
						select {
						case <-timer.C:
							return nil
						case <-work.Done():
							return context.Cause(work)
						}
					})
				}()
				<-in1
				go func() { errs <- run.InTx(work, func(tx *sql.Tx) error { return insert(tx, run) }) }()
				if err := errors.Join(<-errs, <-errs); err != nil {
					return Answer{}, err
				}
				return Answer{Reply: "both"}, nil
			})
			require.NoError(t, err)
			assert.Equal(t, "both", out.Reply)
			assert.Equal(t, 2, e.ledgerRows(t))
		})
	}
}

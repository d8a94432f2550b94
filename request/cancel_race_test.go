package request

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// TestCancelThenTheProcessDies: Cancel (from another process) flags a run
// that is live; its process dies before its heartbeat reads the flag. The
// request is neither resumed (it was cancelled) nor left processing: a
// Started Runner's dispatcher marks it cancelled once its lease has
// expired, and Cancel returns that.
func TestCancelThenTheProcessDies(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		const ttl = 4 * time.Second
		e := newEnv(t, db, ttl)
		ctx := bg(t)
		var resumed atomic.Int64
		b := e.newRunner(t, func(c *Config) {
			c.Agent = func(context.Context, *Run) (Answer, error) {
				resumed.Add(1)
				return Answer{Reply: "resumed"}, nil
			}
			c.Queue.DispatchInterval = 20 * time.Millisecond
		})
		require.NoError(t, b.Start(ctx))

		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"},
			func(ctx context.Context, run *Run) (Answer, error) {
				run.abandon() // the process dies: nothing more is written, its leases stay until they expire
				return Answer{}, errors.New("died")
			})
		require.ErrorIs(t, err, context.Canceled)
		st, err := b.Status(ctx, "s", "c")
		require.NoError(t, err)
		require.True(t, st.Live, "cancelled while its lease is live (the TTL is %v)", ttl)

		cctx, cancel := context.WithTimeout(ctx, 20*ttl)
		defer cancel()
		st, err = b.Cancel(cctx, "s", "c")
		require.NoError(t, err, "still %s, live %v, 20 TTLs after the cancel", st.State, st.Live)
		assert.Equal(t, StateCancelled, st.State)
		assert.Zero(t, resumed.Load(), "a cancelled request is never resumed")
		_, err = e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"},
			func(context.Context, *Run) (Answer, error) { return Answer{Reply: "ran"}, nil })
		require.ErrorIs(t, err, ErrCancelled)
	})
}

// TestCancelDuringResendClaim: a Cancel lands while a resend is taking
// over a request whose run died: after the resend read the request (not
// flagged, not live), and before its claim. The claim sees the flag: the
// request ends cancelled, and the resend runs nothing — no replay, no
// effect. The Cancel is held between its flag and its settle of the dead
// run (the window in which a claim could take the flagged request).
func TestCancelDuringResendClaim(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			c := &countdb.Counter{}
			db := testdb.OpenWith(t, d, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
			e := newEnvTB(t, db, 2*time.Second)
			ctx := bg(t)
			// Agent: a Queue message needs one (the resend below).
			r := e.newRunner(t, func(c *Config) { c.Agent = answerOK })
			other := e.newRunner(t, nil) // Cancel comes from another process

			// The first run commits one effect, then stops: the request
			// stays processing, its leases given back.
			msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
			fctx, stop := context.WithCancel(ctx)
			_, err := r.Handle(fctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
				if _, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":1}`)); err != nil {
					return Answer{}, err
				}
				stop()
				return Answer{}, context.Cause(ctx)
			})
			stop()
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, 1, e.ledgerRows(t))

			flagged, proceed := make(chan struct{}), make(chan struct{})
			var release sync.Once
			var reads atomic.Int64
			type result struct {
				st  Status
				err error
			}
			cancelled := make(chan result, 1)
			c.FailAfter(func(q string) error {
				switch q {
				case r.sql.find:
					if reads.Add(1) == 1 {
						// The resend has read the request: Cancel now.
						go func() {
							st, err := other.Cancel(ctx, "s", "c")
							cancelled <- result{st, err}
						}()
						<-flagged
					} else {
						release.Do(func() { close(proceed) }) // the resend read it again
					}
				case other.sql.cancelFlag:
					close(flagged)
					<-proceed
				}
				return nil
			})
			defer c.FailAfter(nil)

			var ran atomic.Int64
			// OnBusy Queue: the resend reads the request with find on every
			// dialect (a Reject one on PostgreSQL reads it in its claim
			// statement; the window after it is the same).
			resend := msg
			resend.OnBusy = Queue
			_, err = r.Handle(ctx, resend, func(ctx context.Context, run *Run) (Answer, error) {
				ran.Add(1)
				_, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":2}`))
				release.Do(func() { close(proceed) })
				if err != nil {
					return Answer{}, err
				}
				<-ctx.Done()
				return Answer{}, context.Cause(ctx)
			})
			require.ErrorIs(t, err, ErrCancelled)
			res := <-cancelled
			require.NoError(t, res.err)
			assert.Equal(t, StateCancelled, res.st.State)
			assert.Zero(t, ran.Load(), "the cancelled request did not run again")
			assert.Equal(t, 1, e.ledgerRows(t), "no effect after the cancel")
		})
	}
}

// TestCancelDuringResumeClaim: the same for a dispatcher's resume, on
// PostgreSQL: the cancel's flag commits inside the claim's transaction,
// after the claim marked the session's stopped runs (settle) and before it
// takes the request. On MariaDB the settle's UPDATE locks the rows of the
// session it reads (repeatable read), and on SQLite the claim's
// transaction holds the database: there the flag waits for the claim to
// commit, and is a cancel of a live run (TestCancelRunning).
func TestCancelDuringResumeClaim(t *testing.T) {
	c := &countdb.Counter{}
	db := testdb.OpenWith(t, lease.Postgres, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
	e := newEnvTB(t, db, 2*time.Second)
	ctx := bg(t)
	other := e.newRunner(t, nil)
	var ran atomic.Int64
	flagged, proceed := make(chan struct{}), make(chan struct{})
	var release sync.Once
	b := e.newRunner(t, func(c *Config) {
		c.Resume.Grace = time.Microsecond
		c.Agent = func(ctx context.Context, run *Run) (Answer, error) {
			ran.Add(1)
			_, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":2}`))
			release.Do(func() { close(proceed) })
			if err != nil {
				return Answer{}, err
			}
			<-ctx.Done()
			return Answer{}, context.Cause(ctx)
		}
	})

	msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}
	fctx, stop := context.WithCancel(ctx)
	_, err := e.r.Handle(fctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
		if _, err := run.CallTool(ctx, "write", json.RawMessage(`{"amount":1}`)); err != nil {
			return Answer{}, err
		}
		stop()
		return Answer{}, context.Cause(ctx)
	})
	stop()
	require.ErrorIs(t, err, context.Canceled)

	var settled atomic.Bool
	type result struct {
		st  Status
		err error
	}
	cancelled := make(chan result, 1)
	c.FailAfter(func(q string) error {
		switch q {
		case b.sql.settle:
			if !settled.Swap(true) {
				go func() {
					st, err := other.Cancel(ctx, "s", "c")
					cancelled <- result{st, err}
				}()
				<-flagged
			}
		case b.sql.head:
			if settled.Load() {
				release.Do(func() { close(proceed) }) // the dispatcher read the head again
			}
		case other.sql.cancelFlag:
			close(flagged)
			<-proceed
		}
		return nil
	})
	defer c.FailAfter(nil)

	run, _, err := b.claimHead(ctx, "s")
	require.NoError(t, err)
	if run != nil {
		b.deliver(run)
	}
	res := <-cancelled
	require.NoError(t, res.err)
	assert.Equal(t, StateCancelled, res.st.State)
	assert.Nil(t, run, "the cancelled request was not resumed")
	assert.Zero(t, ran.Load(), "the cancelled request did not run again")
	assert.Equal(t, 1, e.ledgerRows(t), "no effect after the cancel")
}

// TestCancelLeavesAnInterruptAsIs: a run that another message asked to
// stop ends interrupted, as documented, even when its own client cancels
// it in the same process before its heartbeat has read the interrupt
// (the TTL is long: the first read is a quarter of it away).
func TestCancelLeavesAnInterruptAsIs(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		ctx := bg(t)
		r := e.newRunner(t, func(c *Config) { c.Agent = answerOK })
		other := e.newRunner(t, func(c *Config) { c.Agent = answerOK })
		started := make(chan struct{})
		var cause error
		done := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "running", Content: "x"},
				func(ctx context.Context, run *Run) (Answer, error) {
					close(started)
					<-ctx.Done()
					cause = context.Cause(ctx)
					return Answer{}, cause
				})
			done <- err
		}()
		<-started
		interrupter := make(chan error, 1)
		go func() {
			_, err := other.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "stop", Content: "y", OnBusy: Interrupt}, answerOK)
			interrupter <- err
		}()
		waitFor(t, func() bool {
			st, err := r.Status(ctx, "s", "running")
			require.NoError(t, err)
			return st.InterruptedBy == "stop"
		})

		st, err := r.Cancel(ctx, "s", "running")
		require.NoError(t, err)
		assert.Equal(t, StateInterrupted, st.State)
		assert.Equal(t, "stop", st.InterruptedBy)
		require.ErrorAs(t, <-done, new(*InterruptedError))
		require.ErrorAs(t, cause, new(*InterruptedError))
		require.NoError(t, <-interrupter)
	})
}

// TestCancelStopsTheRunThatTookOver: a run of request R is taken over by
// a second run of R in the same process while the first is still
// finishing. When the first run ends, the second must still be the one
// Cancel stops at once in this process (as the interrupt watch does,
// TestInterruptReachesTheRunThatTookOver).
func TestCancelStopsTheRunThatTookOver(t *testing.T) {
	each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db, 30*time.Second)
		r := e.newRunner(t, func(c *Config) { c.Agent = answerOK })
		ctx := bg(t)
		msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}

		firstIn, firstGo := make(chan struct{}), make(chan struct{})
		firstDone := make(chan error, 1)
		go func() {
			_, err := r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
				// The process stalls: its heartbeat stops and its leases
				// lapse (given back here, so the test need not wait a TTL).
				run.abandon()
				r.releaseAll(ctx, run)
				close(firstIn)
				<-firstGo
				return Answer{}, errors.New("stalled")
			})
			firstDone <- err
		}()
		<-firstIn

		secondIn := make(chan context.Context, 1)
		secondDone := make(chan error, 1)
		var id string
		go func() {
			_, err := r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
				id = run.RequestID()
				secondIn <- ctx
				<-ctx.Done()
				return Answer{}, context.Cause(ctx)
			})
			secondDone <- err
		}()
		second := <-secondIn
		// The first run ends now, after the second registered.
		close(firstGo)
		require.Error(t, <-firstDone)

		// Cancel's stop in this process, without the flag (which the
		// heartbeat would read within an interval): at once.
		r.stopLocal(id, ErrCancelled)
		atOnce := false
		select {
		case <-second.Done():
			atOnce = true
		default:
		}
		// Cancel as a client does: its flag stops the run in any case
		// (within a heartbeat interval).
		st, err := r.Cancel(ctx, "s", "c")
		require.NoError(t, err)
		assert.Equal(t, StateCancelled, st.State)
		require.ErrorIs(t, <-secondDone, ErrCancelled)
		require.True(t, atOnce, "Cancel's stop in this process missed the run that took over")
		require.ErrorIs(t, context.Cause(second), ErrCancelled)
	})
}

// TestCancelFlagSentAgainAfterDeadlock: on MySQL, Cancel's flag takes the
// request row through its (session, client request id) key, while a run's
// end takes it through its primary key; InnoDB can then pick the flag as
// the deadlock victim (1213). The victim took no effect, and Cancel sends
// it again instead of failing. The deadlock is made here on purpose: a
// transaction holds the row by its primary key, waits for the flag to
// queue behind it, then writes the row's keys, whose entries the flag
// holds, as a run's end does. It has written more (the ledger rows), so
// InnoDB picks the flag.
func TestCancelFlagSentAgainAfterDeadlock(t *testing.T) {
	db := testdb.Open(t, lease.MySQL)
	e := newEnv(t, db, 30*time.Second)
	r := e.newRunner(t, nil)
	ctx := bg(t)

	ids := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		_, err := r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, func(ctx context.Context, run *Run) (Answer, error) {
			ids <- run.RequestID()
			<-ctx.Done()
			return Answer{}, context.Cause(ctx)
		})
		done <- err
	}()
	id := <-ids

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	for i := 0; i < 20; i++ {
		_, err = tx.ExecContext(ctx, "INSERT INTO ledger_entry (request_id, amount) VALUES (?, '1')", id)
		require.NoError(t, err)
	}
	_, err = tx.ExecContext(ctx, "UPDATE "+schema.RequestTable+" SET content = 'held' WHERE id = ?", id)
	require.NoError(t, err)

	cancelled := make(chan error, 1)
	var st Status
	go func() {
		var err error
		st, err = r.Cancel(ctx, "s", "c")
		cancelled <- err
	}()
	// The flag waits for the row this transaction holds: the server lists
	// it as running for longer than a statement that is not blocked takes.
	waitFor(t, func() bool {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST"+
			" WHERE INFO LIKE 'UPDATE %interrupted_by = client_request_id%' AND TIME_MS > 200").Scan(&n))
		return n > 0
	})
	// Now the transaction needs what the flag holds: the row's entry in
	// the key the flag found it by, whichever the server chose. A run's
	// end does this when it writes the row's status and updated_at.
	_, err = tx.ExecContext(ctx, "UPDATE "+schema.RequestTable+
		" SET updated_at = UTC_TIMESTAMP(6) WHERE session_key = 's' AND client_request_id = 'c'")
	require.NoError(t, err, "the transaction holding more was picked as the victim; the test did not make the flag one")
	require.NoError(t, tx.Rollback())

	require.NoError(t, <-cancelled, "Cancel's flag was a deadlock victim, which took no effect: it is sent again")
	assert.Equal(t, StateCancelled, st.State)
	require.ErrorIs(t, <-done, ErrCancelled)
}

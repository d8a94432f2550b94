package heartbeat

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// ConnPool is a pool that gives out connections of its own: *sql.DB,
// *sqlx.DB. A renewal on one takes its connection explicitly, so that a
// renewal that could not get one before its trust deadline says so
// (lease.ErrPoolExhausted).
type ConnPool interface {
	lease.DB
	Conn(ctx context.Context) (*sql.Conn, error)
}

// takeConn takes a connection of p for a renewal whose context is ctx.
// When ctx's deadline passes while it waits for a database/sql pool whose
// every connection is open and in use (full), the error matches
// lease.ErrPoolExhausted: every connection was in use until the trust
// deadline. A wait that ctx cuts short otherwise — a new connection being
// dialled, a pool that database/sql does not bound — is ctx's error.
func takeConn(ctx context.Context, p ConnPool) (*sql.Conn, error) {
	wasFull := full(p)
	c, err := p.Conn(ctx)
	if err == nil {
		return c, nil
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && !lease.IsUnavailable(err) && (wasFull || full(p)) {
		return nil, fmt.Errorf("%w: waited for one to renew until the trust deadline: %w", lease.ErrPoolExhausted, err)
	}
	return nil, err
}

// singleConn reports a pool that opens one connection at most
// (sql.DB.SetMaxOpenConns(1)): a connection kept for the renewals would
// leave none for the work.
func singleConn(p ConnPool) bool {
	s, ok := p.(interface{ Stats() sql.DBStats })
	return ok && s.Stats().MaxOpenConnections == 1
}

// connBroken reports an error after which a kept connection is not to be
// used again: it broke, or a statement on it was cut by its context.
func connBroken(err error) bool {
	return err != nil && (lease.IsUnavailable(err) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled))
}

// keptConn is the connection of BatchConfig.Pool that a Batcher renews
// on. sem (capacity 1) is held by whoever uses or changes conn: the
// Batcher's goroutine for a round, Reserve, Close.
type keptConn struct {
	sem    chan struct{}
	conn   *sql.Conn // nil until taken, and after it broke
	closed bool
	// linger gives conn back BatchConfig.KeepIdle after the Batcher was
	// last left with no lease (idle), unless it has leases again by then.
	linger  *time.Timer
	waiting atomic.Int32 // renewals waiting for a connection now
	starved atomic.Bool  // the last wait for a connection ran out (take)
}

// lock takes k.sem, or returns ctx's error.
func (k *keptConn) lock(ctx context.Context) error {
	select {
	case k.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *keptConn) unlock() { <-k.sem }

// Reserve takes the connection of BatchConfig.Pool that the Batcher
// renews on, now, unless it keeps one already (or has no Pool, was
// closed, or Pool opens one connection at most). Without Reserve the
// Batcher takes it for its first round on Pool. The Batcher keeps it
// while it has leases to renew and gives it back BatchConfig.KeepIdle
// after it has none left (a connection reserved for leases not added yet
// is kept for them), or at Close. Call it before the work
// that will hold the pool's other connections starts (package request
// does, before each run's agent): a round that finds every connection in
// use waits for one, and the runs' leases are lost, with
// lease.ErrPoolExhausted, if none is free before their trust deadline.
// An error matching lease.ErrPoolExhausted means no connection was free
// before ctx's deadline; the Batcher then tries again at its next round.
func (b *Batcher) Reserve(ctx context.Context) error {
	p := b.cfg.Pool
	if p == nil {
		return nil
	}
	k := &b.kept
	select {
	case k.sem <- struct{}{}:
	default:
		// A round renews on the kept connection (its statement may be
		// waiting for a row lock: the run must not wait behind it), or
		// another Reserve is taking one: either way the rounds have one,
		// or take one.
		return nil
	}
	defer k.unlock()
	if k.closed || k.conn != nil || singleConn(p) {
		return nil
	}
	c, err := b.take(ctx, p)
	if err != nil {
		return err
	}
	k.conn = c
	b.mu.Lock()
	b.reserved = true
	b.mu.Unlock()
	return nil
}

// defaultKeepIdle is BatchConfig.KeepIdle's default (or the Interval, if
// shorter).
const defaultKeepIdle = 100 * time.Millisecond

// idle is called when the Batcher's goroutine returns, keeping no lease:
// the kept connection is given back KeepIdle later (giveBack), unless the
// Batcher has leases again, or Reserve took it for a run about to start:
// a Batcher with nothing to renew holds no connection of the pool for
// longer than that. Kept meanwhile, the connection stays the
// Batcher's across runs that follow each other: given back and taken
// again for each run of a session that sends one message after another,
// it would be the one the run had just used (database/sql hands out the
// last connection given back), and move the run's next statements to
// another — on SQLite one whose page cache the last commit emptied.
func (b *Batcher) idle() {
	k := &b.kept
	k.sem <- struct{}{}
	defer k.unlock()
	if k.conn == nil || k.closed {
		return
	}
	if k.linger == nil {
		k.linger = time.AfterFunc(b.cfg.KeepIdle, b.giveBack)
		return
	}
	k.linger.Reset(b.cfg.KeepIdle)
}

// giveBack gives the kept connection back if the Batcher has had no lease
// since idle scheduled it, and no Reserve took it for a run about to
// start.
//
// It pings the connection first, outside k.sem (a round on a new lease
// takes another connection meanwhile, and never waits for the ping): kept
// idle, it may have broken since its last statement (the database
// restarted, the network cut it) without its driver knowing, and given
// back so, database/sql would hand it to the next statement of the work,
// which would fail on it. A connection whose ping fails is discarded.
func (b *Batcher) giveBack() {
	k := &b.kept
	k.sem <- struct{}{}
	b.mu.Lock()
	busy := b.running || b.reserved
	b.mu.Unlock()
	c := k.conn
	if busy || c == nil {
		k.unlock()
		return // a later idle schedules it again
	}
	k.conn = nil
	k.unlock()
	ctx, cancel := context.WithTimeout(context.Background(), min(b.cfg.Interval, time.Second))
	if err := c.PingContext(ctx); err != nil {
		_ = c.Raw(func(any) error { return driver.ErrBadConn }) // not back into the pool
	}
	cancel()
	_ = c.Close()
}

// take takes a connection of p (takeConn). It counts as waiting for the
// pool meanwhile (waitingForConn) only when p is a database/sql pool with
// every connection it may open in use (full): then the wait is for
// another holder to give one back. Otherwise db.Conn finds an idle
// connection or dials a new one, and a dial that the trust deadline cuts
// short (a connection the round's statement had to drop, taken again
// late) is not an exhausted pool. A pool that database/sql does not bound
// (pgxpool behind stdlib.OpenDBFromPool, which bounds it itself) is never
// counted: give it SetMaxOpenConns equal to its own limit to have its
// exhaustion told apart.
func (b *Batcher) take(ctx context.Context, p ConnPool) (*sql.Conn, error) {
	if full(p) {
		b.kept.waiting.Add(1)
		defer b.kept.waiting.Add(-1)
	}
	c, err := takeConn(ctx, p)
	// Until a connection is taken again, a round that gave up waiting
	// still counts: a Supervisor may look between its end and its
	// result.
	b.kept.starved.Store(errors.Is(err, lease.ErrPoolExhausted))
	return c, err
}

// full reports whether p is a database/sql pool whose every connection is
// open and in use, at its SetMaxOpenConns limit.
func full(p ConnPool) bool {
	s, ok := p.(interface{ Stats() sql.DBStats })
	if !ok {
		return false
	}
	st := s.Stats()
	return st.MaxOpenConnections > 0 && st.OpenConnections >= st.MaxOpenConnections && st.Idle == 0
}

// Close gives the Batcher's kept connection back to BatchConfig.Pool. The
// Batcher goes on renewing the leases it is given, from then on on Pool
// as without Pool: one connection taken per statement. Close waits for a
// round that is using the connection (it is bounded by the leases' trust
// deadlines); it is safe to call more than once, and without Pool.
func (b *Batcher) Close() error {
	k := &b.kept
	k.sem <- struct{}{}
	defer k.unlock()
	k.closed = true
	if k.linger != nil {
		k.linger.Stop()
	}
	if k.conn == nil {
		return nil
	}
	err := k.conn.Close()
	k.conn = nil
	return err
}

// waitingForConn reports whether a round is waiting for a connection of
// the pool now: a Supervisor whose trust deadline passes meanwhile
// reports lease.ErrPoolExhausted.
func (b *Batcher) waitingForConn() bool {
	return b.kept.waiting.Load() > 0 || b.kept.starved.Load()
}

// errStillWaiting is the error of a loss found while the Batcher's round
// still waits for a connection.
var errStillWaiting = fmt.Errorf("%w: the batched renewal was still waiting for one at the trust deadline", lease.ErrPoolExhausted)

// on returns the DB to send a round's statement for the leases of pool
// on, and the function to call with the statement's error when it is
// done:
//
//   - pool is BatchConfig.Pool: the kept connection, taken now if the
//     Batcher has none (it broke, or was never taken); a connection that
//     a statement found broken is given back, and taken again next round;
//   - another ConnPool (or Pool after Close, or a Pool of one connection):
//     a connection taken for this statement alone;
//   - anything else: pool itself.
//
// Waiting for a connection until ctx's deadline gives an error matching
// lease.ErrPoolExhausted.
func (b *Batcher) on(ctx context.Context, pool lease.DB) (lease.DB, func(error), error) {
	p, ok := pool.(ConnPool)
	if !ok || isNilDB(pool) {
		return pool, func(error) {}, nil
	}
	k := &b.kept
	if b.cfg.Pool != nil && poolOf(pool) == poolOf(b.cfg.Pool) {
		// Waiting here is waiting for the Batcher's own previous
		// statement on the kept connection (a row lock it waits for, say),
		// not for the pool: it does not count as waiting for a connection.
		select {
		case k.sem <- struct{}{}: // free: taken even if ctx has ended
		default:
			if err := k.lock(ctx); err != nil {
				return nil, nil, err
			}
		}
		if !k.closed && !singleConn(p) {
			if k.conn == nil {
				c, err := b.take(ctx, p)
				if err != nil {
					k.unlock()
					return nil, nil, err
				}
				k.conn = c
			}
			return engine.OnConn(p, k.conn), func(err error) {
				if connBroken(err) {
					_ = k.conn.Close()
					k.conn = nil
				}
				k.unlock()
			}, nil
		}
		k.unlock()
	}
	c, err := b.take(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	return engine.OnConn(p, c), func(error) { _ = c.Close() }, nil
}

// hookDB is the DB AfterRound gets: the kept connection, with the
// function that gives the lock back, or Pool when none is kept.
func (b *Batcher) hookDB(ctx context.Context) (lease.DB, func()) {
	p := b.cfg.Pool
	if p == nil {
		return nil, func() {}
	}
	k := &b.kept
	if k.lock(ctx) != nil {
		return p, func() {}
	}
	if k.conn == nil {
		k.unlock()
		return p, func() {}
	}
	return engine.OnConn(p, k.conn), k.unlock
}

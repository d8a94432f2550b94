package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

func TestNewValidation(t *testing.T) {
	tbl := engine.MustTable("t", tableTestCols)
	for name, c := range map[string]struct {
		d     engine.Dialect
		tbl   engine.Table
		opts  engine.Options
		field string
	}{
		"zero dialect":        {0, tbl, engine.Options{}, "dialect"},
		"unknown dialect":     {engine.Dialect(4), tbl, engine.Options{}, "dialect"},
		"negative dialect":    {engine.Dialect(-1), tbl, engine.Options{}, "dialect"},
		"zero table":          {engine.SQLite, engine.Table{}, engine.Options{}, "table"},
		"negative margin":     {engine.SQLite, tbl, engine.Options{SafetyMargin: -time.Nanosecond}, "safety margin"},
		"margin at MaxTTL":    {engine.SQLite, tbl, engine.Options{SafetyMargin: engine.MaxTTL}, "safety margin"},
		"margin above MaxTTL": {engine.Postgres, tbl, engine.Options{SafetyMargin: 2 * engine.MaxTTL}, "safety margin"},
		"resolution 2s":       {engine.MySQL, tbl, engine.Options{ExpiryResolution: 2 * time.Second}, "expiry resolution"},
		"resolution 3ms":      {engine.MySQL, tbl, engine.Options{ExpiryResolution: 3 * time.Millisecond}, "expiry resolution"},
		"resolution 1ns":      {engine.Postgres, tbl, engine.Options{ExpiryResolution: time.Nanosecond}, "expiry resolution"},
		"resolution negative": {engine.MySQL, tbl, engine.Options{ExpiryResolution: -time.Second}, "expiry resolution"},
	} {
		l, err := engine.New[string](c.d, c.tbl, c.opts)
		assert.Nil(t, l, name)
		var ve *engine.ValidationError
		require.ErrorAs(t, err, &ve, name)
		assert.Equal(t, c.field, ve.Field, name)
		assert.ErrorIs(t, err, engine.ErrInvalid, name)
	}
	for _, d := range mockDialects {
		l, err := engine.New[int64](d, tbl, engine.Options{SafetyMargin: time.Second})
		require.NoError(t, err)
		assert.Equal(t, d, engine.DialectOf(l))
		assert.Equal(t, tbl, engine.TableOf(l))
	}
	// Resolution: the database clock's step, or a coarser declared column.
	for _, c := range []struct {
		d        engine.Dialect
		declared time.Duration
		want     time.Duration
	}{
		{engine.MySQL, 0, time.Microsecond},
		{engine.Postgres, 0, time.Microsecond},
		{engine.SQLite, 0, time.Millisecond},
		{engine.MySQL, time.Second, time.Second},
		{engine.Postgres, 10 * time.Millisecond, 10 * time.Millisecond},
		{engine.SQLite, 10 * time.Microsecond, time.Millisecond},
		{engine.MySQL, time.Microsecond, time.Microsecond},
	} {
		l, err := engine.New[string](c.d, tbl, engine.Options{ExpiryResolution: c.declared})
		require.NoError(t, err)
		assert.Equal(t, c.want, engine.Resolution(l), "%s, declared %s", c.d, c.declared)
	}
}

// TestSafetyMargin: a TTL not above the margin is rejected before any SQL
// is sent, on every operation that takes a TTL.
func TestSafetyMargin(t *testing.T) {
	ctx := context.Background()
	db, _ := newMock(t) // no expectations: any statement fails the test
	l, err := engine.New[string](engine.SQLite, mockTable, engine.Options{SafetyMargin: 2 * time.Second})
	require.NoError(t, err)
	g := mockGrant(t)
	for _, ttl := range []time.Duration{time.Millisecond, time.Second, 2 * time.Second} {
		errs := []error{}
		_, err := l.Acquire(ctx, db, "k", "a", ttl)
		errs = append(errs, err)
		_, err = l.Renew(ctx, db, g, ttl)
		errs = append(errs, err)
		_, err = l.Create(ctx, db, "k", "a", ttl, engine.CreateOptions{})
		errs = append(errs, err)
		_, err = l.Transition(ctx, db, g, engine.ChangeOptions{Keep: true, TTL: ttl})
		errs = append(errs, err)
		for i, err := range errs {
			var ve *engine.ValidationError
			require.ErrorAs(t, err, &ve, "ttl %s, call %d", ttl, i)
			assert.Equal(t, "ttl", ve.Field)
			assert.Contains(t, err.Error(), "2s")
		}
	}

	// The clock's resolution counts too: on SQLite (1ms) a TTL of the
	// margin + 1ms is refused, and just above it passes validation (and
	// reaches the database).
	require.Equal(t, time.Millisecond, engine.Resolution(l))
	_, err = l.Acquire(ctx, db, "k", "a", 2*time.Second+time.Millisecond)
	assert.ErrorIs(t, err, engine.ErrInvalid)
	db2, mock, err := sqlmock.New() // regexp matching: any UPDATE
	require.NoError(t, err)
	defer db2.Close()
	mock.ExpectQuery(`^UPDATE `).WillReturnError(errors.New("reached the database"))
	_, err = l.Acquire(ctx, db2, "k", "a", 2*time.Second+time.Millisecond+time.Microsecond)
	assert.EqualError(t, err, "reached the database")

	// The default margin is TTL/10: every legal TTL is above it.
	def, err := engine.New[string](engine.SQLite, mockTable, engine.Options{})
	require.NoError(t, err)
	for _, ttl := range []time.Duration{engine.MinTTL - time.Nanosecond, 0, -time.Second, engine.MaxTTL + time.Nanosecond} {
		_, err := def.Acquire(ctx, db, "k", "a", ttl)
		assert.ErrorIs(t, err, engine.ErrInvalid, "ttl %s", ttl)
	}
}

// stepClock hands out base, base+1h, base+2h, … and records, for each
// reading, how many statements had been sent at that moment.
type stepClock struct {
	mu      sync.Mutex
	base    time.Time
	calls   int
	counter *countdb.Counter
	sentAt  []int64
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.base.Add(time.Duration(c.calls) * time.Hour)
	c.calls++
	c.sentAt = append(c.sentAt, c.counter.Count())
	return t
}

// last returns the time of the latest reading and the statement count
// then.
func (c *stepClock) last() (time.Time, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Add(time.Duration(c.calls-1) * time.Hour), c.sentAt[len(c.sentAt)-1]
}

// TestDeadline: Grant.Deadline is the local clock reading taken before the
// statement was sent, + TTL − margin − resolution (SQLite's clock: 1ms),
// exactly; one reading per operation.
func TestDeadline(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		margin time.Duration
		// marginFor gives the margin applied to a TTL.
		marginFor func(time.Duration) time.Duration
	}{
		{"default margin", 0, func(ttl time.Duration) time.Duration { return ttl / 10 }},
		{"explicit margin", 1500 * time.Millisecond, func(time.Duration) time.Duration { return 1500 * time.Millisecond }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var counter countdb.Counter
			clock := &stepClock{base: time.Date(2030, 5, 6, 7, 8, 9, 123456789, time.UTC), counter: &counter}
			e := conformance.Setup(t, testdb.Open(t, engine.SQLite), engine.Options{SafetyMargin: c.margin, Clock: clock})
			db := counter.Wrap(e.DB)
			require.NoError(t, e.Lease.Ensure(ctx, db, "k", engine.CreateOptions{}))

			check := func(op string, g engine.Grant[string], ttl time.Duration) {
				t.Helper()
				sent, count := clock.last()
				assert.Equal(t, counter.Count()-1, count, "%s: the clock is read before the statement is sent", op)
				assert.Equal(t, sent.Add(ttl-c.marginFor(ttl)-time.Millisecond), g.Deadline, op)
				assert.Equal(t, ttl, g.TTL, op)
				assert.True(t, g.Trusted(g.Deadline.Add(-time.Nanosecond)), op)
				assert.False(t, g.Trusted(g.Deadline), op)
			}

			g, err := e.Lease.Acquire(ctx, db, "k", "alice", 10*time.Second)
			require.NoError(t, err)
			check("acquire", g, 10*time.Second)
			assert.Equal(t, 1, clock.calls)

			g, err = e.Lease.Renew(ctx, db, g, 4*time.Second)
			require.NoError(t, err)
			check("renew", g, 4*time.Second)
			assert.Equal(t, 2, clock.calls)

			g, err = e.Lease.AcquireWith(ctx, db, "k", "alice", 20*time.Second, engine.AcquireOptions{Token: g.Token})
			require.NoError(t, err)
			check("reentry", g, 20*time.Second)

			g, err = e.Lease.Transition(ctx, db, g, engine.ChangeOptions{Keep: true, TTL: 3 * time.Second, To: "processing"})
			require.NoError(t, err)
			check("transition keep", g, 3*time.Second)

			gc, err := e.Lease.Create(ctx, db, "c", "carol", 6*time.Second, engine.CreateOptions{})
			require.NoError(t, err)
			check("create", gc, 6*time.Second)

			// Released: the deadline is the send time (no longer trusted).
			calls := clock.calls
			g2, err := e.Lease.Transition(ctx, db, g, engine.ChangeOptions{To: "done"})
			require.NoError(t, err)
			sent, _ := clock.last()
			assert.Equal(t, calls+1, clock.calls)
			assert.Equal(t, sent, g2.Deadline)
			assert.False(t, g2.Trusted(sent))

			// Operations that grant nothing do not read the clock.
			calls = clock.calls
			_, _ = engine.Verify(ctx, e.Lease, db, gc, false)
			_, _ = e.Lease.Inspect(ctx, db, "c")
			require.NoError(t, e.Lease.Release(ctx, db, gc))
			assert.Equal(t, calls, clock.calls)

			// A failed renew (the row was released above) reads the clock but
			// hands back the grant, deadline included, as it was.
			g3, err := e.Lease.Renew(ctx, db, g, 5*time.Second)
			require.ErrorIs(t, err, engine.ErrLost)
			assert.Equal(t, g, g3)
		})
	}
}

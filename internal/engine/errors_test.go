package engine_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
)

func TestErrorMessagesAndIs(t *testing.T) {
	sentinels := []error{engine.ErrHeld, engine.ErrLost, engine.ErrNotFound, engine.ErrExists, engine.ErrState, engine.ErrInvalid}
	driverErr := &mysql.MySQLError{Number: 1062, Message: "Duplicate entry 'k' for key 'PRIMARY'"}
	cases := []struct {
		err  error
		is   error
		text string
	}{
		{&engine.ConflictError{Key: "k", Holder: "alice", Generation: 3, Remaining: 1500*time.Millisecond + 400*time.Microsecond},
			engine.ErrHeld, `lease: held by another holder (key "k", holder "alice", generation 3, 1.5s left)`},
		{&engine.ConflictError{Key: "k"}, engine.ErrHeld, `lease: held by another holder (key "k", holder "", generation 0, 0s left)`},
		{&engine.LostError{Key: "k", Op: "renew"}, engine.ErrLost,
			`lease: lost (key "k", renew: token no longer matches: taken over, released or in another state)`},
		{&engine.StateError{Key: "k", State: "success", Want: []string{"queued", "error"}}, engine.ErrState,
			`lease: row in another state (key "k", state "success", want one of ["queued" "error"])`},
		{&engine.ValidationError{Field: "ttl", Reason: "must be positive"}, engine.ErrInvalid, `lease: invalid ttl: must be positive`},
		{&engine.ValidationError{Package: "request", Field: "session key", Reason: "empty"}, engine.ErrInvalid, `request: invalid session key: empty`},
		{&engine.DuplicateKeyError{Key: "k", Err: driverErr}, engine.ErrExists,
			`lease: already exists (key "k"): Error 1062: Duplicate entry 'k' for key 'PRIMARY'`},
	}
	for _, c := range cases {
		assert.Equal(t, c.text, c.err.Error())
		for _, wrapped := range []error{c.err, fmt.Errorf("op: %w", c.err), errors.Join(errors.New("x"), c.err)} {
			for _, s := range sentinels {
				assert.Equal(t, s == c.is, errors.Is(wrapped, s), "%v is %v", wrapped, s)
			}
		}
	}
	// Concrete types are reachable through wrapping.
	var ce *engine.ConflictError
	require.ErrorAs(t, fmt.Errorf("w: %w", &engine.ConflictError{Key: "k", Holder: "h"}), &ce)
	assert.Equal(t, "h", ce.Holder)
	var de *engine.DuplicateKeyError
	err := fmt.Errorf("w: %w", &engine.DuplicateKeyError{Key: "k", Err: driverErr})
	require.ErrorAs(t, err, &de)
	var my *mysql.MySQLError
	require.ErrorAs(t, err, &my, "unwraps to the driver error")
	assert.Equal(t, uint16(1062), my.Number)

	// Sentinel texts.
	assert.Equal(t, "lease: held by another holder", engine.ErrHeld.Error())
	assert.Equal(t, "lease: lost", engine.ErrLost.Error())
	assert.Equal(t, "lease: not found", engine.ErrNotFound.Error())
	assert.Equal(t, "lease: already exists", engine.ErrExists.Error())
	assert.Equal(t, "lease: row in another state", engine.ErrState.Error())
	assert.Equal(t, "lease: invalid input", engine.ErrInvalid.Error())

	// IsDuplicateKey.
	assert.False(t, engine.IsDuplicateKey(nil))
	assert.False(t, engine.IsDuplicateKey(errors.New("duplicate key")), "text is not enough")
	assert.True(t, engine.IsDuplicateKey(engine.ErrExists))
	assert.True(t, engine.IsDuplicateKey(fmt.Errorf("x: %w", driverErr)))
	assert.False(t, engine.IsDuplicateKey(&mysql.MySQLError{Number: 1452}))
	assert.True(t, engine.IsDuplicateKey(&fakePgError{"23505"}))
	assert.False(t, engine.IsDuplicateKey(&fakePgError{"40001"}))
	assert.True(t, engine.IsDuplicateKey(&fakeSQLiteError{2067}))
	assert.True(t, engine.IsDuplicateKey(&fakeSQLiteError{1555}))
	assert.False(t, engine.IsDuplicateKey(&fakeSQLiteError{19}), "a plain SQLITE_CONSTRAINT is not a duplicate")
	assert.False(t, engine.IsDuplicateKey(&engine.ConflictError{}))
}

func TestIsRetryable(t *testing.T) {
	cases := map[string]struct {
		err  error
		want bool
	}{
		"nil":                 {nil, false},
		"mysql deadlock":      {&mysql.MySQLError{Number: 1213}, true},
		"wrapped deadlock":    {fmt.Errorf("x: %w", &mysql.MySQLError{Number: 1213}), true},
		"mysql duplicate":     {&mysql.MySQLError{Number: 1062}, false},
		"pg serialization":    {&fakePgError{"40001"}, true},
		"pg deadlock":         {&fakePgError{"40P01"}, true},
		"pg unique violation": {&fakePgError{"23505"}, false},
		"plain":               {errors.New("boom"), false},
	}
	for name, c := range cases {
		assert.Equal(t, c.want, engine.IsRetryable(c.err), name)
	}
}

// fakePgError looks like *pgconn.PgError to IsDuplicateKey and IsRetryable.
type fakePgError struct{ code string }

func (e *fakePgError) Error() string { return "ERROR: fake (SQLSTATE " + e.code + ")" }

func (e *fakePgError) SQLState() string { return e.code }

// fakeSQLiteError looks like *sqlite.Error (modernc) to IsDuplicateKey and
// IsRetryable.
type fakeSQLiteError struct{ code int }

func (e *fakeSQLiteError) Error() string { return fmt.Sprintf("fake sqlite error (%d)", e.code) }

func (e *fakeSQLiteError) Code() int { return e.code }

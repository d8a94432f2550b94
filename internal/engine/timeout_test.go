package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/rowlease/rowlease/internal/engine"
)

// TimeoutError.Of names a wait only when its own bound ran out, keeps
// errors.Is(err, context.DeadlineExceeded), and leaves every other error
// as it is.
func TestTimeoutErrorOf(t *testing.T) {
	w := engine.TimeoutError{Wait: "x: the final write", Limit: time.Second, Setting: "x.Config.ReleaseTimeout", Advice: "resend"}
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	live, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	cancelled, cancel3 := context.WithCancel(context.Background())
	cancel3()

	driverErr := fmt.Errorf("exec: %w", context.DeadlineExceeded)
	err := w.Of(expired, driverErr)
	var te *engine.TimeoutError
	assert.ErrorAs(t, err, &te)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, driverErr, "unwraps to the wait's error")
	assert.Equal(t, "x: the final write timed out: the database did not answer within 1s (x.Config.ReleaseTimeout): exec: context deadline exceeded; resend", err.Error())
	assert.Same(t, err, w.Of(expired, err), "named once, by the innermost wait")

	assert.NoError(t, w.Of(expired, nil))
	other := errors.New("boom")
	assert.Same(t, other, w.Of(expired, other), "not a deadline")
	assert.Equal(t, driverErr, w.Of(live, driverErr), "another deadline than the bound's: the caller's own")
	assert.Equal(t, context.Canceled, w.Of(cancelled, context.Canceled))
	lost := &engine.LostError{Key: "k", Op: "release"}
	assert.Same(t, lost, w.Of(expired, lost).(*engine.LostError))
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// TimeoutError is a wait that rowlease bounds itself, not the caller's
// deadline, that ran out: a final write or release bounded by a
// ReleaseTimeout, for instance, which runs even when the caller's context
// has no deadline. It names the wait, its bound and the setting that sets
// it, and says what the caller should do. It matches
// context.DeadlineExceeded (errors.Is) and unwraps to the wait's error.
type TimeoutError struct {
	// Wait is what was waited for ("request: the final mark of the
	// request").
	Wait string
	// Limit is the bound that ran out, and Setting where it is set
	// ("request.Config.ReleaseTimeout").
	Limit   time.Duration
	Setting string
	// Advice says what the caller should do.
	Advice string
	// Err is the wait's own error (a driver's, or the context's).
	Err error
}

// Error names the wait, its bound and the advice; it never contains a
// token.
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s timed out: the database did not answer within %s (%s): %v; %s",
		e.Wait, e.Limit, e.Setting, e.Err, e.Advice)
}

// Is makes errors.Is(err, context.DeadlineExceeded) true.
func (e *TimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// Unwrap returns the wait's error.
func (e *TimeoutError) Unwrap() error { return e.Err }

// Of returns err as a *TimeoutError of the wait e describes, when err is
// bound's deadline: bound, the context the wait ran under, has passed its
// deadline and err matches context.DeadlineExceeded. Otherwise it returns
// err as it is (nil, another failure, or a cancellation).
func (e TimeoutError) Of(bound context.Context, err error) error {
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(bound.Err(), context.DeadlineExceeded) {
		return err
	}
	var te *TimeoutError
	if errors.As(err, &te) {
		return err // named already, by a wait inside this one
	}
	e.Err = err
	return &e
}

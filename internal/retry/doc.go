// Package retry is the one place where rowlease waits: the jittered,
// doubling back-off between runs of an operation that failed transiently,
// the jitter of poll loops, and a sleep that ends with its context.
//
// It decides nothing about which errors are worth another run: that is
// the lease package's error vocabulary (lease.IsTransient,
// lease.IsTransient), which every floor consults before calling Backoff.
//
// Guarantees: every wait returns at once when its context ends, and
// reports so; no wait starts a goroutine or leaves a timer running.
// Delays are randomized (math/rand/v2) so that clients that failed
// together do not retry together.
package retry

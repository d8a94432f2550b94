package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestCloseConcurrentWithOperations: Close while other goroutines acquire,
// renew, inspect and release through the Lease's prepared statements. An
// operation racing Close either uses the statement before it is closed or
// sends its text; none fails with "statement is closed". Each round is a
// new Lease, closed over and over once its workers are under way.
func TestCloseConcurrentWithOperations(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		e := conformance.Setup(t, db, engine.Options{})
		const workers, ops = 4, 15
		for w := range workers {
			e.Insert(t, fmt.Sprintf("w%d", w))
		}
		var errs []error
		var mu sync.Mutex
		for range 10 {
			l, err := engine.New[string](e.Dialect, engine.TableOf(e.Lease), engine.Options{Prepare: engine.PrepareAlways})
			require.NoError(t, err)
			var wg sync.WaitGroup
			started := make(chan struct{})
			var once sync.Once
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := fmt.Sprintf("w%d", w)
					for i := range ops {
						err := func() error {
							g, err := l.Acquire(ctx, db, key, "h", 30*time.Second)
							if err != nil {
								return err
							}
							if g, err = l.Renew(ctx, db, g, 30*time.Second); err != nil {
								return err
							}
							if _, err := l.Inspect(ctx, db, key); err != nil {
								return err
							}
							return l.Release(ctx, db, g)
						}()
						if i == 0 {
							once.Do(func() { close(started) })
						}
						if err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
							return
						}
					}
				}()
			}
			<-started
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			// Close again and again until the workers finish: every call
			// races the operations in flight.
			for closing := true; closing; {
				require.NoError(t, l.Close())
				select {
				case <-done:
					closing = false
				default:
					runtime.Gosched()
				}
			}
			require.NoError(t, l.Close(), "Close after Close is a no-op")
		}
		for _, err := range errs {
			assert.NoError(t, err)
		}
	})
}

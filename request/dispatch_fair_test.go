package request

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/schema"
)

// orphan leaves a request of session whose run stopped after it was
// accepted at once (Reject): processing, its leases given back, its
// client gone. A Started Runner with an Agent resumes it after the grace.
func orphan(t *testing.T, r *Runner, session string) {
	t.Helper()
	ctx, stop := context.WithCancel(bg(t))
	defer stop()
	_, err := r.Handle(ctx, Message{SessionKey: session, ClientRequestID: "orphan", Content: "x"},
		func(ctx context.Context, run *Run) (Answer, error) {
			stop()
			return Answer{}, context.Cause(ctx)
		})
	require.ErrorIs(t, err, context.Canceled)
}

// TestDispatcherResumesAnOrphanBesideBusySessions: sessions busy with a
// long run, each with a message queued behind it, do not keep the
// dispatcher from an orphan in another session, however many they are
// against DispatchBatch: the orphan is resumed while every busy run still
// runs (they end only once it has started). The busy sessions sort before
// the orphan's.
func TestDispatcherResumesAnOrphanBesideBusySessions(t *testing.T) {
	for _, tc := range []struct{ batch, busy int }{{1, 3}, {DefaultDispatchBatch, 12}} {
		t.Run(fmt.Sprintf("batch %d, %d busy", tc.batch, tc.busy), func(t *testing.T) {
			each(t, func(t *testing.T, db *sqlx.DB) {
				// A TTL well above a stall of a loaded machine: a busy run
				// whose lease expired would be resumed, as it should be.
				const ttl = 5 * time.Second
				e := newEnv(t, db, ttl)
				ctx := bg(t)
				rc := &recorder{}
				a := e.newRunner(t, func(c *Config) { c.Agent = rc.agent })

				release := make(chan struct{})
				var busy sync.WaitGroup
				defer busy.Wait()
				var closeOnce sync.Once
				defer closeOnce.Do(func() { close(release) })
				for i := range tc.busy {
					session := fmt.Sprintf("busy-%02d", i)
					started := make(chan struct{})
					busy.Add(1)
					go func() {
						defer busy.Done()
						_, err := a.Handle(ctx, Message{SessionKey: session, ClientRequestID: "long", Content: "x"},
							func(ctx context.Context, run *Run) (Answer, error) {
								close(started)
								select {
								case <-release:
								case <-ctx.Done():
									return Answer{}, context.Cause(ctx)
								}
								return Answer{Reply: "done"}, nil
							})
						assert.NoError(t, err)
					}()
					<-started
					out, err := a.Handle(ctx, Message{SessionKey: session, ClientRequestID: "next", Content: "y", OnBusy: Queue}, nil)
					require.NoError(t, err)
					require.True(t, out.Queued)
				}
				orphan(t, a, "orphan-z")

				resumed := make(chan struct{})
				b := e.newRunner(t, func(c *Config) {
					c.Queue.DispatchInterval = 10 * time.Millisecond
					c.Queue.DispatchBatch = tc.batch
					c.Resume.Grace = time.Millisecond
					c.Agent = func(ctx context.Context, run *Run) (Answer, error) {
						if run.SessionKey() == "orphan-z" {
							close(resumed)
						}
						return Answer{Reply: "ok"}, nil
					}
				})
				require.NoError(t, b.Start(ctx))
				bound := time.NewTimer(15 * ttl)
				defer bound.Stop()
				select {
				case <-resumed:
				case <-bound.C:
					t.Errorf("the orphan was not resumed within 15 TTLs beside %d busy sessions", tc.busy)
				}
				closeOnce.Do(func() { close(release) })
				busy.Wait()

				st, err := b.Wait(ctx, "orphan-z", "orphan")
				require.NoError(t, err)
				assert.Equal(t, StateSucceeded, st.State)
				for i := range tc.busy {
					st, err := a.Wait(ctx, fmt.Sprintf("busy-%02d", i), "next")
					require.NoError(t, err)
					assert.Equal(t, StateSucceeded, st.State)
				}
			})
		})
	}
}

// TestDispatcherVisitsEverySession: sessions the dispatcher can never
// start (a dead run and a queued message left behind in a session whose
// lock row was deleted) do not hide the others from it: one poll after another, it
// visits every session with work, DispatchBatch at a time, so an orphan
// behind any number of them is resumed within ceil(sessions/DispatchBatch)
// polls.
func TestDispatcherVisitsEverySession(t *testing.T) {
	for _, tc := range []struct{ batch, stuck int }{{1, 3}, {2, 5}, {DefaultDispatchBatch, 20}} {
		t.Run(fmt.Sprintf("batch %d, %d stuck", tc.batch, tc.stuck), func(t *testing.T) {
			each(t, func(t *testing.T, db *sqlx.DB) {
				e := newEnv(t, db, 2*time.Second)
				ctx := bg(t)
				for i := range tc.stuck {
					// Of a session whose lock row was deleted: a queued
					// message, and a dead run due for a long time, whose
					// claims fail every time (*session.NotFoundError).
					_, err := db.ExecContext(ctx, e.r.sql.insert, uuid.NewString(), fmt.Sprintf("gone-%02d", i), "q", "f", "y", 1, Queue.String(), nil, nil)
					require.NoError(t, err)
					_, err = db.ExecContext(ctx, e.d.Rebind("INSERT INTO rowlease_request (id, session_key, client_request_id, "+
						"fingerprint, status, generation, content, updated_at) VALUES (?, ?, 'dead', 'f', '"+schema.StoredProcessing+
						"', 1, 'y', "+minusMicros(e.d, engine.Now(e.d), "3600000000")+")"), fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
						fmt.Sprintf("gone-%02d", i))
					require.NoError(t, err)
				}
				orphan(t, e.r, "orphan-z")

				resumed := make(chan struct{})
				b := e.newRunner(t, func(c *Config) {
					c.Queue.DispatchBatch = tc.batch
					c.Resume.Grace = time.Millisecond
					c.Agent = func(ctx context.Context, run *Run) (Answer, error) {
						close(resumed)
						return Answer{Reply: "ok"}, nil
					}
				})
				_, due := b.resumeConds("")
				waitFor(t, func() bool {
					var n int
					require.NoError(t, db.GetContext(ctx, &n, "SELECT COUNT(*) FROM rowlease_request WHERE client_request_id = 'orphan' AND "+due))
					return n == 1
				})
				polls := (tc.stuck + 1 + tc.batch - 1) / tc.batch
				started := 0
				for i := 0; i < polls && started == 0; i++ {
					started = b.dispatchOnce(ctx)
				}
				require.Equal(t, 1, started, "the orphan was not resumed within %d polls", polls)
				<-resumed
				st, err := b.Wait(ctx, "orphan-z", "orphan")
				require.NoError(t, err)
				assert.Equal(t, StateSucceeded, st.State)
			})
		})
	}
}

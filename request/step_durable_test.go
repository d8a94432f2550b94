package request

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestStepDurableBesideFailedTx: a step recorded while another fenced
// transaction of the run is open (an InTx on another goroutine) and that
// transaction then fails. Step's write must not ride in that transaction:
// its rollback would undo the step after Step returned, and the resend
// after a crash would ask the model again and book a second time. The
// InTx's fn fails only once the step's statement is on its way, so on
// SQLite, where that transaction holds the write lock, a step routed into
// it would be undone every time.
func TestStepDurableBesideFailedTx(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			c := &countdb.Counter{}
			db := testdb.OpenWith(t, d, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
			e := newEnvTB(t, db, 500*time.Millisecond)
			ctx := bg(t)
			msg := Message{SessionKey: "s", ClientRequestID: "c", Content: "book lunch"}
			var modelCalls atomic.Int64
			// A model that words every answer differently: asked again, it
			// books another amount.
			decide := func(context.Context) (json.RawMessage, error) {
				n := modelCalls.Add(1)
				return json.RawMessage(fmt.Sprintf(`{"amount":%d}`, 34+n)), nil
			}
			book := func(ctx context.Context, run *Run) (Answer, error) {
				raw, err := run.Step(ctx, "decide", decide)
				if err != nil {
					return Answer{}, err
				}
				if _, err := run.CallTool(ctx, "write", raw); err != nil {
					return Answer{}, err
				}
				return Answer{Reply: "booked"}, nil
			}

			stepSent := make(chan struct{})
			var once sync.Once
			c.BeforeSend(func(q string) {
				if strings.Contains(q, "rowlease_step") {
					once.Do(func() { close(stepSent) })
				}
			})
			defer c.BeforeSend(nil)
			errFnFailed := errors.New("storing the conversation failed")
			_, err := e.r.Handle(ctx, msg, func(ctx context.Context, run *Run) (Answer, error) {
				txOpen := make(chan struct{})
				txErr := make(chan error, 1)
				go func() {
					txErr <- run.InTx(ctx, func(tx *sql.Tx) error {
						close(txOpen)
						<-stepSent
						return errFnFailed
					})
				}()
				<-txOpen
				raw, err := run.Step(ctx, "decide", decide)
				if err != nil {
					return Answer{}, err
				}
				if err := <-txErr; !errors.Is(err, errFnFailed) {
					return Answer{}, err
				}
				if _, err := run.CallTool(ctx, "write", raw); err != nil {
					return Answer{}, err
				}
				run.abandon() // the process dies before its reply is stored
				return Answer{}, errors.New("crashed")
			})
			require.ErrorIs(t, err, context.Canceled)
			c.BeforeSend(nil)
			require.Equal(t, 1, e.ledgerRows(t))
			e.waitFree(t, "s", "c")

			out, err := e.r.Handle(ctx, msg, book)
			require.NoError(t, err)
			assert.True(t, out.Resumed)
			assert.Equal(t, int64(1), modelCalls.Load(), "the resend replays the recorded decision")
			assert.Equal(t, 1, e.ledgerRows(t), "booked once")
		})
	}
}

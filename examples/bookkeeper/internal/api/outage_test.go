package api_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/internal/testkit/outage"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// gatedModel is the rule model, except that its first call waits until
// the test opens the gate.
type gatedModel struct {
	llm.Model
	entered chan struct{} // closed when the first call arrives
	gate    chan struct{} // closed by the test
	once    sync.Once
}

func newGatedModel() *gatedModel {
	return &gatedModel{Model: llm.NewRuleModel(llm.RuleOptions{}), entered: make(chan struct{}), gate: make(chan struct{})}
}

func (m *gatedModel) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	m.once.Do(func() { close(m.entered) })
	select {
	case <-m.gate:
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
	return m.Model.Complete(ctx, req)
}

func assertUnavailable(t *testing.T, what string, r reply) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s: %s", what, r.raw)
	assert.Equal(t, api.ProblemContentType, r.ctype, what)
	assert.Equal(t, problemType(api.ProblemUnavailable), r.problem.Type, what)
	retryAfterOK(t, r)
	assert.NotContains(t, strings.ToLower(r.problem.Detail), "refused", "%s: the driver's error is not shown", what)
}

// While the database cannot be reached, a message in flight, a new
// message, a new session and the health check are 503 problem+json with
// Retry-After, not 500; once it is back, the in-flight message resent
// with the same id is answered, with one transaction.
func TestDatabaseOutageIs503(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			o := outage.Open(t, d)
			model := newGatedModel()
			e := newEnv(t, o.DB, withModel(model), withTTL(2*time.Second))
			sid := e.newSession()

			inFlight := make(chan reply, 1)
			go func() { inFlight <- e.send(sid, "lunch 42", "in-flight") }()
			select {
			case <-model.entered: // the user message is stored, the model is thinking
			case <-time.After(20 * time.Second):
				t.Fatal("the run never reached the model")
			}
			o.Cut()
			close(model.gate)
			assertUnavailable(t, "the message in flight", <-inFlight)

			assertUnavailable(t, "a new message", e.send(sid, "taxi 18", "new"))
			assertUnavailable(t, "a new session", e.do(http.MethodPost, "/api/sessions", nil))
			assertUnavailable(t, "the health check", e.do(http.MethodGet, "/healthz", nil))

			o.Restore()
			r := e.sendUntilDone(sid, "lunch 42", "in-flight")
			require.Equal(t, http.StatusOK, r.status, "resent with the same id: %s", r.raw)
			require.NotNil(t, r.msg.TransactionID)
			assert.Equal(t, 1, e.ledgerCount())
			assert.Len(t, e.messages(sid), 2, "the user message once, the reply once")
		})
	}
}

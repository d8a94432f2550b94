package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
)

// policyScene is what the demo's last scene saw: the three busy-session
// policies ("on_busy") and a duplicate that waits for the answer
// ("Prefer: wait"), each in a session of its own, played on a second
// server on the same database (another process, as far as the database
// can tell) whose heartbeat is short enough for an interrupt to land
// within a model round.
type policyScene struct {
	rows         []sceneRow
	checks       []check
	notes        []string
	transactions int // ledger rows written by the scene
}

type sceneRow struct {
	label string
	n     int
}

// hresp is one HTTP response of the scene.
type hresp struct {
	status int
	header http.Header
	body   []byte
	ptype  string // the problem type's last segment, for a problem
}

func (h hresp) String() string { return fmt.Sprintf("%d %s", h.status, h.ptype) }

func call(ctx context.Context, c *http.Client, method, u string, body []byte, header ...string) (hresp, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return hresp{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return hresp{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return hresp{}, err
	}
	h := hresp{status: resp.StatusCode, header: resp.Header, body: data}
	if resp.Header.Get("Content-Type") == api.ProblemContentType {
		var p api.Problem
		if json.Unmarshal(data, &p) == nil {
			h.ptype = strings.TrimPrefix(p.Type, api.ProblemBase)
		}
	}
	return h, nil
}

// scene plays on one server.
type scene struct {
	ctx    context.Context
	c      *http.Client
	base   string
	errors []error
}

func (s *scene) post(session, id, content, onBusy string, header ...string) hresp {
	body, _ := json.Marshal(api.MessageRequest{Content: content, ClientRequestID: id, OnBusy: onBusy})
	h, err := call(s.ctx, s.c, http.MethodPost, s.base+"/api/sessions/"+session+"/messages", body, header...)
	if err != nil {
		s.errors = append(s.errors, err)
	}
	return h
}

func (s *scene) status(session, id string, header ...string) (hresp, api.MessageStatus) {
	h, err := call(s.ctx, s.c, http.MethodGet, s.base+"/api/sessions/"+session+"/messages/"+url.PathEscape(id), nil, header...)
	if err != nil {
		s.errors = append(s.errors, err)
	}
	var st api.MessageStatus
	if h.status == http.StatusOK {
		_ = json.Unmarshal(h.body, &st)
	}
	return h, st
}

// busy sends a message and returns once the server runs it (its status
// is processing), or has answered it already; the answer arrives on the
// channel.
func (s *scene) busy(session, id, content string) (<-chan hresp, bool) {
	done := make(chan hresp, 1)
	go func() { done <- s.post(session, id, content, "") }()
	for range 2000 {
		if _, st := s.status(session, id); st.Status == "processing" {
			return done, true
		}
		select {
		case h := <-done:
			done <- h
			return done, false
		case <-time.After(2 * time.Millisecond):
		}
	}
	return done, false
}

func reply(h hresp) api.MessageResponse {
	var m api.MessageResponse
	_ = json.Unmarshal(h.body, &m)
	return m
}

// playPolicies plays the scene on a second server of sc on st.
func playPolicies(ctx context.Context, c *http.Client, st *store.Store, sc service.Config) (*policyScene, error) {
	latency := max(sc.LLMLatency, 0)
	if sc.LLMLatency == 0 {
		latency = service.DefaultLLMLatency
	}
	ttl := sc.LeaseTTL
	if ttl == 0 {
		ttl = service.DefaultLeaseTTL
	}
	sc.Heartbeat = min(max(latency/2, 5*time.Millisecond), ttl/3)
	svc, err := service.New(ctx, st, sc)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- svc.Serve(sctx, ln) }()
	defer func() {
		stop()
		<-served
	}()
	s := &scene{ctx: ctx, c: c, base: "http://" + ln.Addr().String()}
	ps := &policyScene{}
	row := func(label string, n int) { ps.rows = append(ps.rows, sceneRow{label, n}) }
	newSession := func() string {
		id, err := createSession(ctx, c, s.base)
		if err != nil {
			s.errors = append(s.errors, err)
		}
		return id
	}

	// queue: three messages behind a running one, then a duplicate of the
	// last that waits for its answer.
	qs := newSession()
	first, wasBusy := s.busy(qs, "p-q0", "lunch 42.5")
	queued := []struct{ id, content string }{{"p-q1", "coffee 4.5"}, {"p-q2", "parking 15"}, {"p-q3", "book 39.9"}}
	var accepted, ranAtOnce int
	queueOK := true
	for _, q := range queued {
		h := s.post(qs, q.id, q.content, "queue")
		switch {
		case h.status == http.StatusAccepted && h.header.Get("Location") == "/api/sessions/"+qs+"/messages/"+q.id:
			accepted++
		case h.status == http.StatusOK:
			ranAtOnce++ // the session was free already
		default:
			queueOK = false
		}
	}
	dup := s.post(qs, "p-q3", "book 39.9", "", "Prefer", "wait=30")
	dupMsg := reply(dup)
	queueOK = queueOK && (<-first).status == http.StatusOK
	var txs []string
	for _, q := range queued {
		_, st := s.status(qs, q.id, "Prefer", "wait=30")
		if st.Status != "succeeded" || st.TransactionID == nil {
			queueOK = false
			continue
		}
		txs = append(txs, *st.TransactionID)
	}
	_, last := s.status(qs, "p-q3")
	inOrder, written := ledgerOrder(ctx, st, qs, txs)
	ps.transactions += written
	row("202 queued (on_busy: queue)", accepted)
	if ranAtOnce > 0 || !wasBusy {
		ps.notes = append(ps.notes, fmt.Sprintf("queue: %d message(s) found the session free and ran at once", ranAtOnce))
	}
	ps.checks = append(ps.checks, check{queueOK && inOrder && len(txs) == len(queued) && written == len(queued)+1,
		fmt.Sprintf("on_busy queue: %d x 202 with Location; each ran once, in arrival order (%d ledger rows)", accepted, written)})
	waitedOK := dup.status == http.StatusOK && dupMsg.Replayed && dupMsg.TransactionID != nil &&
		last.TransactionID != nil && *dupMsg.TransactionID == *last.TransactionID
	applied := dup.header.Get("Preference-Applied") == "wait=30"
	if applied {
		row("200 after Prefer: wait (the stored reply)", 1)
	}
	ps.checks = append(ps.checks, check{waitedOK,
		fmt.Sprintf("a duplicate with Prefer: wait got 200, replayed, the same transaction_id (waited: %v)", applied)})

	// interrupt: a message stops the running one and runs.
	is := newSession()
	victim, wasBusy := s.busy(is, "p-i0", "dinner with friends 120")
	hi := s.post(is, "p-i1", "groceries 156.3", "interrupt")
	hv := <-victim
	var interrupted int
	interruptOK := hi.status == http.StatusOK
	switch {
	case hv.status == http.StatusConflict && hv.ptype == api.ProblemInterrupted:
		again := s.post(is, "p-i0", "dinner with friends 120", "")
		_, vst := s.status(is, "p-i0")
		interrupted = 1
		if again.status == http.StatusConflict && again.ptype == api.ProblemInterrupted {
			interrupted++
		}
		interruptOK = interruptOK && interrupted == 2 && vst.Status == "interrupted"
	case hv.status == http.StatusOK:
		ps.notes = append(ps.notes, "interrupt: the running message had finished before the interrupt reached it")
	default:
		interruptOK = false
	}
	if !wasBusy {
		ps.notes = append(ps.notes, "interrupt: the first message was answered before the second arrived")
	}
	_, n := ledgerOrder(ctx, st, is, nil)
	ps.transactions += n
	row("200 interrupting message (on_busy: interrupt)", btoi(hi.status == http.StatusOK))
	row("409 interrupted (its own call, then a resend)", interrupted)
	ps.checks = append(ps.checks, check{interruptOK,
		fmt.Sprintf("on_busy interrupt: the new message got 200; the one it stopped got 409 interrupted, on every resend too (%v)", hv)})

	// reject: the default. The running message may be answered between
	// the status read that saw it processing and the second message's
	// arrival (a loaded machine, a short model latency): then the second
	// one finds the session free and runs, and the scene is played again
	// on a new session, a few times, until the second one meets a busy
	// session.
	var rejected int
	rejectOK := false
	for attempt := 1; attempt <= 5; attempt++ {
		rs := newSession()
		running, _ := s.busy(rs, fmt.Sprintf("p-r%d-0", attempt), "coffee 4.5")
		hr := s.post(rs, fmt.Sprintf("p-r%d-1", attempt), "parking 15", "reject")
		first := <-running
		_, n = ledgerOrder(ctx, st, rs, nil)
		ps.transactions += n
		if first.status == http.StatusOK && hr.status == http.StatusOK {
			ps.notes = append(ps.notes, "reject: the first message was answered before the second arrived; played again")
			continue
		}
		rejected = btoi(hr.status == http.StatusConflict)
		rejectOK = first.status == http.StatusOK && hr.status == http.StatusConflict &&
			hr.ptype == api.ProblemSessionBusy && hr.header.Get("Retry-After") != ""
		break
	}
	row("409 session-busy (on_busy: reject)", rejected)
	ps.checks = append(ps.checks, check{rejectOK, "on_busy reject: 409 session-busy with Retry-After, as before"})

	if len(s.errors) > 0 {
		return ps, fmt.Errorf("policies scene: %w", s.errors[0])
	}
	return ps, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ledgerOrder reports whether the session's ledger holds the given
// transactions in this order of writing (oldest first), and how many
// transactions the ledger has.
func ledgerOrder(ctx context.Context, st *store.Store, session string, want []string) (bool, int) {
	ts, err := st.Transactions(ctx, st.DB, store.TransactionFilter{LedgerID: mustLedger(ctx, st, session), Limit: 100})
	if err != nil {
		return false, 0
	}
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].CreatedAt.Before(ts[j].CreatedAt) })
	var got []string
	for _, t := range ts {
		if slices.Contains(want, t.ID) {
			got = append(got, t.ID)
		}
	}
	return slices.Equal(got, want), len(ts)
}

package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/agent"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
)

// The approval scene's messages: an expense above the threshold (rent,
// approved) and another one (a laptop, denied), worded for the default
// threshold; approvalMessages words them for another one.
const (
	approvalRent   = "paid rent 4,800.00"
	approvalLaptop = "new laptop 1,299.00"
)

// approvalMessages returns the scene's two messages: above threshold
// (cents), both.
func approvalMessages(threshold int64) (rent, laptop string) {
	rent, laptop = approvalRent, approvalLaptop
	if threshold >= 129_900 {
		laptop = "new laptop " + agent.GroupedCents(threshold+50_000)
	}
	if threshold >= 480_000 {
		rent = "paid rent " + agent.GroupedCents(threshold+100_000)
	}
	return rent, laptop
}

// approvalScene plays, on a server of sc (with the threshold of approval
// the demo was given) on st, an expense that waits for a person: the
// laptop sends the rent and is answered 202 waiting with the question;
// meanwhile the session is free (the tablet's coffee is answered at once);
// the phone reads the message's status, sees the question and approves
// it; the laptop approves too (the same answer from another device: the
// same outcome, nothing booked twice) and then tries to deny it (409).
// Then the phone's laptop purchase, which the laptop denies: nothing
// booked. It prints what happens and returns the checks; nil when the
// threshold is off.
func approvalScene(ctx context.Context, w io.Writer, st *store.Store, sc service.Config) ([]check, error) {
	threshold := sc.ApproveAbove
	if threshold == 0 {
		threshold = agent.DefaultApproveAbove
	}
	if threshold < 0 {
		fmt.Fprintf(w, "\nscene: an approval — skipped (-approve-above 0: nothing waits for a person)\n")
		return nil, nil
	}
	svc, err := service.New(ctx, st, sc)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	serveCtx, stopServe := context.WithCancel(ctx)
	serveErr := make(chan error, 1)
	go func() { serveErr <- svc.Serve(serveCtx, ln) }()
	defer func() { stopServe(); <-serveErr }()
	client := &http.Client{Timeout: time.Minute}
	defer client.CloseIdleConnections()
	s := &scene{ctx: ctx, c: client, base: "http://" + ln.Addr().String()}

	fmt.Fprintf(w, "\nscene: an approval — an expense above %s waits for a person's answer (-approve-above)\n", store.FormatCents(threshold))
	sid, err := createSession(ctx, client, s.base)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	// at is when the action being told was started.
	var at time.Duration
	now := func() { at = time.Since(start) }
	say := func(format string, args ...any) {
		fmt.Fprintf(w, "  %5.2fs  %s\n", at.Seconds(), fmt.Sprintf(format, args...))
	}
	answer := func(id, name string, approved bool) hresp {
		body, _ := json.Marshal(agent.Approval{Approved: approved})
		h, err := call(ctx, client, http.MethodPost, s.base+"/api/sessions/"+sid+"/messages/"+url.PathEscape(id)+"/answers/"+url.PathEscape(name), body)
		if err != nil {
			s.errors = append(s.errors, err)
		}
		return h
	}
	question := func(h hresp) (api.WaitingResponse, agent.ApprovalQuestion) {
		var wr api.WaitingResponse
		var q agent.ApprovalQuestion
		if h.status == http.StatusAccepted && json.Unmarshal(h.body, &wr) == nil && wr.Waiting != nil {
			_ = json.Unmarshal(wr.Waiting.Question, &q)
		}
		return wr, q
	}
	said := func(h hresp) string {
		switch {
		case h.status == http.StatusOK:
			return fmt.Sprintf("%d %q", h.status, reply(h).Reply)
		case h.status == http.StatusAccepted:
			wr, q := question(h)
			if wr.Waiting != nil {
				return fmt.Sprintf("%d waiting, %s %q", h.status, wr.Waiting.Name, q.Text)
			}
		}
		return h.String()
	}
	rent, laptop := approvalMessages(threshold)
	bookings := func(id string) int {
		per, err := st.TransactionsPerClientRequest(ctx, st.DB)
		if err != nil {
			s.errors = append(s.errors, err)
		}
		for _, p := range per {
			if p.SessionKey == sid && p.ClientRequestID == id {
				return p.Transactions
			}
		}
		return 0
	}

	// The rent: asked, seen from the other device, approved there.
	now()
	asked := s.post(sid, "ap-1", rent, "")
	say("laptop  sends %q (ap-1): %s", rent, said(asked))
	wr, q := question(asked)
	name := agent.ApprovalName(1)
	if wr.Waiting != nil {
		name = wr.Waiting.Name
	}
	before := bookings("ap-1")
	now()
	coffee := s.post(sid, "ap-0", "coffee 4.5", "")
	say("tablet  sends %q (ap-0) meanwhile: %s — the question holds no lock", "coffee 4.5", said(coffee))
	now()
	_, seen := s.status(sid, "ap-1")
	var seenText string
	if seen.Waiting != nil {
		var sq agent.ApprovalQuestion
		_ = json.Unmarshal(seen.Waiting.Question, &sq)
		seenText = sq.Text
		say("phone   reads its status: %s, %s %q", seen.Status, seen.Waiting.Name, sq.Text)
	} else {
		say("phone   reads its status: %s", seen.Status)
	}
	now()
	yes := answer("ap-1", name, true)
	say("phone   approves (%s): %s", name, said(yes))
	now()
	again := answer("ap-1", name, true)
	say("laptop  approves too (the same answer): %d, replayed=%v", again.status, reply(again).Replayed)
	now()
	no := answer("ap-1", name, false)
	say("laptop  denies it afterwards: %s", no)
	booked := bookings("ap-1")

	yesMsg, againMsg := reply(yes), reply(again)
	waitedOK := asked.status == http.StatusAccepted && wr.Waiting != nil && q.Amount != "" && before == 0 &&
		seen.Status == "waiting" && seenText == q.Text && coffee.status == http.StatusOK
	approvedOK := yes.status == http.StatusOK && again.status == http.StatusOK && yesMsg.TransactionID != nil &&
		againMsg.TransactionID != nil && *yesMsg.TransactionID == *againMsg.TransactionID && yesMsg.Reply == againMsg.Reply &&
		no.status == http.StatusConflict && booked == 1

	// The laptop purchase: asked on the phone, denied on the laptop.
	now()
	asked2 := s.post(sid, "ap-2", laptop, "")
	say("phone   sends %q (ap-2): %s", laptop, said(asked2))
	wr2, _ := question(asked2)
	name2 := agent.ApprovalName(1)
	if wr2.Waiting != nil {
		name2 = wr2.Waiting.Name
	}
	now()
	denied := answer("ap-2", name2, false)
	say("laptop  denies (%s): %s", name2, said(denied))
	deniedMsg := reply(denied)
	deniedOK := asked2.status == http.StatusAccepted && denied.status == http.StatusOK && deniedMsg.TransactionID == nil &&
		bookings("ap-2") == 0

	if len(s.errors) > 0 {
		return nil, fmt.Errorf("approval scene: %w", s.errors[0])
	}
	fmt.Fprintln(w)
	return []check{
		{waitedOK, fmt.Sprintf("the expense above %s waited: 202 with its question, shown to the other device by its status; nothing booked before the answer, and the session free meanwhile",
			store.FormatCents(threshold))},
		{approvedOK, fmt.Sprintf("approved: booked once (%d ledger row), the same reply and transaction_id for both devices' answers; another answer afterwards: %d",
			booked, no.status)},
		{deniedOK, "denied: nothing booked, and the reply says so"},
	}, nil
}

package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/agent"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/service"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/webhook"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// The slow-tool scene.
const (
	// DefaultSlowTool is how long the scene's webhook receiver works
	// before it answers.
	DefaultSlowTool = 3 * time.Second
	// slowTTL is the scene's lease TTL: shorter than the tool, so the tool
	// lives on renewals.
	slowTTL = time.Second
	// slowMessage is what the phone, then the laptop, sends.
	slowMessage = "交了这个月的房租 3500"
	slowID      = "slow-1"
)

// receiverServer serves a webhook receiver on 127.0.0.1.
type receiverServer struct {
	*webhook.Receiver
	url  string
	hs   *http.Server
	done chan error
}

func startReceiver(cfg webhook.ReceiverConfig) (*receiverServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiverServer{Receiver: webhook.NewReceiver(cfg), url: "http://" + ln.Addr().String() + "/hooks/booked", done: make(chan error, 1)}
	r.hs = &http.Server{Handler: r.Receiver, ReadHeaderTimeout: 10 * time.Second}
	go func() { r.done <- r.hs.Serve(ln) }()
	return r, nil
}

// stop stops the server and waits for it.
func (r *receiverServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r.hs.Shutdown(ctx) != nil {
		_ = r.hs.Close()
	}
	<-r.done
}

// slowRun is what the slow-tool scene saw.
type slowRun struct {
	took                      time.Duration // the tool's post, as the receiver held it
	conflicts                 int           // 409s the laptop got
	conflictTypes             map[string]int
	phone, laptop             sceneAnswer
	renewals                  int     // times the tool's lease was seen renewed while it ran
	toolGens, reqGens         []int64 // generations seen while it ran
	toolHolders               int     // distinct holders of the tool lease seen
	effects                   int     // effects the slow receiver performed
	notifyStatus, notifyError string
}

type sceneAnswer struct {
	status   int
	replayed bool
	txID     string
	reply    string
}

// slowScene plays one message whose tool is slow (a webhook receiver that
// works for slow before answering) on its own service with a lease TTL
// shorter than that, while a second device sends the same message; it
// prints what happened and returns its checks.
func slowScene(ctx context.Context, w io.Writer, st *store.Store, sc service.Config, slow time.Duration) ([]check, error) {
	rcv, err := startReceiver(webhook.ReceiverConfig{Delay: slow, Logger: sc.Logger})
	if err != nil {
		return nil, err
	}
	defer rcv.stop()
	sc.LeaseTTL, sc.Heartbeat = slowTTL, 0
	sc.WebhookURL = rcv.url
	// A second service on the same database, with the short TTL. Not
	// closed: it shares the demo's store.
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
	base := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: time.Minute}
	defer client.CloseIdleConnections()

	fmt.Fprintf(w, "\nscene: a slow tool — the webhook receiver takes %s to answer; lease TTL %s, renewed every %s\n",
		slow, slowTTL, (slowTTL / 3).Round(time.Millisecond))
	sid, err := createSession(ctx, client, base)
	if err != nil {
		return nil, err
	}
	sn := &slowRun{conflictTypes: map[string]int{}}
	start := time.Now()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "  %5.2fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	body, _ := json.Marshal(api.MessageRequest{Content: slowMessage, ClientRequestID: slowID})
	url := base + "/api/sessions/" + sid + "/messages"

	say("phone   sends %q (%s)", slowMessage, slowID)
	phoneDone := make(chan error, 1)
	go func() {
		status, _, _, out, err := post(ctx, client, url, body)
		sn.phone = sceneAnswer{status: status, replayed: out.Replayed, reply: out.Reply}
		if out.TransactionID != nil {
			sn.phone.txID = *out.TransactionID
		}
		if err == nil {
			say("phone   %d %q", status, out.Reply)
		}
		phoneDone <- err
	}()

	// Wait until the phone's run is in the tool: the receiver holds its post.
	if err := pollUntil(ctx, 30*time.Second, func() bool { return rcv.Busy() > 0 }); err != nil {
		return nil, errors.Join(fmt.Errorf("scene: the post never reached the receiver: %w", err), <-phoneDone)
	}
	inTool := time.Now()
	say("phone's run posts to the webhook; the receiver holds it")

	// Watch the tool's lease and the request's lease while the tool runs.
	watchStop := make(chan struct{})
	watched := make(chan error, 1)
	go func() { watched <- watchLeases(ctx, st, sid, sn, watchStop) }()
	// finish joins the phone and the watcher; the phone's error first.
	finish := func() error {
		perr := <-phoneDone
		close(watchStop)
		werr := <-watched
		if perr != nil {
			return fmt.Errorf("scene: phone: %w", perr)
		}
		return werr
	}

	// The laptop: the same message, the same id; after each 409, again
	// after Retry-After.
	for attempt := 1; ; attempt++ {
		status, retryAfter, ptype, out, err := post(ctx, client, url, body)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("scene: laptop: %w", err), finish())
		}
		if status == http.StatusConflict && attempt < 30 {
			sn.conflicts++
			sn.conflictTypes[ptype]++
			say("laptop  sends the same (%s): 409 %s, Retry-After %d", slowID, ptype, retryAfter)
			select {
			case <-ctx.Done():
				return nil, errors.Join(ctx.Err(), finish())
			case <-time.After(time.Duration(max(retryAfter, 1)) * time.Second):
			}
			continue
		}
		sn.laptop = sceneAnswer{status: status, replayed: out.Replayed, reply: out.Reply}
		if out.TransactionID != nil {
			sn.laptop.txID = *out.TransactionID
		}
		say("laptop  %d, replayed=%v", status, out.Replayed)
		break
	}
	if err := finish(); err != nil {
		return nil, err
	}
	if effects := rcv.Effects(); len(effects) > 0 {
		sn.took = effects[0].At.Sub(inTool.UTC()).Round(100 * time.Millisecond)
	}
	sn.effects = len(rcv.Effects())
	if err := st.DB.QueryRowContext(ctx, st.Dialect.Rebind("SELECT status, COALESCE(error, '') FROM "+schema.ToolExecutionTable+
		" WHERE session_key = ? AND tool_name = ?"), sid, agent.ToolNotify).Scan(&sn.notifyStatus, &sn.notifyError); err != nil {
		return nil, fmt.Errorf("scene: the notification's row: %w", err)
	}
	return sn.report(w, slow), nil
}

// watchLeases samples the tool's and the request's leases every 50ms
// until stop: it counts the tool lease's renewals (its remaining time went
// back up) and the generations it saw.
func watchLeases(ctx context.Context, st *store.Store, sid string, sn *slowRun, stop <-chan struct{}) error {
	tools, err := toolexec.New(toolexec.Config{Dialect: st.Dialect})
	if err != nil {
		return err
	}
	reqs, err := lease.New[string](st.Dialect, engine.MustTable(schema.RequestTable, request.Columns()), lease.Options{})
	if err != nil {
		return err
	}
	var execID, reqID string
	if err := st.DB.QueryRowContext(ctx, st.Dialect.Rebind("SELECT id, request_id FROM "+schema.ToolExecutionTable+
		" WHERE session_key = ? AND tool_name = ?"), sid, agent.ToolNotify).Scan(&execID, &reqID); err != nil {
		return fmt.Errorf("scene: the notification's row: %w", err)
	}
	seenGen := func(list *[]int64, g int64) {
		if len(*list) == 0 || (*list)[len(*list)-1] != g {
			*list = append(*list, g)
		}
	}
	holders := map[string]bool{}
	var last time.Duration
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ts, err := tools.Lease().Inspect(ctx, st.DB, execID)
		if err != nil {
			return err
		}
		rs, err := reqs.Inspect(ctx, st.DB, reqID)
		if err != nil {
			return err
		}
		if ts.Held {
			if last > 0 && ts.Remaining > last+100*time.Millisecond {
				sn.renewals++
			}
			last = ts.Remaining
			holders[ts.Holder] = true
			seenGen(&sn.toolGens, ts.Generation)
		}
		if rs.Held {
			seenGen(&sn.reqGens, rs.Generation)
		}
		select {
		case <-stop:
			sn.toolHolders = len(holders)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// report prints the scene's outcome and returns its checks.
func (sn *slowRun) report(w io.Writer, slow time.Duration) []check {
	fmt.Fprintf(w, "  the receiver held the post %s; the laptop's reply has the phone's transaction_id: %v\n",
		sn.took, sn.laptop.txID != "" && sn.laptop.txID == sn.phone.txID)
	fmt.Fprintf(w, "  while the tool ran: its lease renewed %d times, generation %s, holders seen %d; the request's lease generation %s\n",
		sn.renewals, gens(sn.toolGens), sn.toolHolders, gens(sn.reqGens))
	fmt.Fprintln(w)
	inFlight := sn.conflictTypes[api.ProblemRequestInFlight]
	return []check{
		{sn.conflicts >= 1 && inFlight == sn.conflicts && sn.laptop.status == http.StatusOK && sn.laptop.replayed &&
			sn.laptop.txID != "" && sn.laptop.txID == sn.phone.txID,
			fmt.Sprintf("the duplicate from the second device got 409 request-in-flight while the tool ran (%d times), then the stored reply with the same transaction_id", inFlight)},
		{sn.phone.status == http.StatusOK && !sn.phone.replayed && sn.effects == 1 && sn.notifyStatus == schema.StoredSucceeded &&
			strings.Contains(sn.phone.reply, "r-000001"),
			fmt.Sprintf("the slow tool completed: one effect at the receiver, the notification recorded (%s), its receipt in the reply", sn.notifyStatus)},
		{len(sn.toolGens) == 1 && len(sn.reqGens) == 1 && sn.toolHolders == 1 && sn.renewals >= int(slow/slowTTL),
			fmt.Sprintf("it outlived its %s TTL on renewals (%d), under one lease: no takeover, the generations never changed", slowTTL, sn.renewals)},
	}
}

func gens(g []int64) string {
	if len(g) == 0 {
		return "(not seen)"
	}
	s := make([]string, len(g))
	for i, v := range g {
		s[i] = fmt.Sprint(v)
	}
	if len(s) == 1 {
		return s[0] + " throughout"
	}
	return strings.Join(s, " → ")
}

// pollUntil polls cond every 5ms until it holds, ctx is done or within
// has passed.
func pollUntil(ctx context.Context, within time.Duration, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

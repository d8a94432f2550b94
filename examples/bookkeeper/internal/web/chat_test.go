package web_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

var updateScreenshot = flag.Bool("update-screenshot", false,
	"TestChatPage: write the page at the end of the SQLite run to "+screenshotPath)

// screenshotPath is where -update-screenshot writes, relative to this
// package (the README shows it).
const screenshotPath = "../../docs/chat.png"

// pageTimeout bounds every wait on the page; the scenario's slowest step
// (a busy session, then its resend) takes about three model rounds.
const pageTimeout = 45 * time.Second

// chromium finds the browser: Debian's chromium, which scripts/test.sh
// installs. Without it the test skips, unless it runs under CI or
// ROWLEASE_REQUIRE_ALL (make test), where a missing browser fails it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" || os.Getenv(testdb.RequireAllEnv) != "" {
		t.Fatalf("no chromium on PATH, and CI or %s is set: the browser test must run (scripts/test.sh installs Debian's chromium)", testdb.RequireAllEnv)
	}
	t.Skip("no chromium on PATH: the browser test needs it (apt-get install chromium)")
	return ""
}

// startBrowser starts one headless Chromium for the test, stopped at
// cleanup. The network is closed: every flag that makes Chromium call
// home is off, and the profile is fresh.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	exe := chromium(t)
	profile := t.TempDir() // removed after the browser has stopped (cleanups run last-in first-out)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 1000),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // waits for the process to exit
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	return ctx
}

// console records what the page must not do: console errors, uncaught
// exceptions, browser log errors, and requests to any origin but the
// server's.
type console struct {
	origin string

	mu       sync.Mutex
	problems []string
}

// expectedStatus matches the browser's log line for a response the
// scenario asks for: a 409 (the locks said wait) or a 422 (a reused id)
// to a message.
func expectedStatus(e *log.Entry) bool {
	return e.Source == log.EntrySourceNetwork && strings.Contains(e.URL, "/messages") &&
		(strings.Contains(e.Text, "status of 409") || strings.Contains(e.Text, "status of 422"))
}

func (c *console) listen(ev any) {
	var p string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert ||
			ev.Type == runtime.ConsoleAPICalledTypeWarning {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			p = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		p = fmt.Sprintf("uncaught exception at %s:%d: %s", d.URL, d.LineNumber+1, d.Text)
		if d.Exception != nil {
			p += " " + d.Exception.Description
		}
	case *log.EventEntryAdded:
		if (ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning) && !expectedStatus(ev.Entry) {
			p = fmt.Sprintf("browser log %s (%s): %s %s", ev.Entry.Level, ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
		}
	case *network.EventRequestWillBeSent:
		if u := ev.Request.URL; u != c.origin && !strings.HasPrefix(u, c.origin+"/") {
			p = "request to another origin: " + u
		}
	}
	if p != "" {
		c.mu.Lock()
		c.problems = append(c.problems, p)
		c.mu.Unlock()
	}
}

func (c *console) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.Empty(t, c.problems, "the page must run without console errors and without requests elsewhere")
}

// snapshot is what the page shows, read from its DOM.
type snapshot struct {
	Session string `json:"session"`
	Notice  string `json:"notice"`
	Devices []struct {
		Name  string `json:"name"`
		Turns []turn `json:"turns"`
	} `json:"devices"`
	Ledger []struct {
		CRID  string   `json:"crid"`
		Cells []string `json:"cells"`
	} `json:"ledger"`
	Categories []string `json:"categories"`
	Days       []string `json:"days"`
}

// turn is one message in a device's pane.
type turn struct {
	CRID     string   `json:"crid"`
	Mine     bool     `json:"mine"`  // sent from this pane
	State    string   `json:"state"` // running, waiting, asking, done, failed; stored for another device's
	Final    string   `json:"final"` // the last outcome once settled
	User     string   `json:"user"`
	Reply    string   `json:"reply"`
	Outcomes []string `json:"outcomes"` // the outcome of every try, in order
	Question string   `json:"question"` // the open question's sentence, if one is shown
	Buttons  int      `json:"buttons"`  // its Approve and Deny buttons that can be clicked
	Note     string   `json:"note"`     // what became of this pane's answer, when it was not taken
}

const snapshotJS = `(() => {
  const text = (e) => (e ? e.textContent : '');
  return {
    session: document.body.dataset.session || '',
    notice: text(document.getElementById('notice')),
    devices: [...document.querySelectorAll('.device')].map((d) => ({
      name: d.id,
      turns: [...d.querySelectorAll('.turn')].map((t) => ({
        crid: t.dataset.crid, mine: t.classList.contains('mine'), state: t.dataset.state,
        final: t.dataset.final, user: text(t.querySelector('.bubble.user')),
        reply: text(t.querySelector('.bubble.bot:not(.pending)')),
        outcomes: [...t.querySelectorAll('.chip')].map((c) => c.dataset.outcome),
        question: text(t.querySelector('.question .q-text')),
        buttons: t.querySelectorAll('.question button[data-answer]:not(:disabled)').length,
        note: text(t.querySelector('.answer-note')),
      })),
    })),
    ledger: [...document.querySelectorAll('#ledger-table tbody tr[data-crid]')].map((tr) => ({
      crid: tr.dataset.crid, cells: [...tr.cells].map((c) => c.textContent),
    })),
    categories: [...document.querySelectorAll('#chart-category [data-category]')].map((g) => g.dataset.category),
    days: [...document.querySelectorAll('#chart-day [data-day]')].filter((g) => g.dataset.cents !== '0').map((g) => g.dataset.day),
  };
})()`

// device returns the turns of the named pane.
func (s snapshot) device(name string) []turn {
	for _, d := range s.Devices {
		if d.Name == name {
			return d.Turns
		}
	}
	return nil
}

// mine returns the turn this pane sent with content, if any.
func (s snapshot) mine(device, content string) (turn, bool) {
	for _, tu := range s.device(device) {
		if tu.Mine && tu.User == content {
			return tu, true
		}
	}
	return turn{}, false
}

// other returns the turn another pane sent with content, as this pane
// shows it, if any.
func (s snapshot) other(device, content string) (turn, bool) {
	for _, tu := range s.device(device) {
		if !tu.Mine && tu.User == content {
			return tu, true
		}
	}
	return turn{}, false
}

func (s snapshot) settled(device, content string) (turn, bool) {
	tu, ok := s.mine(device, content)
	return tu, ok && (tu.State == "done" || tu.State == "failed") && (tu.State == "failed" || tu.Reply != "")
}

func (s snapshot) ledgerRows(crid string) int {
	n := 0
	for _, r := range s.Ledger {
		if r.CRID == crid {
			n++
		}
	}
	return n
}

// page drives one tab.
type page struct {
	t   *testing.T
	ctx context.Context
}

func (p page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	require.NoError(p.t, chromedp.Do(p.ctx, actions...))
}

func (p page) snapshot() snapshot {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Evaluate[snapshot](snapshotJS))
	require.NoError(p.t, err)
	return s
}

// waitFor reads the page until cond holds. It waits on what the page
// shows, polled every 100ms, for at most pageTimeout.
func (p page) waitFor(what string, cond func(s snapshot) bool) snapshot {
	p.t.Helper()
	deadline := time.Now().Add(pageTimeout)
	for {
		s := p.snapshot()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("timed out waiting for %s; the page shows %+v", what, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// send types a message into a device's composer and presses Enter.
func (p page) send(device, content string) {
	p.t.Helper()
	p.do(chromedp.SendKeys(chromedp.ID(device+"-input"), content+kb.Enter))
}

// TestChatPage drives the page in headless Chromium on every dialect:
// a Chinese and an English message with their replies and ledger rows, a
// double submit from the two panes (one answer, one replay, one ledger
// row), a busy session that the page resends by itself, a reused id
// (422), the chart of what was booked, and a message queued behind a
// running one (on_busy queue: 202, then its reply without a resend), and
// two expenses above the threshold of approval whose questions both panes
// show: one approved on one device (booked once; the other device's Deny
// after it is refused politely), one denied (nothing booked) — with no
// console error and no request to another origin. -update-screenshot
// writes the SQLite run, a question open on both panes, to docs/chat.png.
func TestChatPage(t *testing.T) {
	browser := startBrowser(t)
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		ts, st := bookkeeper(t, db)
		con := &console{origin: ts.URL}
		ctx, cancel := chromedp.NewContext(browser, chromedp.WithListener(con.listen))
		t.Cleanup(cancel) // closes the tab before the server (cleanups run last-in first-out)
		p := page{t: t, ctx: ctx}

		p.do(chromedp.EmulateViewport(1280, 1000), chromedp.Navigate(ts.URL+"/"),
			chromedp.WaitVisible(chromedp.ID("new-session")))
		p.do(chromedp.Click(chromedp.ID("new-session")))
		s := p.waitFor("a session", func(s snapshot) bool { return s.Session != "" })
		require.Empty(t, s.Notice)

		// A Chinese message on the laptop, an English one on the phone,
		// typed and sent with Enter.
		const zh, en = "中午吃粉花了 35", "taxi 18 yesterday"
		p.send("laptop", zh)
		s = p.waitFor("the laptop's answer", func(s snapshot) bool { _, ok := s.settled("laptop", zh); return ok })
		got, _ := s.mine("laptop", zh)
		assert.Equal(t, []string{"answered"}, got.Outcomes)
		assert.Contains(t, got.Reply, "已记账")
		p.send("phone", en)
		s = p.waitFor("the phone's answer and two ledger rows", func(s snapshot) bool {
			_, ok := s.settled("phone", en)
			return ok && len(s.Ledger) == 2
		})
		got, _ = s.mine("phone", en)
		assert.Equal(t, []string{"answered"}, got.Outcomes)
		assert.Contains(t, got.Reply, "Recorded expense 18.00 (Transport)")
		// Each device shows the whole conversation: the laptop sees the
		// phone's message once the page has read it.
		s = p.waitFor("the phone's message on the laptop", func(s snapshot) bool {
			for _, tu := range s.device("laptop") {
				if !tu.Mine && tu.User == en && tu.Reply != "" {
					return true
				}
			}
			return false
		})

		// Double submit, from the keyboard: one client_request_id from
		// both panes at once runs once.
		const double = "bought a movie ticket 45"
		p.do(chromedp.SetValue(chromedp.ID("race-a"), double),
			chromedp.Focus(chromedp.ID("race-double")), chromedp.KeyEvent(kb.Enter))
		s = p.waitFor("both tries of the double submit", func(s snapshot) bool {
			_, a := s.settled("laptop", double)
			_, b := s.settled("phone", double)
			return a && b
		})
		l, _ := s.mine("laptop", double)
		ph, _ := s.mine("phone", double)
		require.Equal(t, l.CRID, ph.CRID, "one client_request_id")
		finals := []string{l.Final, ph.Final}
		slices.Sort(finals)
		assert.Equal(t, []string{"answered", "replayed"}, finals, "one answer and one replay: laptop %v, phone %v", l.Outcomes, ph.Outcomes)
		loser := l
		if l.Final == "answered" {
			loser = ph
		}
		for _, o := range loser.Outcomes[:len(loser.Outcomes)-1] {
			assert.Equal(t, "request-in-flight", o, "before its replay the loser can only be told it is in flight")
		}
		assert.Equal(t, l.Reply, ph.Reply, "the replay is the stored reply")
		s = p.waitFor("the double submit's ledger row", func(s snapshot) bool { return len(s.Ledger) == 3 })
		assert.Equal(t, 1, s.ledgerRows(l.CRID), "exactly one ledger row for the double submit")

		// A second message while the first runs: the session is busy, and
		// the page resends after Retry-After with the same id, which then
		// succeeds.
		const first, second = "超市 86", "coffee 4.5"
		p.do(chromedp.SetValue(chromedp.ID("race-a"), first), chromedp.SetValue(chromedp.ID("race-b"), second),
			chromedp.Click(chromedp.ID("race-second")))
		s = p.waitFor("both messages of the busy-session race", func(s snapshot) bool {
			_, a := s.settled("laptop", first)
			_, b := s.settled("phone", second)
			return a && b
		})
		a, _ := s.mine("laptop", first)
		b, _ := s.mine("phone", second)
		assert.Equal(t, []string{"answered"}, a.Outcomes, "the laptop's message ran at once")
		require.GreaterOrEqual(t, len(b.Outcomes), 2, "the phone's message was refused first: %v", b.Outcomes)
		assert.Equal(t, "session-busy", b.Outcomes[0])
		assert.Equal(t, "answered", b.Final, "the automatic resend succeeded: %v", b.Outcomes)
		assert.Contains(t, b.Reply, "Recorded expense 4.50 (Food)")

		// A reused id (a client bug): 422, nothing changes.
		p.do(chromedp.Click(chromedp.ID("race-reuse")))
		s = p.waitFor("the 422", func(s snapshot) bool {
			for _, tu := range s.device("phone") {
				if tu.Mine && tu.CRID == a.CRID {
					return tu.State == "failed"
				}
			}
			return false
		})
		for _, tu := range s.device("phone") {
			if tu.Mine && tu.CRID == a.CRID {
				assert.Equal(t, []string{"client-request-id-reused"}, tu.Outcomes)
				assert.Equal(t, second, tu.User)
			}
		}

		// The ledger and the charts show what was booked, once each.
		s = p.waitFor("five ledger rows and four categories", func(s snapshot) bool {
			return len(s.Ledger) == 5 && len(s.Categories) == 4
		})
		assert.ElementsMatch(t, []string{"Food", "Transport", "Entertainment", "Shopping"}, s.Categories)
		assert.Len(t, s.Days, 2, "today and yesterday: %v", s.Days)
		for _, r := range s.Ledger {
			assert.Equal(t, 1, s.ledgerRows(r.CRID), "one row per message")
		}
		n, err := st.CountTransactions(context.Background(), st.DB)
		require.NoError(t, err)
		assert.Equal(t, 5, n, "the database agrees with the page")
		perID, err := st.TransactionsPerClientRequest(context.Background(), st.DB)
		require.NoError(t, err)
		for _, c := range perID {
			assert.LessOrEqual(t, c.Transactions, 1, "client request id %s", c.ClientRequestID)
		}

		// An expense above the threshold of approval: the laptop's message
		// waits for a person (202 waiting), and both panes show its
		// question with Approve and Deny — the phone learns of it by
		// reading the message's status. Approved on the laptop, it is
		// booked once; the phone, denying it a moment later, is told
		// politely that it was already answered, and shows the outcome.
		const rent = "paid rent 4,800.00"
		p.send("laptop", rent)
		s = p.waitFor("the rent's question on both panes", func(s snapshot) bool {
			l, a := s.mine("laptop", rent)
			ph, b := s.other("phone", rent)
			return a && b && l.State == "asking" && l.Buttons == 2 && ph.Buttons == 2
		})
		l, _ = s.mine("laptop", rent)
		ph, _ = s.other("phone", rent)
		assert.Equal(t, []string{"asked"}, l.Outcomes)
		assert.Equal(t, "Book 4,800.00 to Housing?", l.Question)
		assert.Equal(t, l.Question, ph.Question, "the other device shows the same question")
		assert.Empty(t, l.Reply)
		assert.Len(t, s.Ledger, 5, "nothing is booked while the question is open")
		p.do(chromedp.Click(chromedp.CSS(answerButton("laptop", l.CRID, "approve"))))
		// The approval is recorded at once, and the message runs on for a
		// model round: the phone's Deny lands meanwhile.
		waitForStatus(t, ts.URL, s.Session, l.CRID, func(st string) bool { return st != "waiting" })
		clicked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const b = document.querySelector('`+
			answerButton("phone", l.CRID, "deny")+`'); if (!b) return false; b.click(); return true; })()`))
		require.NoError(t, err)
		require.True(t, clicked, "the phone's Deny is there while the approved message runs on")
		s = p.waitFor("the approval's outcome on both panes", func(s snapshot) bool {
			l, a := s.settled("laptop", rent)
			ph, b := s.other("phone", rent)
			return a && b && ph.Reply != "" && ph.Note != "" && l.Buttons == 0 && ph.Buttons == 0 && l.Question == "" && ph.Question == ""
		})
		l, _ = s.mine("laptop", rent)
		ph, _ = s.other("phone", rent)
		assert.Equal(t, []string{"asked", "approved"}, l.Outcomes)
		assert.Equal(t, "done", l.State)
		assert.Equal(t, "Recorded expense 4800.00 (Housing).", l.Reply)
		assert.Equal(t, l.Reply, ph.Reply, "the other device shows the outcome")
		assert.Equal(t, "Already answered on the other device; your answer was not taken.", ph.Note)
		s = p.waitFor("the approved rent's ledger row", func(s snapshot) bool { return len(s.Ledger) == 6 })
		assert.Equal(t, 1, s.ledgerRows(l.CRID), "approved: booked once")

		// Denied: the phone's purchase is asked about on both panes,
		// denied on the laptop, and nothing is booked.
		const purchase = "new laptop 1,299.00"
		p.send("phone", purchase)
		s = p.waitFor("the purchase's question on both panes", func(s snapshot) bool {
			ph, a := s.mine("phone", purchase)
			l, b := s.other("laptop", purchase)
			return a && b && ph.State == "asking" && ph.Buttons == 2 && l.Buttons == 2
		})
		ph, _ = s.mine("phone", purchase)
		assert.Equal(t, "Book 1,299.00 to Shopping?", ph.Question)
		if *updateScreenshot && t.Name() == "TestChatPage/sqlite" {
			writeScreenshot(t, p)
		}
		p.do(chromedp.Click(chromedp.CSS(answerButton("laptop", ph.CRID, "deny"))))
		s = p.waitFor("the denial's outcome on both panes", func(s snapshot) bool {
			ph, a := s.settled("phone", purchase)
			l, b := s.other("laptop", purchase)
			return a && b && l.Reply != "" && ph.Buttons == 0 && l.Buttons == 0 && ph.Question == "" && l.Question == ""
		})
		ph, _ = s.mine("phone", purchase)
		l, _ = s.other("laptop", purchase)
		assert.Equal(t, "done", ph.State, "the asking pane learns the outcome from the message's status")
		assert.Equal(t, "Not booked: expense 1299.00 (Shopping) was not approved.", ph.Reply)
		assert.Equal(t, ph.Reply, l.Reply)
		assert.Empty(t, l.Note)
		assert.Equal(t, 0, s.ledgerRows(ph.CRID), "denied: nothing booked")
		assert.Len(t, s.Ledger, 6)
		n, err = st.CountTransactions(context.Background(), st.DB)
		require.NoError(t, err)
		assert.Equal(t, 6, n, "the database agrees: the denied purchase booked nothing")

		// The laptop's message while the phone's runs, with "queue" chosen
		// on the laptop: 202 queued, then the page reads its status until it
		// is done and shows the reply, without resending it; one more
		// ledger row each.
		const running, queued = "parking 15", "dinner with friends 120"
		p.do(chromedp.SetValue(chromedp.ID("laptop-onbusy"), "queue"),
			chromedp.SetValue(chromedp.ID("race-a"), queued), chromedp.SetValue(chromedp.ID("race-b"), running),
			chromedp.Click(chromedp.ID("race-behind")))
		s = p.waitFor("the laptop's queued message queued", func(s snapshot) bool {
			tu, ok := s.mine("laptop", queued)
			return ok && len(tu.Outcomes) > 0 && tu.Outcomes[0] != "running"
		})
		q, _ := s.mine("laptop", queued)
		require.Equal(t, []string{"queued"}, q.Outcomes, "the laptop's message was queued behind the phone's")
		s = p.waitFor("both messages of the queue race", func(s snapshot) bool {
			_, a := s.settled("laptop", queued)
			_, b := s.settled("phone", running)
			return a && b
		})
		q, _ = s.mine("laptop", queued)
		r, _ := s.mine("phone", running)
		assert.Equal(t, []string{"answered"}, r.Outcomes, "the phone's message ran at once")
		assert.Equal(t, "done", q.State)
		assert.Equal(t, []string{"queued"}, q.Outcomes, "one try: the reply came without a resend")
		assert.Contains(t, q.Reply, "Recorded expense 120.00 (Food)")
		s = p.waitFor("eight ledger rows", func(s snapshot) bool { return len(s.Ledger) == 8 })
		assert.Equal(t, 1, s.ledgerRows(q.CRID), "one ledger row for the queued message")
		assert.Equal(t, 1, s.ledgerRows(r.CRID), "one ledger row for the running message")
		n, err = st.CountTransactions(context.Background(), st.DB)
		require.NoError(t, err)
		assert.Equal(t, 8, n, "the database agrees with the page")

		// A message cancelled while it runs: the Cancel button on the
		// running turn (DELETE …/messages/{id}). Its own try comes back
		// 409 cancelled, final: no resend is offered, a resend by hand
		// gets 409 cancelled again, and its status says cancelled.
		const slow = "taxi home 42"
		p.do(chromedp.SetValue(chromedp.ID("laptop-onbusy"), "reject"))
		p.send("laptop", slow)
		const cancelButton = "#laptop-log .turn.mine[data-state='running'] button.cancel"
		p.do(chromedp.WaitVisible(chromedp.CSS(cancelButton)))
		// A click in the page, on the button as it is now (the pane is
		// redrawn when the conversation is read again).
		p.do(chromedp.Evaluate[chromedp.Void](`document.querySelector("` + cancelButton + `").click()`))
		s = p.waitFor("the cancelled message", func(s snapshot) bool { _, ok := s.settled("laptop", slow); return ok })
		c, _ := s.mine("laptop", slow)
		assert.Equal(t, "failed", c.State)
		assert.Equal(t, []string{"cancelled"}, c.Outcomes, "one try, answered 409 cancelled")
		assert.Empty(t, c.Reply, "no reply")
		p.do(chromedp.WaitNotPresent(chromedp.CSS("#laptop-log .turn.mine button.cancel")))
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`[...document.querySelectorAll('#laptop-log .turn.mine')].some((t) => t.dataset.crid === '`+c.CRID+`' && t.querySelector('button.resend'))`))
		require.NoError(t, err)
		assert.False(t, ok, "a cancelled message offers no resend")
		status, problem := postMessage(t, ts.URL, s.Session, slow, c.CRID)
		assert.Equal(t, 409, status)
		assert.Equal(t, "https://rowlease.dev/problems/cancelled", problem, "a resend of a cancelled id")
		assert.Equal(t, "cancelled", messageStatus(t, ts.URL, s.Session, c.CRID))
		n, err = st.CountTransactions(context.Background(), st.DB)
		require.NoError(t, err)
		assert.LessOrEqual(t, n, 9, "a cancelled message keeps at most the one transaction it committed")

		// Readable on a phone: nothing wider than the screen.
		p.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
		overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
		require.NoError(t, err)
		assert.False(t, overflow, "the page scrolls sideways on a 390px screen")

		con.check(t)
	})
}

// answerButton selects a pane's Approve or Deny button (key "approve" or
// "deny") on the question of message crid.
func answerButton(device, crid, key string) string {
	return `#` + device + `-log .turn[data-crid="` + crid + `"] .question button[data-answer="` + key + `"]`
}

// waitForStatus reads a message's status through the API until cond holds.
func waitForStatus(t *testing.T, url, session, crid string, cond func(status string) bool) {
	t.Helper()
	deadline := time.Now().Add(pageTimeout)
	for !cond(messageStatus(t, url, session, crid)) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the status of %s", crid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writeScreenshot writes the page as it is to screenshotPath, after
// scrolling both conversations to their ends.
func writeScreenshot(t *testing.T, p page) {
	t.Helper()
	// Without a Chinese font the page's Chinese would be drawn as empty
	// boxes: refuse to write such a picture.
	out, err := exec.Command("fc-list", ":lang=zh").Output()
	if err != nil || len(strings.TrimSpace(string(out))) == 0 {
		t.Fatalf("-update-screenshot needs a Chinese font (fc-list :lang=zh finds none: %v); "+
			"install one, e.g. apt-get install fonts-wqy-microhei", err)
	}
	p.do(chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur();
		for (const l of document.querySelectorAll('.log')) l.scrollTop = l.scrollHeight;`))
	shot, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	small, err := paletted(shot)
	require.NoError(t, err)
	path, err := filepath.Abs(screenshotPath)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, small, 0o644))
	t.Logf("wrote %s (%d KB)", path, len(small)/1024)
}

// paletted re-encodes a PNG with its 256 most frequent colours, without
// dithering: a page of flat colours and text looks the same, at less than
// half the size.
func paletted(shot []byte) ([]byte, error) {
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		return nil, err
	}
	r := img.Bounds()
	counts := map[color.RGBA]int{}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			counts[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	cs := make([]color.RGBA, 0, len(counts))
	for c := range counts {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b color.RGBA) int {
		if d := counts[b] - counts[a]; d != 0 {
			return d
		}
		return int(uint32(a.R)<<24|uint32(a.G)<<16|uint32(a.B)<<8|uint32(a.A)) -
			int(uint32(b.R)<<24|uint32(b.G)<<16|uint32(b.B)<<8|uint32(b.A))
	})
	pal := make(color.Palette, 0, 256)
	for _, c := range cs[:min(256, len(cs))] {
		pal = append(pal, c)
	}
	out := image.NewPaletted(r, pal)
	draw.Draw(out, r, img, r.Min, draw.Src)
	var b bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&b, out); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

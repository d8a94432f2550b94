package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/request"
)

// DefaultApproveAbove is the service's default threshold of approval, in
// cents: an expense above 1,000.00 is booked only once a person approved
// it.
const DefaultApproveAbove = 100_000

// Approval is the answer to an approval question: {"approved": true} books
// the transaction, {"approved": false} books nothing.
type Approval struct {
	Approved bool `json:"approved"`
}

// ApprovalQuestion is the question of an approval wait, as the person
// sees it: a sentence in the user's language and what it is about.
type ApprovalQuestion struct {
	// Text is the question as a sentence: "Book 4,800.00 to Housing?".
	Text string `json:"text"`
	// Type is "expense".
	Type string `json:"type"`
	// Amount is the amount, with two decimals: "4800.00".
	Amount string `json:"amount"`
	// Category is the category the model chose, in the user's language
	// ("Other" when it chose none).
	Category string `json:"category"`
	// Description is the transaction's note, or the user's message.
	Description string `json:"description"`
}

// ApprovalName is the name of the request's n-th approval wait (from 1):
// "approve-1", "approve-2", … Wait names are unique within a request.
func ApprovalName(n int) string { return fmt.Sprintf("approve-%d", n) }

// approvals is what one run of a message knows of its approvals. A run
// that resumes the request after an answer replays the model rounds, so
// it asks at the same places under the same names, and each Await
// returns its recorded answer.
type approvals struct {
	asked   int             // approval waits asked so far (their names)
	granted map[string]bool // bookings approved in this run, by booking key
	// answered: an Await of this run returned a recorded answer (the run
	// goes on after a wait); replayed is run.StepsReplayed() just after it.
	answered bool
	replayed int
}

// bookingKey identifies a booking for approval: a call made again (a
// retryable failure, the model asked again) for the same type and amount
// was approved once already.
func bookingKey(typ string, cents int64) string { return fmt.Sprintf("%s/%d", typ, cents) }

// approvalArgs are the create_transaction arguments the approval reads.
type approvalArgs struct {
	Type         string      `json:"type"`
	Amount       json.Number `json:"amount"`
	CategoryName string      `json:"category_name"`
	Note         string      `json:"note"`
}

// approve asks a person to approve a create_transaction call whose
// expense is above Config.ApproveAbove, and returns "" to go on with the
// call, or the tool result to give the model instead (the booking was
// denied, or the approval expired: nothing is booked). Arguments it
// cannot read are left to the tool, which refuses them. err is
// request.ErrWaiting while the question is open: the run ends there, as
// waiting, and resumes from the recorded answer.
func (a *Agent) approve(ctx context.Context, run *request.Run, ap *approvals, arguments string) (string, error) {
	if a.cfg.ApproveAbove <= 0 || ap == nil {
		return "", nil
	}
	var in approvalArgs
	dec := json.NewDecoder(strings.NewReader(arguments))
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil || in.Type != store.TypeExpense {
		return "", nil
	}
	cents, err := store.ParseAmount(in.Amount.String())
	if err != nil || cents <= a.cfg.ApproveAbove {
		return "", nil
	}
	key := bookingKey(in.Type, cents)
	if ap.granted[key] {
		return "", nil
	}
	q := a.approvalQuestion(ctx, run, in, cents)
	ap.asked++
	name := ApprovalName(ap.asked)
	var opts []request.AwaitOption
	if a.cfg.ApprovalWithin > 0 {
		opts = append(opts, request.Within(a.cfg.ApprovalWithin))
	}
	ans, err := request.Await[Approval](ctx, run, name, q, opts...)
	var expired *request.WaitExpiredError
	switch {
	case errors.As(err, &expired):
		ap.answered, ap.replayed = true, run.StepsReplayed()
		a.log.Info("agent: approval expired", "request", run.RequestID(), "wait", name)
		return notApprovedJSON(q, true), nil
	case err != nil:
		return "", err
	}
	ap.answered, ap.replayed = true, run.StepsReplayed()
	a.log.Info("agent: approval answered", "request", run.RequestID(), "wait", name, "approved", ans.Approved)
	if !ans.Approved {
		return notApprovedJSON(q, false), nil
	}
	if ap.granted == nil {
		ap.granted = map[string]bool{}
	}
	ap.granted[key] = true
	return "", nil
}

// approvalQuestion words the question in the user's language. The
// category is named as the ledger names it when the model's name matches
// one (it is read again each time the question is asked; a replay does not
// compare questions).
func (a *Agent) approvalQuestion(ctx context.Context, run *request.Run, in approvalArgs, cents int64) ApprovalQuestion {
	zh := isZH(ctx)
	cat := strings.TrimSpace(in.CategoryName)
	if cats, err := a.st.Categories(ctx, a.st.DB); err == nil {
		if cat == "" {
			c := findCategory(cats, store.OtherCategoryID)
			cat = categoryLabel(zh, c.Name, c.NameEN)
		} else if c, _, ok := matchCategory(cats, cat); ok {
			cat = categoryLabel(zh, c.Name, c.NameEN)
		}
	}
	if cat == "" {
		cat = categoryLabel(zh, "其他", "Other")
	}
	desc := strings.TrimSpace(in.Note)
	if desc == "" {
		desc = run.Content()
	}
	q := ApprovalQuestion{Type: in.Type, Amount: store.FormatCents(cents), Category: truncate(cat, 40),
		Description: truncate(desc, 200)}
	if zh {
		q.Text = fmt.Sprintf("记一笔 %s 元的支出（%s）？", GroupedCents(cents), q.Category)
	} else {
		q.Text = fmt.Sprintf("Book %s to %s?", GroupedCents(cents), q.Category)
	}
	return q
}

// notApprovedJSON is the tool result the model gets for a booking that
// was denied, or whose approval expired: nothing was booked
// (llm.NotApprovedField).
func notApprovedJSON(q ApprovalQuestion, expired bool) string {
	msg := "the person asked did not approve this booking; nothing was booked"
	if expired {
		msg = "the approval of this booking expired before anyone answered; nothing was booked"
	}
	b, _ := json.Marshal(map[string]any{"error": msg, llm.NotApprovedField: true, "expired": expired,
		"type": q.Type, "amount": q.Amount, "category": q.Category})
	return string(b)
}

// GroupedCents writes cents with thousands separators: 480000 → "4,800.00".
func GroupedCents(c int64) string {
	s := store.FormatCents(c)
	whole, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String() + "." + frac
}

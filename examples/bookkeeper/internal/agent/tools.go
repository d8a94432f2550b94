package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/store"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/toolexec"
)

// MaxNoteLen bounds a transaction's note, in characters.
const MaxNoteLen = 500

// maxListed bounds the transactions list_transactions returns.
const maxListed = 100

// toolError is a tool failure meant for the model: bad arguments, an
// unknown category, a second transaction. Other failures are logged and
// shown to the model as a generic error.
type toolError struct{ msg string }

// Error returns the message shown to the model.
func (e *toolError) Error() string { return e.msg }

func toolErrorf(format string, args ...any) error {
	return &toolError{msg: fmt.Sprintf(format, args...)}
}

// langKey carries, in the tool's context, whether the user wrote Chinese,
// so results name categories in the user's language.
type langKey struct{}

func isZH(ctx context.Context) bool { zh, _ := ctx.Value(langKey{}).(bool); return zh }

// roundKey carries, in a tool's context, the model round that decided the
// call (from 1).
type roundKey struct{}

// ErrToolFailure is create_transaction's own failure with
// Config.ToolFailEvery: nothing is written, and the model is told that it
// may make the call again.
var ErrToolFailure = errors.New("the ledger refused the write for now (-tool-fail-every)")

// ToolFailurePicked reports whether, with Config.ToolFailEvery = every,
// create_transaction fails for the message of clientRequestID: one message
// in every, by a hash of the id, the same in every process.
func ToolFailurePicked(clientRequestID string, every int) bool {
	if every <= 0 {
		return false
	}
	h := fnv.New32a()
	h.Write([]byte(clientRequestID))
	return h.Sum32()%uint32(every) == 0
}

func decodeArgs(canonical []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(canonical))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return toolErrorf("invalid arguments: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// transactionOut is a transaction as the tools show it to the model.
type transactionOut struct {
	TransactionID string `json:"transaction_id,omitempty"`
	ID            string `json:"id,omitempty"`
	Type          string `json:"type"`
	Amount        string `json:"amount"`
	Category      string `json:"category"`
	Note          string `json:"note,omitempty"`
	OccurDate     string `json:"occur_date"`
}

func categoryLabel(zh bool, name, nameEN string) string {
	if zh {
		return name
	}
	return nameEN
}

// createTransaction is the create_transaction tool. It writes in x.Tx,
// which commits with the fences and the tool's success mark.
func (a *Agent) createTransaction(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
	if round, _ := ctx.Value(roundKey{}).(int); round == 1 && ToolFailurePicked(x.Call.ClientRequestID, a.cfg.ToolFailEvery) {
		// The call round 1 decided fails whenever it is made, before
		// anything else is looked at: a run that replays the round after
		// a later call booked the message gets the same failure, not
		// "already recorded".
		return nil, ErrToolFailure
	}
	var in struct {
		Type         string      `json:"type"`
		Amount       json.Number `json:"amount"`
		CategoryName string      `json:"category_name"`
		Note         string      `json:"note"`
		OccurDate    string      `json:"occur_date"`
	}
	if err := decodeArgs(x.Canonical, &in); err != nil {
		return nil, err
	}
	if in.Type != store.TypeIncome && in.Type != store.TypeExpense {
		return nil, toolErrorf(`type is required and must be "income" or "expense"`)
	}
	if in.Amount == "" {
		return nil, toolErrorf("amount is required")
	}
	cents, err := store.ParseAmount(in.Amount.String())
	if err != nil {
		return nil, toolErrorf("amount: %s", strings.TrimPrefix(err.Error(), store.ErrBadAmount.Error()+": "))
	}
	note := strings.TrimSpace(in.Note)
	if utf8.RuneCountInString(note) > MaxNoteLen {
		return nil, toolErrorf("note is longer than %d characters", MaxNoteLen)
	}
	date := strings.TrimSpace(in.OccurDate)
	if date == "" {
		date = a.cfg.Now().Format(store.DateLayout)
	} else if _, err := time.Parse(store.DateLayout, date); err != nil {
		return nil, toolErrorf("occur_date %q is not a date in the form YYYY-MM-DD", truncate(date, 40))
	}

	sess, err := a.st.GetSession(ctx, x.Tx, x.Call.SessionKey)
	if err != nil {
		return nil, err
	}
	if t, ok, err := a.st.TransactionByRequest(ctx, x.Tx, x.Call.RequestID); err != nil {
		return nil, err
	} else if ok {
		return nil, alreadyRecorded(t)
	}
	cats, err := a.st.Categories(ctx, x.Tx)
	if err != nil {
		return nil, err
	}
	zh := isZH(ctx)
	var cat store.Category
	label := ""
	if name := strings.TrimSpace(in.CategoryName); name == "" {
		cat = findCategory(cats, store.OtherCategoryID)
		label = categoryLabel(zh, cat.Name, cat.NameEN)
	} else {
		var ok bool
		if cat, label, ok = matchCategory(cats, name); !ok {
			names := make([]string, 0, len(cats))
			for _, c := range cats {
				names = append(names, categoryLabel(zh, c.Name, c.NameEN))
			}
			return nil, toolErrorf("unknown category %q; use one of: %s", truncate(name, 40), strings.Join(names, ", "))
		}
		if cat.Kind != "" && cat.Kind != in.Type {
			return nil, toolErrorf("category %q is for %s, not %s", label, cat.Kind, in.Type)
		}
	}

	t := store.Transaction{ID: uuid.NewString(), LedgerID: sess.LedgerID, SessionKey: x.Call.SessionKey,
		RequestID: x.Call.RequestID, Type: in.Type, AmountCents: cents, CategoryID: cat.ID, Note: note, OccurDate: date}
	if err := a.st.InsertTransaction(ctx, x.Tx, t); err != nil {
		if lease.IsDuplicateKey(err) {
			// UNIQUE (request_id): the database's own "one per request".
			return nil, toolErrorf("this message already recorded a transaction; only one transaction per message")
		}
		return nil, err
	}
	return json.Marshal(transactionOut{TransactionID: t.ID, Type: t.Type, Amount: t.Amount(), Category: label,
		Note: note, OccurDate: date})
}

func alreadyRecorded(t store.Transaction) error {
	return toolErrorf("this message already recorded transaction %s (%s %s on %s); only one transaction per message",
		t.ID, t.Type, t.Amount(), t.OccurDate)
}

func findCategory(cats []store.Category, id string) store.Category {
	for _, c := range cats {
		if c.ID == id {
			return c
		}
	}
	return store.Category{ID: id, Name: "其他", NameEN: "Other"}
}

// matchCategory finds a category by its Chinese name, its English name
// (any case) or its id, and returns the name in the language asked.
func matchCategory(cats []store.Category, name string) (store.Category, string, bool) {
	for _, c := range cats {
		switch {
		case name == c.Name:
			return c, c.Name, true
		case strings.EqualFold(name, c.NameEN), strings.EqualFold(name, c.ID):
			return c, c.NameEN, true
		}
	}
	return store.Category{}, "", false
}

// listCategories is the list_categories tool (read only).
func (a *Agent) listCategories(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
	var in struct{}
	if err := decodeArgs(x.Canonical, &in); err != nil {
		return nil, err
	}
	cats, err := a.st.Categories(ctx, x.Tx)
	if err != nil {
		return nil, err
	}
	type catOut struct {
		Name   string `json:"name"`
		NameZH string `json:"name_zh"`
		NameEN string `json:"name_en"`
		Type   string `json:"type,omitempty"`
	}
	zh := isZH(ctx)
	out := struct {
		Categories []catOut `json:"categories"`
	}{Categories: make([]catOut, 0, len(cats))}
	for _, c := range cats {
		out.Categories = append(out.Categories, catOut{Name: categoryLabel(zh, c.Name, c.NameEN), NameZH: c.Name, NameEN: c.NameEN, Type: c.Kind})
	}
	return json.Marshal(out)
}

// listTransactions is the list_transactions tool (read only).
func (a *Agent) listTransactions(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
	var in llm.ListTransactionsArgs
	if err := decodeArgs(x.Canonical, &in); err != nil {
		return nil, err
	}
	for _, d := range []string{in.DateFrom, in.DateTo} {
		if _, err := time.Parse(store.DateLayout, d); d != "" && err != nil {
			return nil, toolErrorf("date %q is not in the form YYYY-MM-DD", truncate(d, 40))
		}
	}
	if in.Type != "" && in.Type != store.TypeIncome && in.Type != store.TypeExpense {
		return nil, toolErrorf(`type must be "income" or "expense"`)
	}
	sess, err := a.st.GetSession(ctx, x.Tx, x.Call.SessionKey)
	if err != nil {
		return nil, err
	}
	ts, err := a.st.Transactions(ctx, x.Tx, store.TransactionFilter{LedgerID: sess.LedgerID, DateFrom: in.DateFrom,
		DateTo: in.DateTo, Type: in.Type, Limit: maxListed + 1})
	if err != nil {
		return nil, err
	}
	out := struct {
		Transactions []transactionOut `json:"transactions"`
		Truncated    bool             `json:"truncated,omitempty"`
	}{Transactions: make([]transactionOut, 0, len(ts))}
	if len(ts) > maxListed {
		ts, out.Truncated = ts[:maxListed], true
	}
	zh := isZH(ctx)
	for _, t := range ts {
		out.Transactions = append(out.Transactions, transactionOut{ID: t.ID, Type: t.Type, Amount: t.Amount(),
			Category: categoryLabel(zh, t.Category, t.CategoryEN), Note: t.Note, OccurDate: t.OccurDate})
	}
	return json.Marshal(out)
}

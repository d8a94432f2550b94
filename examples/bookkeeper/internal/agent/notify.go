package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/webhook"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/toolexec"
)

// ToolNotify is the external tool that posts a booked transaction to the
// webhook (Config.Webhook). The agent calls it itself, once per message
// that booked a transaction; the model cannot call it.
const ToolNotify = "notify_webhook"

// notifyEffect is ToolNotify's effect: the canonical arguments (a
// webhook.Notification) posted with the effect key as Idempotency-Key.
func (a *Agent) notifyEffect(ctx context.Context, x toolexec.External) (json.RawMessage, error) {
	if x.Again {
		// An earlier run announced it and died, or did not hear the
		// answer: the same key again, which the receiver answers with its
		// first outcome if it performed it.
		a.log.Info("agent: notifying again with the same idempotency key", "request", x.Call.RequestID, "key", x.EffectKey)
	}
	return a.cfg.Webhook.Send(ctx, x.EffectKey, x.Canonical)
}

// notify posts the request's transaction, if it booked one and a webhook
// is configured, and returns a line for the reply. Its arguments are read
// from the ledger, so every run of the request — a retry, a takeover after
// a crash — makes the same call and finds the same tool execution: done
// (its stored result), announced without a result (sent again with the
// same key: the receiver honours keys), or not yet started.
//
// A refusal (4xx) is recorded and told in the reply: the transaction
// stands. Any other failure — the receiver's answer unknown (timeout, 5xx,
// connection lost), lease lost, the call running elsewhere — fails the
// run, so the request is not answered as a success that hides it; the
// client's retry with the same client request id settles it.
func (a *Agent) notify(ctx context.Context, run *request.Run, zh bool) (string, error) {
	if a.cfg.Webhook == nil {
		return "", nil
	}
	t, ok, err := a.st.TransactionByRequest(ctx, a.st.DB, run.RequestID())
	if err != nil || !ok {
		return "", err
	}
	args, err := json.Marshal(webhook.Notification{Event: webhook.EventBooked, TransactionID: t.ID, Type: t.Type,
		Amount: t.Amount(), Category: t.CategoryID, OccurDate: t.OccurDate, SessionID: t.SessionKey, RequestID: t.RequestID})
	if err != nil {
		return "", err
	}
	res, err := run.CallTool(ctx, ToolNotify, args)
	var failed *toolexec.FailedError
	switch {
	case err == nil:
		var d webhook.Delivery
		_ = json.Unmarshal(res.Output, &d)
		a.log.Debug("agent: webhook notified", "request", run.RequestID(), "receipt", d.Receipt, "reused", res.Reused, "replayed", d.Replayed)
		return notifiedLine(zh, d.Receipt), nil
	case errors.As(err, &failed):
		a.log.Warn("agent: the webhook refused the notification", "request", run.RequestID(), "err", failed.Err)
		status := 0
		var se *webhook.StatusError
		if errors.As(failed.Err, &se) {
			status = se.Status
		}
		return refusedLine(zh, status), nil
	}
	return "", fmt.Errorf("agent: webhook notification: %w", err)
}

func notifiedLine(zh bool, receipt string) string {
	switch {
	case zh && receipt != "":
		return fmt.Sprintf("已推送通知（回执 %s）。", receipt)
	case zh:
		return "已推送通知。"
	case receipt != "":
		return fmt.Sprintf("Webhook notified (receipt %s).", receipt)
	}
	return "Webhook notified."
}

func refusedLine(zh bool, status int) string {
	switch {
	case zh && status != 0:
		return fmt.Sprintf("通知被 webhook 拒绝（HTTP %d），账已记好。", status)
	case zh:
		return "通知被 webhook 拒绝，账已记好。"
	case status != 0:
		return fmt.Sprintf("The webhook refused the notification (HTTP %d); the transaction is recorded.", status)
	}
	return "The webhook refused the notification; the transaction is recorded."
}

// Package webhook is the bookkeeper's effect outside its database: a
// notification posted to a URL when a transaction is booked, with an
// idempotency key, and a small receiver that honours the key.
//
// # Sender
//
// Sender.Send posts a JSON body with the header Idempotency-Key: key. The
// bookkeeper sends the tool execution's effect key (toolexec.External), so
// every retry, takeover and restart of one notification carries one key.
// Send sorts the answer into the three outcomes rowlease's external tools
// know:
//
//   - 2xx: performed. The result to record is a Delivery (status, the
//     receiver's receipt, whether it replayed its first answer).
//   - a definite refusal — 4xx other than 409, or a redirect (not
//     followed) — wrapped with toolexec.NotPerformed: the receiver did not
//     perform it.
//   - anything else leaves the outcome unknown: a transport error, a
//     timeout, a cancelled context, 5xx, and 409, which a receiver that
//     honours idempotency keys answers while a request with the same key
//     is still in progress (it may yet perform it).
//
// # Receiver
//
// Receiver is an http.Handler standing in for the other side (a payment
// or notification service), in memory. It follows the IETF draft "The
// Idempotency-Key HTTP Header Field":
//
//	POST /…      (any path but /effects and /healthz) a Notification with
//	             Idempotency-Key: performs the effect once per key
//	             → 200 {"receipt": "r-000001", "transaction_id": …}
//	  a key seen before, same body   → its first answer again, with
//	                                   Idempotent-Replayed: true
//	  a key seen before, other body  → 422
//	  a key still being processed    → 409 with Retry-After
//	  no key, bad body               → 400
//	GET  /effects   {"effects": [...], "stats": {...}}
//	GET  /healthz   {"status": "ok"}
//
// An effect is performed at most once per key; a receiver cannot tell two
// keys for one transaction apart, which is why the sender must keep its
// key. Tests count effects per transaction to see that it did. It can be
// told to be slow (Delay), and to call a Hook at each stage of a request,
// so a test can kill the sender while the receiver holds the request
// before or after performing the effect. If the sender has gone away
// before the effect (its connection closed), the receiver does not
// perform it, as a receiver whose own transaction fails with the
// connection would.
//
// What it does not do: persist anything (its memory is its lifetime; the
// kill tests keep it in the test process, which is not killed), expire
// keys, or authenticate senders.
package webhook

// Package web is the bookkeeper's chat page: plain HTML, CSS and
// JavaScript embedded in the binary (no build step, no external requests),
// served at / by the HTTP API (package api) next to /api/.
//
// The page is a client of the JSON API and nothing more: it creates or
// opens a session, sends messages from two panes (a laptop and a phone on
// the same session), and shows under every message what the locks decided
// for each try — answered, replayed, resumed, session busy or in flight
// (with the Retry-After countdown and an automatic resend with the same
// client_request_id), 422 for an id reused with other content, queued
// (202, then its status read with Prefer: wait until final, never
// resent), interrupted (final), cancelled (final), queue full (429,
// resent), waited (a 200 with Preference-Applied), asks for approval (202
// waiting: an expense above the threshold waits for a person). The
// question is shown on both panes with Approve and Deny buttons — the
// other pane learns of it by reading the status (GET …/messages/{id}) of
// every message without a reply whenever it reads the conversation — and
// a click posts the answer (POST …/messages/{id}/answers/{name}); both
// panes then show the outcome. A second answer from the other pane gets
// the same outcome, or, if it differs, a 409 told politely. A message that runs, is
// queued or waits to be resent has a Cancel button (DELETE
// /api/sessions/{id}/messages/{client_request_id}). Each pane sends its "when busy" choice
// (on_busy reject, queue or interrupt) and, if asked, Prefer: wait=30 with
// every try of a message. A panel causes the races people cause by
// accident: a double submit, a second message while the first runs (and
// the other way round), a reused id. Below, the session's ledger
// as a table and two SVG charts (spending by category and by day).
//
// Routes (Handler):
//
//	GET /                 the page (index.html)
//	GET /assets/{name}    app.js, app.css, icon.svg
//
// Every response has an ETag (a hash of the file), Cache-Control:
// no-cache (the browser revalidates, so a new binary's page is seen at
// once) and X-Content-Type-Options: nosniff. The page also carries a
// Content-Security-Policy that allows only its own origin: no inline
// script, no third-party fonts, scripts or connections.
//
// # Failure handling
//
// An unknown asset name is passed to the notFound handler given to
// Handler (the API answers it with its problem+json 404). The page shows
// a failed read of the session in a status line and retries on its next
// poll; a message's failed try is shown on the message, and resent
// automatically when the answer says to (409, 429, 503, no response), or
// by a Resend button (5xx, a queued message that failed); the id never
// changes. A 409 interrupted or cancelled is final: no resend is offered.
// A Cancel that finds no message yet (404: its try has not reached the
// server) is tried again for a few seconds; one of a message waiting to
// be resent that the server never accepted only stops the resend.
//
// The page is checked in a real browser: chat_test.go drives it in
// headless Chromium on every dialect (make test installs Debian's
// chromium), and -update-screenshot rewrites docs/chat.png.
package web

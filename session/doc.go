// Package session is the first of rowlease's three lock levels: a session
// (one conversation) never runs two requests at once.
//
// The lock is a lease (package lease) on the session's row, whose holder is
// the id of the request running in it. It lives either in the shipped table
// (schema.SessionTable) or in lock columns added to your own session table
// — the shape of the article's chat_session — mapped through
// Config.Table and Config.Columns:
//
//	ALTER TABLE chat_session
//	  ADD COLUMN current_request_id VARCHAR(191) NULL,
//	  ADD COLUMN lock_token VARCHAR(36) NULL,
//	  ADD COLUMN lock_expires_at DATETIME(6) NULL,
//	  ADD COLUMN lock_generation BIGINT NOT NULL DEFAULT 0;
//
// schema.LeaseColumnsDDL gives that statement for each dialect, from the
// same lease.Table (names and columns) the Config maps.
//
// # States
//
//	       Acquire(request R)                 Touch (R, same token)
//	free ─────────────────────▶ held by R ◀───────────────┐
//	 ▲                           │   │  └─────────────────┘
//	 └──── Release (token) ──────┘   │ expires_at passes (R's process died)
//	                                 ▼
//	                        expired ── Acquire(request S) ──▶ held by S
//
// # Guarantees
//
// Acquire, Touch and Release are each one statement. A session held by a
// live request gives a *BusyError (lease.ErrHeld; HTTP 409 "session busy"),
// and changes nothing. Release and Touch are token-checked: a process that
// lost the session can neither free nor extend it for the new holder.
// Fence gives a check that a side effect's transaction can run.
// AcquireExisting never inserts a missing row, whatever AutoCreate says:
// it is the Acquire to use inside a transaction, where an insert would
// hold its locks until the commit.
//
// # What it does not do
//
// It does not renew itself (see package heartbeat) and does not queue
// waiting requests: a busy session is an answer, not a wait.
//
// # Failure handling
//
// Every error is one of lease's kinds; the session's own carry its key.
//
//   - *BusyError (lease.ErrHeld): another request runs; retry later (the
//     *lease.ConflictError it unwraps to says roughly when).
//   - *NotFoundError (lease.ErrNotFound): no lock row (create it with
//     Create, or set AutoCreate).
//   - lease.ErrLost from Touch or Release: the session was taken over;
//     stop.
//   - lease.ErrInvalid: bad input, refused before any SQL.
//   - Other errors are the driver's (lease.IsTransient, lease.IsUnavailable
//     say which may be retried): the outcome is unknown.
package session

// Package driver is the driver layer of the lease engine: the Driver
// interface that each supported database implements in a package of its
// own (internal/driver/mysql, internal/driver/postgres,
// internal/driver/sqlite), the plain types it is given and returns, and
// helpers two drivers share. Package engine picks one Driver per Lease,
// once, from the Lease's dialect, and asks it for everything that differs
// between databases; the drivers import nothing of engine.
//
// What a driver owns: the dialect's SQL text — identifiers, the database
// clock, placeholders, how a generation comes back, locking reads,
// upserts, row lists, and the whole statements only its dialect writes
// (PostgreSQL's data-modifying WITH statements, MySQL's multi-table
// UPDATE, SQLite's INSERT … SELECT); what its statements can do (Caps);
// the classification of its errors (duplicate key, retryable, transient,
// unavailable); and the first-use check of a database handle (Probe).
// The statements every dialect writes alike (an UPDATE's skeleton, a
// token-checked condition) are composed by engine from a driver's
// fragments, once per table and shape, so that an operation sends a
// built text and calls no driver.
//
// What a driver guarantees: a stateless value, safe for concurrent use;
// text built only from what it is given (validated identifiers, the
// engine's quoted text) and constants, never from values, which are
// always arguments; the same text for the same input, byte for byte, so
// that statements can be cached and pinned by tests; and error
// recognition through the methods or types of the database's driver
// errors without linking that database driver (only go-sql-driver/mysql,
// which the library links anyway, is imported).
//
// What it does not do: send lease statements (engine sends them, retries
// victims, and reads lost or held from the rows matched — a lost or held
// lease is never a database error), validate input (engine does, before
// any SQL), or hold state. Probe is the one method that talks to the
// database.
//
// How it fails: text methods cannot fail. Classify and UnavailableNode
// answer ok false for an error that is not theirs, so that the engine asks
// the next driver. Probe returns ErrColumnNotFound when the catalog does
// not show the expiry column, and otherwise the database's own error,
// which engine treats as "check again later" (or as proof of a wrong
// dialect, when another driver recognises it).
//
// The lease conformance suite (internal/testkit/conformance) is the driver
// suite: it runs unchanged on every driver through engine (see
// internal/engine's TestConformance), so a driver is correct when the
// suite passes on its database.
package driver

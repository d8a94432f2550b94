// Package mattn holds the tests that run rowlease on SQLite through
// mattn/go-sqlite3 (driver name "sqlite3", cgo), the second SQLite driver
// the library supports: the lease conformance suite, and the recognition of
// that driver's errors. It is a module of its own so that the cgo driver
// stays out of the requirements of github.com/rowlease/rowlease, which its
// users inherit; the library itself links no SQLite driver.
package mattn

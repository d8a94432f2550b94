// Package valid holds the input checks that more than one floor of
// rowlease makes, so that each is written once.
//
// Text checks text that takes part in a unique key (a session key, a
// client request id, a tool name) by engine.CheckText's rule, and names the
// package that refused it in the error: a caller of request or toolexec
// reads "request: …" or "toolexec: …", as if that package had checked it
// itself. DB refuses a nil database, typed nil pointers included, the same
// way.
//
// Guarantees: a refusal is a *engine.ValidationError (errors.Is
// lease.ErrInvalid), made before any SQL, and it never quotes the text.
// It checks nothing against a database.
package valid

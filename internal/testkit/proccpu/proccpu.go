// Package proccpu reads CPU time, for the benchmarks and the bench report
// that give the CPU per operation: this process's (Used: the client, with
// SQLite's engine, which runs in process) and a local database server's
// (Named: by process name, on Linux).
package proccpu

import "time"

// Used is the CPU time (user + system) this process has used so far, or
// 0 where the platform does not tell it.
func Used() time.Duration { return used() }

// Named is the CPU time (user + system) used so far by every process on
// this machine whose name (comm) is one of names, with the time of the
// children each has reaped: a PostgreSQL backend that exits moves its
// time into the postmaster's. It is 0 where the platform does not tell it
// (anything but Linux) and when no such process runs. Differences of two
// readings count in steps of 10 ms.
func Named(names ...string) time.Duration { return named(names) }

// ServerNames are the process names (comm) of a local database server, by
// dialect name ("postgres", "mysql"; SQLite has none: it runs in
// process), for Named.
var ServerNames = map[string][]string{
	"postgres": {"postgres"},
	"mysql":    {"mariadbd", "mysqld"},
}

package main

import (
	"time"

	"github.com/rowlease/rowlease/internal/proccpu"
	"github.com/rowlease/rowlease/lease"
)

// serverNames are the process names of a dialect's server: the report
// runs beside the throwaway servers of scripts/test.sh, the only ones on
// the machine. SQLite has none: its engine runs in this process and is in
// the client's CPU.
var serverNames = map[lease.Dialect][]string{
	lease.Postgres: {"postgres"},
	lease.MySQL:    {"mariadbd", "mysqld"},
}

// serverCPU is the CPU time used so far by d's server on this machine
// (proccpu.Named); 0 for SQLite and off Linux.
func serverCPU(d lease.Dialect) time.Duration {
	names := serverNames[d]
	if len(names) == 0 {
		return 0
	}
	return proccpu.Named(names...)
}

package main

import (
	"time"

	"github.com/rowlease/rowlease/internal/testkit/proccpu"
	"github.com/rowlease/rowlease/lease"
)

// serverCPU is the CPU time used so far by d's server on this machine
// (proccpu.Named): the report runs beside the throwaway servers of
// scripts/test.sh, the only ones there. It is 0 for SQLite, whose engine
// runs in this process and is in the client's CPU, and off Linux.
func serverCPU(d lease.Dialect) time.Duration {
	names := proccpu.ServerNames[d.String()]
	if len(names) == 0 {
		return 0
	}
	return proccpu.Named(names...)
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"

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

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// every Linux the report runs on).
const clockTick = 10 * time.Millisecond

// serverCPU is the CPU time (user + system) used so far by every process
// of d's server on this machine, with that of the children they have
// reaped: a PostgreSQL backend that exits moves its time into the
// postmaster's. It is 0 for SQLite and where /proc is not there.
func serverCPU(d lease.Dialect) time.Duration {
	names := serverNames[d]
	if len(names) == 0 {
		return 0
	}
	dirs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0
	}
	var ticks int64
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after
		// its closing parenthesis.
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open {
			continue
		}
		comm := string(b[open+1 : end])
		match := false
		for _, n := range names {
			match = match || comm == n
		}
		if !match {
			continue
		}
		f := bytes.Fields(b[end+1:])
		// After the comm: state is field 0, utime 11, stime 12, cutime
		// 13, cstime 14 (fields 14–17 of proc(5), counted from 1).
		if len(f) < 15 {
			continue
		}
		for _, i := range []int{11, 12, 13, 14} {
			v, err := strconv.ParseInt(string(f[i]), 10, 64)
			if err == nil {
				ticks += v
			}
		}
	}
	return time.Duration(ticks) * clockTick
}

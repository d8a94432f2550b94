//go:build linux

package proccpu

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// Linux).
const clockTick = 10 * time.Millisecond

func named(names []string) time.Duration {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0
	}
	var ticks int64
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended meanwhile
		}
		// pid (comm) state ppid …: comm may hold spaces and parentheses,
		// so it ends at the last closing parenthesis.
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open || !slices.Contains(names, string(b[open+1:end])) {
			continue
		}
		f := bytes.Fields(b[end+1:])
		// After comm: state is field 0; utime 11, stime 12, cutime 13,
		// cstime 14 (fields 14–17 of proc(5), counted from 1).
		if len(f) < 15 {
			continue
		}
		for _, i := range []int{11, 12, 13, 14} {
			if v, err := strconv.ParseInt(string(f[i]), 10, 64); err == nil {
				ticks += v
			}
		}
	}
	return time.Duration(ticks) * clockTick
}

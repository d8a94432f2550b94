// Package proccpu reads the CPU time this process has used, for the
// benchmarks and the bench report that give the client's CPU per
// operation (the database servers' CPU is not in it; SQLite's engine,
// which runs in process, is).
package proccpu

import "time"

// Used is the CPU time (user + system) this process has used so far, or
// 0 where the platform does not tell it.
func Used() time.Duration { return used() }

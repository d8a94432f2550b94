package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
)

// Environment variables in which scripts/test.sh names, for each
// throwaway server it started, a script that kills the server with
// SIGKILL and starts it again on the same data and port, returning once
// it answers.
const (
	MySQLRestartEnv    = "ROWLEASE_MYSQL_RESTART"
	PostgresRestartEnv = "ROWLEASE_POSTGRES_RESTART"
)

// Restarter returns a function that restarts the server of dialect d
// (kill -9, then start on the same data), or nil when no restart script
// is exported (SQLite has no server).
func Restarter(d engine.Dialect) func() error {
	var script string
	switch d {
	case engine.MySQL:
		script = os.Getenv(MySQLRestartEnv)
	case engine.Postgres:
		script = os.Getenv(PostgresRestartEnv)
	}
	if script == "" {
		return nil
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "bash", script).CombinedOutput()
		if err != nil {
			return fmt.Errorf("faults: restart %s: %w: %s", d, err, out)
		}
		return nil
	}
}

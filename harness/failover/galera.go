package failover

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DirEnv names the directory of the Galera cluster scripts/failover.sh
// started (scripts/galera-cluster.sh): node i's data in n<i>, its socket
// n<i>.sock, its pid file n<i>.pid, and start-node.sh.
const DirEnv = "ROWLEASE_GALERA_DIR"

// GaleraNodes breaks and mends the nodes of that cluster. Nodes are
// numbered from 0 here (n1 is node 0).
type GaleraNodes struct{ Dir string }

func (g GaleraNodes) sock(i int) string { return filepath.Join(g.Dir, fmt.Sprintf("n%d.sock", i+1)) }

// root runs one statement as root over node i's socket.
func (g GaleraNodes) root(ctx context.Context, i int, q string) (string, error) {
	out, err := exec.CommandContext(ctx, "mariadb", "--no-defaults", "-S", g.sock(i), "-uroot", "-N", "-B", "-e", q).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("node %d: %s: %v: %s", i, q, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// Kill kills node i's server with SIGKILL and waits until it is gone.
func (g GaleraNodes) Kill(i int) error {
	b, err := os.ReadFile(filepath.Join(g.Dir, fmt.Sprintf("n%d.pid", i+1)))
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	for syscall.Kill(pid, 0) == nil {
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// Start starts node i again on its data and returns once it is Synced
// (it catches up by IST from the others' gcache).
func (g GaleraNodes) Start(ctx context.Context, i int) error {
	out, err := exec.CommandContext(ctx, "bash", filepath.Join(g.Dir, "start-node.sh"), strconv.Itoa(i+1)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("start node %d: %v: %s", i, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Isolate cuts node i off from the others (gmcast.isolate=1: it drops
// its group-communication connections and accepts none) or lets it back
// (0). Its clients' connections stay open.
func (g GaleraNodes) Isolate(ctx context.Context, i int, on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	_, err := g.root(ctx, i, "SET GLOBAL wsrep_provider_options='gmcast.isolate="+v+"'")
	return err
}

// WaitSynced waits until node i is Synced in a primary component of
// size nodes.
func (g GaleraNodes) WaitSynced(ctx context.Context, i, size int) error {
	for {
		out, err := g.root(ctx, i, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ('wsrep_local_state_comment', 'wsrep_cluster_status', 'wsrep_cluster_size') ORDER BY VARIABLE_NAME")
		if err == nil {
			f := strings.Fields(out) // size, status, state
			if len(f) == 3 && f[0] == strconv.Itoa(size) && f[1] == "Primary" && f[2] == "Synced" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %d not synced (%q, %v): %w", i, out, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

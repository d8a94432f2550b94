//go:build failover

package failover

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestPGClusterFailover checks the harness itself, with no lease in the
// way: a writer commits numbered rows through the multi-host DSN and
// records each commit acknowledged; the primary is killed (in async mode
// after cutting the replication stream for a while) and a standby
// promoted, twice. In sync mode no acknowledged row is missing on the
// promoted primary; in async mode the rows acknowledged in the cut
// window are (that is what the crash run's async mode counts). Each
// step's time from the kill is logged.
func TestPGClusterFailover(t *testing.T) {
	bin := pgBin(t)
	modes := []string{"sync", "async"}
	if m := os.Getenv("FAILOVER_MODE"); m != "" {
		modes = []string{m}
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			synchronous := mode == "sync"
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			dir, err := os.MkdirTemp("/tmp", "rowlease-failover-pg-")
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if os.Getenv("FAILOVER_KEEP") != "" {
					t.Logf("failover: data and logs kept in %s", dir)
					return
				}
				os.RemoveAll(dir)
			}()
			_ = os.Chmod(dir, 0o755)
			c, err := NewPGCluster(ctx, bin, dir, synchronous, 10*time.Millisecond)
			if c != nil {
				defer c.Stop()
			}
			if err != nil {
				t.Fatal(err)
			}
			db, err := sql.Open("pgx", c.DSN())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.ExecContext(ctx, "CREATE TABLE acked (n BIGINT PRIMARY KEY)"); err != nil {
				t.Fatal(err)
			}
			lag := time.Duration(0)
			if !synchronous {
				lag = 300 * time.Millisecond
			}
			for k := range 2 {
				acked := writeUntil(ctx, t, db, c, lag)
				var present []int64
				rows, err := db.QueryContext(ctx, "SELECT n FROM acked")
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var n int64
					if err := rows.Scan(&n); err != nil {
						t.Fatal(err)
					}
					present = append(present, n)
				}
				rows.Close()
				have := map[int64]bool{}
				for _, n := range present {
					have[n] = true
				}
				lost := 0
				for _, n := range acked.ns {
					if !have[n] {
						lost++
					}
				}
				f := acked.f
				t.Logf("failover %s #%d (n%d promoted): %d commits acknowledged, %d lost; from the kill: processes gone %s, receivers stopped %s, promoted %s, other standby streams %s (restarted %v, cloned %v), a commit answered %s; re-cloning the dead node %s",
					mode, k+1, f.Promoted, len(acked.ns), lost, ms(f.Gone), ms(f.Stopped), ms(f.Promote), ms(f.Repointed), f.Restarted, f.Recloned, ms(f.Writable), ms(f.Rebuild))
				if synchronous && lost > 0 {
					t.Fatalf("synchronous replication lost %d acknowledged commits", lost)
				}
				if !synchronous && lost == 0 {
					t.Fatalf("no commit acknowledged in a %s cut of the replication stream was lost: the cut did not take", lag)
				}
			}
		})
	}
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }

type acked struct {
	ns []int64
	f  Failover
}

var next int64 // the rows' numbers, across failovers

// writeUntil commits rows one at a time, from one goroutine, while the
// primary is killed (after lag) and a standby promoted; it returns the
// rows whose commit was acknowledged.
func writeUntil(ctx context.Context, t *testing.T, db *sql.DB, c *PGCluster, lag time.Duration) acked {
	var out acked
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			next++
			if _, err := db.ExecContext(ctx, "INSERT INTO acked (n) VALUES ($1)", next); err == nil {
				out.ns = append(out.ns, next)
			} else {
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
	time.Sleep(500 * time.Millisecond)
	at, err := c.KillPrimary(lag)
	if err == nil {
		out.f, err = c.Promote(ctx, at)
	}
	// Write on the new primary a little, then stop.
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(fmt.Errorf("failover: %w", err))
	}
	return out
}

package failover

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"

	"github.com/rowlease/rowlease/internal/testkit/faults"
)

// PGCluster is a throwaway PostgreSQL primary with two streaming standbys
// on loopback, run from Dir with the binaries in Bin. Nodes are named n0,
// n1, n2 (their application_name on the primary); Primary is the index of
// the current primary.
type PGCluster struct {
	Bin, Dir string
	// Sync: synchronous_standby_names = 'ANY 1 (n0, n1, n2)' and
	// synchronous_commit = on (a primary is never its own standby, so
	// that is "any one of the two others"); otherwise asynchronous.
	Sync    bool
	Ports   [3]int
	Primary int
	// Latency, when set, delays the replication stream: each standby
	// reaches its primary through a proxy (package faults) that holds
	// every chunk that long, as a standby in another zone or region.
	Latency time.Duration
	proxies [3]*faults.Proxy
	runAs   []string
	gone    time.Time // when the processes KillPrimary killed were gone
}

// DSN returns the multi-host DSN a client uses: every node, and
// target_session_attrs=read-write, so that pgx connects to whichever is
// the primary.
func (c *PGCluster) DSN() string {
	hosts := make([]string, 3)
	for i, p := range c.Ports {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	return "postgres://rowlease:rowlease@" + strings.Join(hosts, ",") +
		"/rowlease?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
}

func (c *PGCluster) data(i int) string { return filepath.Join(c.Dir, fmt.Sprintf("n%d", i)) }

// NodeDSN is a DSN for node i alone, as the superuser over its socket.
func (c *PGCluster) NodeDSN(i int) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=2", c.Dir, c.Ports[i])
}

func (c *PGCluster) run(ctx context.Context, name string, args ...string) error {
	argv := append(append([]string(nil), c.runAs...), filepath.Join(c.Bin, name))
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = c.Dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// NewPGCluster initialises node 0 as the primary, with the rowlease role
// and database, and clones nodes 1 and 2 from it as standbys. Run as root,
// the servers run as the postgres user.
func NewPGCluster(ctx context.Context, bin, dir string, sync bool, latency time.Duration) (*PGCluster, error) {
	c := &PGCluster{Bin: bin, Dir: dir, Sync: sync, Latency: latency}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			return nil, errors.New("failover: running as root needs a postgres user")
		}
		c.runAs = []string{"runuser", "-u", "postgres", "--"}
		if err := exec.Command("chown", "postgres:", dir).Run(); err != nil {
			return nil, err
		}
	}
	for i := range c.Ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		c.Ports[i] = p
		if latency > 0 {
			px, err := faults.Listen("127.0.0.1:" + strconv.Itoa(p))
			if err != nil {
				return c, err
			}
			px.SetLatency(latency, 0)
			c.proxies[i] = px
		}
	}
	if err := c.run(ctx, "initdb", "-D", c.data(0), "-U", "postgres", "--auth-local=trust", "--auth-host=trust",
		// 1 MB WAL segments: a base backup forces a segment switch, and
		// the padding of a 16 MB segment takes seconds through the
		// delaying proxy, which forwards one chunk per delay.
		"--no-sync", "--wal-segsize=1", "-E", "UTF8", "--locale=C.UTF-8"); err != nil {
		return nil, err
	}
	ssn := "''"
	if sync {
		ssn = "'ANY 1 (n0, n1, n2)'"
	}
	conf := fmt.Sprintf(`listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
max_connections = 200
wal_level = replica
max_wal_senders = 10
wal_keep_size = 256MB
hot_standby = on
synchronous_commit = on
synchronous_standby_names = %s
wal_receiver_status_interval = 1s
wal_retrieve_retry_interval = 200ms
fsync = on
full_page_writes = on
`, c.Dir, ssn)
	f, err := os.OpenFile(filepath.Join(c.data(0), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString(conf)
	f.Close()
	if err != nil {
		return nil, err
	}
	hba := "local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\nlocal replication all trust\n"
	if err := os.WriteFile(filepath.Join(c.data(0), "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return nil, err
	}
	if err := c.start(ctx, 0); err != nil {
		return nil, err
	}
	db, err := sql.Open("pgx", c.NodeDSN(0))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	// No standby yet: these commits must not wait for one.
	db.SetMaxOpenConns(1)
	for _, q := range []string{"SET synchronous_commit = local", "CREATE ROLE rowlease LOGIN PASSWORD 'rowlease'", "CREATE DATABASE rowlease OWNER rowlease"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("failover: %s: %w", q, err)
		}
	}
	for _, i := range []int{1, 2} {
		if err := c.Clone(ctx, i); err != nil {
			return nil, err
		}
	}
	if err := c.WaitStreaming(ctx, 2); err != nil {
		return c, err
	}
	return c, c.waitCaughtUp(ctx, time.Minute)
}

func (c *PGCluster) start(ctx context.Context, i int) error {
	return c.run(ctx, "pg_ctl", "-D", c.data(i), "-l", c.data(i)+".log", "-w", "-t", "60",
		"-o", fmt.Sprintf("-p %d", c.Ports[i]), "start")
}

// Clone (re)makes node i a standby of the current primary: a fresh
// pg_basebackup (its old data, if any, is removed), then started.
func (c *PGCluster) Clone(ctx context.Context, i int) error {
	if _, err := os.Stat(filepath.Join(c.data(i), "postmaster.pid")); err == nil {
		_ = c.run(ctx, "pg_ctl", "-D", c.data(i), "-m", "immediate", "-w", "stop")
	}
	if err := os.RemoveAll(c.data(i)); err != nil {
		return err
	}
	if err := c.run(ctx, "pg_basebackup", "-D", c.data(i), "-h", "127.0.0.1", "-p", strconv.Itoa(c.Ports[c.Primary]),
		"-U", "postgres", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return err
	}
	if err := c.pointAt(i, c.Primary); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.data(i), "standby.signal"), nil, 0o600); err != nil {
		return err
	}
	c.chown(c.data(i))
	return c.start(ctx, i)
}

func (c *PGCluster) chown(path string) {
	if len(c.runAs) > 0 {
		_ = exec.Command("chown", "-R", "postgres:", path).Run()
	}
}

func (c *PGCluster) conninfo(primary, i int) string {
	addr := "127.0.0.1:" + strconv.Itoa(c.Ports[primary])
	if px := c.proxies[primary]; px != nil {
		addr = px.Addr()
	}
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("host=%s port=%s user=postgres application_name=n%d", host, port, i)
}

// pointAt writes node i's primary_conninfo (in postgresql.auto.conf, the
// file ALTER SYSTEM writes) to follow node primary.
func (c *PGCluster) pointAt(i, primary int) error {
	p := filepath.Join(c.data(i), "postgresql.auto.conf")
	b, err := os.ReadFile(p)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "primary_conninfo") {
			keep = append(keep, l)
		}
	}
	keep = append(keep, "primary_conninfo = '"+c.conninfo(primary, i)+"'")
	if err := os.WriteFile(p, []byte(strings.Join(keep, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	c.chown(p)
	return nil
}

// waitStreaming is WaitStreaming for at most d.
func (c *PGCluster) waitStreaming(ctx context.Context, n int, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return c.WaitStreaming(ctx, n)
}

// waitNoReceiver waits until standby i's WAL receiver no longer streams.
func (c *PGCluster) waitNoReceiver(ctx context.Context, i int) error {
	db, err := sql.Open("pgx", c.NodeDSN(i))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'").Scan(&n)
		if err == nil && n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("failover: standby %d still streaming (%v)", i, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// WaitStreaming waits until the primary sees n standbys streaming.
func (c *PGCluster) WaitStreaming(ctx context.Context, n int) error {
	db, err := sql.Open("pgx", c.NodeDSN(c.Primary))
	if err != nil {
		return err
	}
	defer db.Close()
	var got int
	for {
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_stat_replication WHERE state = 'streaming'").Scan(&got)
		if err == nil && got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("failover: %d standbys streaming, want %d: %v", got, n, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pids returns the postmaster's pid of node i and its children's.
func (c *PGCluster) pids(i int) []int {
	b, err := os.ReadFile(filepath.Join(c.data(i), "postmaster.pid"))
	if err != nil {
		return nil
	}
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return nil
	}
	out := []int{pm}
	kids, _ := exec.Command("ps", "-o", "pid=", "--ppid", strconv.Itoa(pm)).Output()
	for _, f := range strings.Fields(string(kids)) {
		if k, err := strconv.Atoi(f); err == nil {
			out = append(out, k)
		}
	}
	return out
}

// KillPrimary kills the primary's postmaster and every backend with
// SIGKILL, as a machine that dies, and waits until they are gone. With a
// lag (and a delaying proxy), the replication stream is cut for that long
// first — the standbys receive nothing more, while the primary, if
// asynchronous, still acknowledges commits — and the WAL held in the
// proxy is dropped at the kill: what the primary committed in that window
// exists only on it, as with a standby that lags by lag when its primary
// dies. It returns the instant of the kill.
func (c *PGCluster) KillPrimary(lag time.Duration) (time.Time, error) {
	ps := c.pids(c.Primary)
	if len(ps) == 0 {
		return time.Time{}, errors.New("failover: no primary running")
	}
	px := c.proxies[c.Primary]
	if px != nil && lag > 0 {
		px.Blackhole()
		time.Sleep(lag)
	}
	at := time.Now()
	for _, p := range ps {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	for _, p := range ps {
		for alive(p) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	c.gone = time.Now()
	if px != nil && lag > 0 {
		px.ResetAll() // drops what the blackhole held
		px.Heal()
	}
	return at, nil
}

// alive reports whether process p exists and is not a zombie: a killed
// process whose parent died waits to be reaped by process 1, which in a
// container may take seconds, but it holds no socket and no file any
// more.
func alive(p int) bool {
	if syscall.Kill(p, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
	if err != nil {
		return !os.IsNotExist(err)
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) == 0 || f[0] != "Z"
}

// receiveLSN returns how far node i, a standby, has received and flushed
// WAL, in bytes.
func (c *PGCluster) receiveLSN(ctx context.Context, i int) (int64, error) {
	db, err := sql.Open("pgx", c.NodeDSN(i))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int64
	err = db.QueryRowContext(ctx, "SELECT COALESCE(pg_wal_lsn_diff(GREATEST(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()), '0/0'), 0)::bigint").Scan(&n)
	return n, err
}

// Failover times one promotion, each duration from the kill.
type Failover struct {
	Promoted int           // the node promoted
	Gone     time.Duration // the killed processes are gone
	Stopped  time.Duration // no standby receives WAL any more (so the most advanced can be told)
	Promote  time.Duration // pg_ctl promote returned: the new primary takes writes
	// Repointed: the other standby streams from the new primary (in sync
	// mode, what its commits wait for); zero when it was cloned again.
	Repointed time.Duration
	Writable  time.Duration // a commit answered on the new primary (in sync mode: a standby confirmed it)
	Rebuild   time.Duration // re-cloning the killed node, after Writable (not from the kill)
	// Restarted: a reload did not make the other standby stream from the
	// new primary in time, and it was restarted.
	Restarted bool
	// Recloned: the other standby could not follow the promoted one
	// (it had WAL the promoted one lacked) and was cloned again.
	Recloned bool
}

// Promote runs after KillPrimary: it promotes the standby that received
// the most WAL (so that in sync mode it has every acknowledged commit, and
// the other standby can follow it), re-points the other standby at it
// (primary_conninfo and a reload, which restarts its WAL receiver; it
// follows the new timeline, recovery_target_timeline being latest; if it
// does not stream within a few seconds, a restart; one that cannot
// follow — it has WAL the promoted one lacks — is cloned again, and
// Recloned says so), waits until a commit is answered on it, then
// re-clones the killed node as a standby of the new primary. start is
// the instant of the kill.
func (c *PGCluster) Promote(ctx context.Context, start time.Time) (Failover, error) {
	f := Failover{Gone: c.gone.Sub(start)}
	dead := c.Primary
	var s []int
	for i := range 3 {
		if i != dead {
			s = append(s, i)
		}
	}
	// WAL still in flight to a standby (in the kernel, in a delaying
	// proxy) may land after a first look: wait until neither standby
	// streams any more, then compare.
	for _, i := range s {
		if err := c.waitNoReceiver(ctx, i); err != nil {
			return f, err
		}
	}
	f.Stopped = time.Since(start)
	l0, err0 := c.receiveLSN(ctx, s[0])
	l1, err1 := c.receiveLSN(ctx, s[1])
	if err := errors.Join(err0, err1); err != nil {
		return f, err
	}
	next, other := s[0], s[1]
	if l1 > l0 {
		next, other = s[1], s[0]
	}
	if err := c.run(ctx, "pg_ctl", "-D", c.data(next), "-w", "-t", "60", "promote"); err != nil {
		return f, err
	}
	f.Promoted = next
	f.Promote = time.Since(start)
	c.Primary = next
	// In sync mode commits wait for a synchronous standby, the other one:
	// re-point it first. In async mode the new primary is probed first.
	if c.Sync {
		if err := c.repoint(ctx, other, start, &f); err != nil {
			return f, err
		}
	}
	if err := c.probeCommit(ctx); err != nil {
		return f, err
	}
	f.Writable = time.Since(start)
	if !c.Sync {
		if err := c.repoint(ctx, other, start, &f); err != nil {
			return f, err
		}
	}
	t := time.Now()
	if err := c.Clone(ctx, dead); err != nil {
		return f, err
	}
	if err := c.waitStreaming(ctx, 2, time.Minute); err != nil {
		return f, err
	}
	if err := c.waitCaughtUp(ctx, time.Minute); err != nil {
		return f, err
	}
	f.Rebuild = time.Since(t)
	return f, nil
}

// waitCaughtUp waits, for at most d, until both standbys have flushed the
// WAL the primary had written when it was called. A re-clone forces a
// WAL segment switch, whose padding reaches the other standby through its
// delaying proxy (for seconds with 16 MB segments; 1 MB here): a failover
// that began then would time that catch-up, not the failover.
func (c *PGCluster) waitCaughtUp(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	db, err := sql.Open("pgx", c.NodeDSN(c.Primary))
	if err != nil {
		return err
	}
	defer db.Close()
	var lsn string
	if err := db.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return err
	}
	for {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_stat_replication WHERE state = 'streaming' AND flush_lsn >= $1::pg_lsn", lsn).Scan(&n)
		if err == nil && n >= 2 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("failover: %d standbys flushed %s: %v", n, lsn, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// repoint makes standby i follow the current primary: primary_conninfo
// and a reload; a restart if it does not stream within 5s; a fresh clone
// if it still does not within 30s (it cannot follow the new timeline).
func (c *PGCluster) repoint(ctx context.Context, i int, start time.Time, f *Failover) error {
	if err := c.pointAt(i, c.Primary); err != nil {
		return err
	}
	if err := c.run(ctx, "pg_ctl", "-D", c.data(i), "reload"); err != nil {
		return err
	}
	if c.waitStreaming(ctx, 1, 5*time.Second) == nil {
		f.Repointed = time.Since(start)
		return nil
	}
	f.Restarted = true
	if err := c.run(ctx, "pg_ctl", "-D", c.data(i), "-l", c.data(i)+".log", "-m", "fast", "-w", "-t", "60", "restart",
		"-o", fmt.Sprintf("-p %d", c.Ports[i])); err != nil {
		return err
	}
	if c.waitStreaming(ctx, 1, 30*time.Second) == nil {
		f.Repointed = time.Since(start)
		return nil
	}
	f.Recloned = true
	return c.Clone(ctx, i)
}

// probeCommit commits one transaction on the primary (waiting, in sync
// mode, for a standby to confirm it).
func (c *PGCluster) probeCommit(ctx context.Context) error {
	db, err := sql.Open("pgx", c.NodeDSN(c.Primary))
	if err != nil {
		return err
	}
	defer db.Close()
	for {
		_, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS failover_probe (n int)")
		if err == nil {
			_, err = db.ExecContext(ctx, "INSERT INTO failover_probe VALUES (1)")
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("failover: probe commit: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop stops every node (immediate shutdown) and the proxies.
func (c *PGCluster) Stop() {
	defer func() {
		for _, px := range c.proxies {
			if px != nil {
				px.Close()
			}
		}
	}()
	for i := range 3 {
		if _, err := os.Stat(filepath.Join(c.data(i), "postmaster.pid")); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = c.run(ctx, "pg_ctl", "-D", c.data(i), "-m", "immediate", "-w", "stop")
			cancel()
		}
	}
}

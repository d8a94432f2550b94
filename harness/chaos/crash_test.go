package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// openCrashEnv opens a database with the lock tables and the effects table.
func openCrashEnv(t testing.TB, ctx context.Context, d string) *Env {
	t.Helper()
	var e *Env
	for _, dd := range testdb.Dialects() {
		if dd.String() == d {
			e = OpenEnv(t, dd)
		}
	}
	if err := schema.Apply(ctx, e.Direct, e.Dialect); err != nil {
		t.Fatal(err)
	}
	if err := CreateEffectsTable(ctx, e.Direct); err != nil {
		t.Fatal(err)
	}
	return e
}

func reportCrash(t testing.TB, rep CrashReport) {
	t.Helper()
	t.Logf("%d requests, %d answered, %d processes, %d kills landed at %v; errors answered (resent): %v; %d duplicates, %d unanswered, %d still held, %d stuck",
		rep.Requests, rep.Answered, rep.Processes, rep.TotalKills(), rep.Kills, rep.Refusals, rep.Duplicates, rep.Unanswered, rep.StillHeld, rep.StuckTools)
	for _, e := range rep.Errors {
		t.Error(e)
	}
	if rep.Duplicates+rep.Unanswered+rep.StillHeld+rep.StuckTools > 0 {
		t.Fatal("an invariant of the crash matrix does not hold")
	}
}

// TestCrashMatrix kills worker processes that run the whole request flow
// (an in-database tool and an external one) at random points, resends
// their requests from other workers, and checks: no duplicate side
// effects, every request answered, no lease held past its TTL, no tool
// execution stuck.
func TestCrashMatrix(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			e := openCrashEnv(t, ctx, d.String())
			rep, err := RunCrash(ctx, CrashConfig{Env: e, Sessions: 3, PerSession: 3, Procs: 3, KillOneIn: 2, Kills: 8,
				TTL: 800 * time.Millisecond, MaxRounds: 30, Log: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			reportCrash(t, rep)
			if rep.TotalKills() == 0 {
				t.Fatal("no worker was killed")
			}
			// What a failover test counts losses with.
			if len(rep.Grants) == 0 || len(rep.Intents) == 0 {
				t.Fatalf("grants (%d) and intents (%d) the workers acted under were not recorded", len(rep.Grants), len(rep.Intents))
			}
		})
	}
}

// stopped reports whether process pid is stopped (SIGSTOP).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'T'
}

// TestPausedHolder stops a worker with SIGSTOP while it holds its locks —
// inside the in-database tool's open transaction (MySQL, PostgreSQL; on
// SQLite that transaction holds the only write lock, so there it stops
// before the tool), and after the external effect acted but before its
// result is recorded — until another worker has taken the request over
// and answered it; then continues it. Everything the resumed worker
// tries is refused or fenced: it answers nothing, and no effect is
// committed or performed twice.
func TestPausedHolder(t *testing.T) {
	for _, d := range testdb.Dialects() {
		points := []string{StageToolTx, StageActed}
		if d == lease.SQLite {
			points = []string{StageAgent, StageActed}
		}
		for _, point := range points {
			t.Run(d.String()+"/"+point, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				e := openCrashEnv(t, ctx, d.String())
				recv := NewReceiver()
				defer recv.Close()
				runPaused(t, ctx, e, recv, point, "p1")
				rep := CrashReport{Requests: 1, Answered: 1, Kills: map[string]int{}}
				if err := checkInvariants(ctx, e, recv, 800*time.Millisecond, &rep); err != nil {
					t.Fatal(err)
				}
				reportCrash(t, rep)
			})
		}
	}
}

// runPaused stops a worker with SIGSTOP at point while it runs request
// crid, has others take the request over and answer it, continues the
// stopped worker and checks that it answers nothing (its writes refused or
// fenced).
func runPaused(t testing.TB, ctx context.Context, e *Env, recv *Receiver, point, crid string) {
	t.Helper()
	ttl := 800 * time.Millisecond
	a, err := startWorker(e, recv, ttl, []string{"s0/" + crid}, plan{}, plan{stage: point})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.cmd.Process.Kill(); <-a.done }()
	if !a.waitLine(ctx, "pause ") {
		t.Fatalf("the worker did not reach %s: %q", point, a.snapshot())
	}
	for !stopped(a.cmd.Process.Pid) {
		if !sleepCtx(ctx, 2*time.Millisecond) {
			t.Fatal("the worker never stopped")
		}
	}
	// Resend until another worker answers. On SQLite the stopped
	// worker may hold the database's only write lock (a statement
	// of its, a heartbeat renewal say, was in flight when it
	// stopped): then every writer waits until it continues.
	answered, blocked := false, false
	var b *proc
	for try := 0; try < 10 && !answered && !blocked; try++ {
		b, err = startWorker(e, recv, ttl, []string{"s0/" + crid}, plan{}, plan{})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.done:
			answered = b.last("answer "+crid+" ") != ""
		case <-time.After(30 * time.Second): // generous: a loaded machine starts workers slowly
			if e.Dialect != lease.SQLite {
				t.Fatalf("a resend hangs while the first holder is stopped: %q", b.snapshot())
			}
			blocked = true
			t.Logf("sqlite: the stopped holder holds the write lock; the resend waits for it")
		}
	}
	if !answered && !blocked {
		t.Fatal("the request was never answered while its first holder was stopped")
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	<-a.done
	if blocked {
		<-b.done
		answered = b.last("answer "+crid+" ") != ""
		for try := 0; try < 10 && !answered; try++ {
			b, err = startWorker(e, recv, ttl, []string{"s0/" + crid}, plan{}, plan{})
			if err != nil {
				t.Fatal(err)
			}
			<-b.done
			answered = b.last("answer "+crid+" ") != ""
		}
		if !answered {
			t.Fatal("the request was never answered after its first holder continued")
		}
	}
	if l := a.last("answer "); l != "" {
		t.Fatalf("the resumed holder answered: %q", l)
	}
	if l := a.last("error " + crid + " "); !strings.HasPrefix(l, "error "+crid+" takenover") {
		t.Fatalf("the resumed holder ended with %q, want takenover (lines %q)", l, a.snapshot())
	}
}

// TestInvariantsCatch plants each fault the crash matrix looks for and
// expects checkInvariants to count it: the check can fail.
func TestInvariantsCatch(t *testing.T) {
	ctx := context.Background()
	e := openCrashEnv(t, ctx, "sqlite")
	recv := NewReceiver()
	defer recv.Close()
	for _, key := range []string{"k1", "k2"} {
		req, _ := http.NewRequest(http.MethodPost, recv.URL(), strings.NewReader(`{"req":"m1","n":1}`))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, q := range []string{
		"INSERT INTO " + EffectsTable + " (id, crid, n, exec_id) VALUES ('a', 'm1', 1, 'x'), ('b', 'm1', 1, 'y')",
		"INSERT INTO rowlease_session (session_key, holder, token, expires_at, generation) VALUES ('s', 'h', 't', 9999999999999999, 1)",
		"INSERT INTO rowlease_tool_execution (id, session_key, request_id, tool_name, arguments_hash, idempotency_key, status) " +
			"VALUES ('e', 's', 'r', 'post', 'h', 'i', 'started')",
	} {
		if _, err := e.Direct.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	rep := CrashReport{Kills: map[string]int{}}
	if err := checkInvariants(ctx, e, recv, 10*time.Millisecond, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Duplicates != 2 || rep.StillHeld != 1 || rep.StuckTools != 1 {
		t.Fatalf("duplicates %d (want 2), still held %d (want 1), stuck %d (want 1): %q", rep.Duplicates, rep.StillHeld, rep.StuckTools, rep.Errors)
	}
}

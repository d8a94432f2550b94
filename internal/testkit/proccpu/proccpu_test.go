package proccpu

import (
	"crypto/sha256"
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestUsedGrows: on a unix system the reading grows while the process
// computes.
func TestUsedGrows(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" || runtime.GOOS == "plan9" {
		t.Skip("no getrusage here: Used is 0")
	}
	before := Used()
	sum := sha256.Sum256(nil)
	for Used() == before {
		sum = sha256.Sum256(sum[:])
	}
	if Used() < before {
		t.Fatalf("CPU time went back: %v then %v", before, Used())
	}
}

// TestNamedGrows: on Linux, Named of this process's own name grows while
// it computes, and a name no process has reads 0.
func TestNamedGrows(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Named reads /proc: Linux only")
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSpace(string(comm))
	before := Named(name)
	sum := sha256.Sum256(nil)
	for Named(name) == before {
		sum = sha256.Sum256(sum[:])
	}
	if Named(name) < before {
		t.Fatalf("CPU time went back: %v then %v", before, Named(name))
	}
	if got := Named("no such process"); got != 0 {
		t.Fatalf("Named of a name no process has = %v, want 0", got)
	}
}

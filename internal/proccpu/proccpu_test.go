package proccpu

import (
	"crypto/sha256"
	"runtime"
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

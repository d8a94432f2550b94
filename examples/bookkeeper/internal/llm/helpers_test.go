package llm

// The tests use only the standard library, so they do not depend on
// testify's transitive modules (go.yaml.in/yaml/v3) being listed in the
// module's go.sum.

import (
	"encoding/json"
	"testing"
	"time"
)

// testNow is Friday 2025-03-14 10:00 UTC.
var testNow = time.Date(2025, 3, 14, 10, 0, 0, 0, time.UTC)

func fixedNow() time.Time { return testNow }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(b)
}

func equal[T comparable](t *testing.T, got, want T, what string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

package sqlscript

import (
	"slices"
	"strconv"
	"testing"
)

func TestDepths(t *testing.T) {
	t.Parallel()
	const s = `a (b, 'c)(,', (d)), 'it''s (' e)`
	var got []string
	Depths(s, 0, func(i, depth int) bool {
		if c := s[i]; c == '(' || c == ')' || c == ',' {
			got = append(got, string(c)+strconv.Itoa(depth))
		}
		return true
	})
	// The parentheses and commas inside the literals are not visited; the
	// last ')' closes nothing and stands at -1.
	want := []string{"(0", ",1", ",1", "(1", ")1", ")0", ",0", ")-1"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}

	var visited []int
	Depths(s, 3, func(i, depth int) bool {
		visited = append(visited, i)
		return len(visited) < 2
	})
	if !slices.Equal(visited, []int{3, 4}) {
		t.Fatalf("from 3, stopping after two: visited %v", visited)
	}
}

package retry

import (
	"context"
	"testing"
	"time"
)

func TestDelayDoublesWithinItsBounds(t *testing.T) {
	for attempt := 1; attempt <= 14; attempt++ {
		base := Base << min(attempt-1, 10)
		for range 200 {
			d := Delay(attempt)
			if d < base/2 || d >= base/2+base {
				t.Fatalf("attempt %d: delay %v outside [%v, %v)", attempt, d, base/2, base/2+base)
			}
		}
	}
}

func TestJitterStaysInItsHalf(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 2, 3, time.Millisecond, time.Second} {
		for range 200 {
			j := Jitter(d)
			if d <= 1 {
				if j != d {
					t.Fatalf("Jitter(%v) = %v, want %v", d, j, d)
				}
				continue
			}
			if j < d/2 || j >= d {
				t.Fatalf("Jitter(%v) = %v outside [%v, %v)", d, j, d/2, d)
			}
		}
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	if <-done {
		t.Fatal("Sleep reported a whole hour passed after its context was cancelled")
	}
	if Backoff(ctx, 1) {
		t.Fatal("Backoff on an ended context reported true")
	}
	if Sleep(ctx, 0) {
		t.Fatal("Sleep(0) on an ended context reported true")
	}
	if !Sleep(context.Background(), 0) || !Sleep(context.Background(), time.Microsecond) {
		t.Fatal("Sleep on a live context reported false")
	}
}

package worker

import (
	"context"
	"testing"
	"time"
)

// The backoff of a failing Redis call starts at 50 ms and doubles to 2 s,
// no more: a loop backed off further after an outage pushed every window
// opened meanwhile that much later once Redis was back.
func TestBackoffDoublesTo2s(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // each wait returns at once
	b := newBackoff()
	want := 50 * time.Millisecond
	for range 10 {
		if b.next != want {
			t.Fatalf("step %v, want %v", b.next, want)
		}
		b.wait(ctx)
		want = min(2*want, 2*time.Second)
	}
	b.reset()
	if b.next != 50*time.Millisecond {
		t.Fatalf("after reset the step is %v, want 50ms", b.next)
	}
}

// Each wait is drawn from the upper half of its step, so replicas cut off
// by one outage do not retry in step when it ends.
func TestBackoffWaitsAreJittered(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 50 {
		b := newBackoff()
		b.step()
		b.step() // the third step is 200 ms
		d := b.step()
		if d < 100*time.Millisecond || d > 200*time.Millisecond {
			t.Fatalf("a wait of %v at the 200 ms step, want 100ms..200ms", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("50 waits at the 200 ms step took %d values, want them spread", len(seen))
	}
}

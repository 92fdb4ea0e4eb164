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

package worker

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff spaces retries of a failing Redis call: 50 ms doubling to 2 s,
// with jitter so replicas do not retry in step after an outage.
type backoff struct{ next time.Duration }

func newBackoff() *backoff { return &backoff{next: 50 * time.Millisecond} }

func (b *backoff) reset() { b.next = 50 * time.Millisecond }

func (b *backoff) wait(ctx context.Context) { sleep(ctx, b.step()) }

// step is the next wait, somewhere in the upper half of the current step,
// and doubles the step up to 2 s.
func (b *backoff) step() time.Duration {
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(b.next*2, 2*time.Second)
	return d
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

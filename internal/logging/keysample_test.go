package logging

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
)

// Kitex logs from every connection's goroutine at once: a flood of one
// format from many of them is still one line, then one counting the rest.
// (The sampler's map is shared: unguarded, this is a data race, and under
// load Go's "concurrent map writes" ends the process.)
func TestKlogSamplesConcurrentLines(t *testing.T) {
	k, logs, clock := observedKlog(zapcore.InfoLevel)
	const f, goroutines, each = "KITEX: processing request error, remoteAddr=%v, error=%s", 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				k.Errorf(f, g*each+i, "refused")
			}
		})
	}
	wg.Wait()
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d lines for %d refusals from %d goroutines in one instant, want 1", n, goroutines*each, goroutines)
	}
	*clock = clock.Add(time.Second)
	k.Errorf(f, -1, "refused")
	if got := logs.All()[1].ContextMap()["suppressed_since_last"]; got != int64(goroutines*each-1) {
		t.Fatalf("a second later: suppressed_since_last %v, want %d", got, goroutines*each-1)
	}
}

// Past the bound, with every key busy, the sampler holds no more keys: a
// new key's lines are written unsampled, each of them, and none is kept.
func TestKeySamplerBoundHoldsWhenEveryKeyIsBusy(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := fullSampler(&now)
	for i := range 500 {
		for range 2 {
			if ok, _, _ := s.pass("new " + strconv.Itoa(i)); !ok {
				t.Fatalf("new key %d past the bound left out: want it written, unsampled", i)
			}
		}
	}
	if len(s.seen) > maxSampledKeys {
		t.Fatalf("%d keys held past the bound of %d", len(s.seen), maxSampledKeys)
	}
}

// The sampler times lines by the monotonic clock, so that a step back of
// the host's clock (NTP) does not hold a key's lines back for the step:
// the readings it takes carry Go's monotonic reading.
func TestKeySamplerReadsTheMonotonicClock(t *testing.T) {
	if at := newKeySampler().now(); !strings.Contains(at.String(), " m=") {
		t.Fatalf("the sampler's clock read %v, with no monotonic reading: a wall-clock step back would hold lines back", at)
	}
}

// A format's lines are held back for a whole second after the last one
// written, not less; the line that then counts them keeps its own level.
func TestKlogHoldsBackForASecondAndCountsAtTheLinesLevel(t *testing.T) {
	k, logs, clock := observedKlog(zapcore.InfoLevel)
	const f = "KITEX: processing request error, remoteAddr=%v, error=%s"
	first := *clock
	k.Errorf(f, 1, "refused")
	*clock = first.Add(999 * time.Millisecond)
	k.Errorf(f, 2, "refused")
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d lines 999 ms apart, want 1", n)
	}
	*clock = first.Add(time.Second)
	k.Errorf(f, 3, "refused")
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines a second after the first, want 2", n)
	}
	last := logs.All()[1]
	if last.Level != zapcore.ErrorLevel || last.ContextMap()["suppressed_since_last"] != int64(1) {
		t.Fatalf("the counting line: %s, %v; want error, counting 1", last.Level, last.ContextMap())
	}
}

// fullSampler is a keySampler that reads its time from *now and holds
// maxSampledKeys keys, each written once at *now.
func fullSampler(now *time.Time) *keySampler {
	s := newKeySampler()
	s.now = func() time.Time { return *now }
	for i := range maxSampledKeys {
		s.pass(strconv.Itoa(i))
	}
	return s
}

// Past the bound, a key idle for exactly a second with nothing to report
// is forgotten, as its next line would be written then anyway.
func TestKeySamplerBoundForgetsAKeyIdleExactlyASecond(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := fullSampler(&now)
	now = now.Add(time.Second)
	s.pass("new")
	if ok, _, _ := s.pass("new"); ok {
		t.Fatal("a new key's second line in the same instant written: the keys idle for a second were kept, and it went unsampled")
	}
}

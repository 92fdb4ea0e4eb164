package logging

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// The service's own thinned lines say how many of them were left out, as
// Kitex's and netpoll's do (suppressed_since_last): an outage that drops 71
// stale windows in a second wrote one "window dropped unpublished" line,
// quantity 1, and nothing in the log said it stood for 71. It says when
// the first of them came too (suppressed_since), as Kitex's lines do.
func TestSampledLineSaysHowManyWereLeftOut(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	burst := time.Now()
	mono := burst
	l := sampled(zap.New(core), nil, func() time.Time { return mono })
	for i := range 71 {
		mono = burst.Add(time.Duration(i) * time.Millisecond)
		l.Warn("window dropped unpublished: older than window.stale")
	}
	mono = burst.Add(1100 * time.Millisecond)
	l.Warn("window dropped unpublished: older than window.stale")
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines written, want 2", n)
	}
	got, ok := logs.All()[1].ContextMap()["suppressed_since_last"]
	if !ok || got != int64(70) {
		t.Fatalf("second line's suppressed_since_last = %v (present %v), want 70: fields %v", got, ok, logs.All()[1].ContextMap())
	}
	if since, _ := logs.All()[1].ContextMap()["suppressed_since"].(time.Time); !since.Equal(burst.Add(time.Millisecond)) {
		t.Errorf("second line's suppressed_since = %v, want the first suppressed line's time %v",
			logs.All()[1].ContextMap()["suppressed_since"], burst.Add(time.Millisecond))
	}
}

// A sampled line that follows no suppressed one carries no count: an
// on-call reading "suppressed_since_last": 0 on every line would take it
// for a burst that never came.
func TestSampledLineWithNothingLeftOutHasNoCount(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	at := time.Unix(1_700_000_000, 0)
	l := sampled(zap.New(core), nil, func() time.Time { return at })
	l.Warn("redis operation failed; retrying")
	at = at.Add(2 * time.Second)
	l.Warn("redis operation failed; retrying")
	if logs.Len() != 2 {
		t.Fatalf("%d lines, want 2", logs.Len())
	}
	for i, e := range logs.All() {
		if m := e.ContextMap(); len(m) != 0 {
			t.Errorf("line %d, none left out before it: fields %v, want none", i, m)
		}
	}
}

// The same for netpoll's lines.
func TestNetpollLineWithNothingLeftOutHasNoCount(t *testing.T) {
	w, logs, clock := observedNetpoll(zapcore.DebugLevel)
	nl := netpollLogger(w)
	nl.Printf("NETPOLL: accept conn failed: %v", "too many open files")
	*clock = clock.Add(2 * time.Second)
	nl.Printf("NETPOLL: accept conn failed: %v", "too many open files")
	if logs.Len() != 2 {
		t.Fatalf("%d lines, want 2", logs.Len())
	}
	for i, e := range logs.All() {
		if m := e.ContextMap(); len(m) != 0 {
			t.Errorf("line %d, none left out before it: fields %v, want none", i, m)
		}
	}
}

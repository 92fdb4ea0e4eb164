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
// quantity 1, and nothing in the log said it stood for 71.
func TestSampledLineSaysHowManyWereLeftOut(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	mono := time.Now()
	l := sampled(zap.New(core), nil, func() time.Time { return mono })
	for range 71 {
		l.Warn("window dropped unpublished: older than window.stale")
	}
	mono = mono.Add(1100 * time.Millisecond)
	l.Warn("window dropped unpublished: older than window.stale")
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines written, want 2", n)
	}
	got, ok := logs.All()[1].ContextMap()["suppressed_since_last"]
	if !ok || got != int64(70) {
		t.Fatalf("second line's suppressed_since_last = %v (present %v), want 70: fields %v", got, ok, logs.All()[1].ContextMap())
	}
}

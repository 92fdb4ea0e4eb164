package logging

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A repeated warning is thinned to one a second; debug lines, which an
// operator turned on to see each request, are all written.
func TestSampledThinsOnlyInfoAndAbove(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := Sampled(zap.New(core), nil).With(zap.String("loop", "x"))
	for range 5 {
		l.Debug("reported")
		l.Warn("redis operation failed; retrying")
		l.Error("report failed")
	}
	if n := logs.FilterMessage("reported").Len(); n != 5 {
		t.Errorf("%d of 5 debug lines written", n)
	}
	for _, msg := range []string{"redis operation failed; retrying", "report failed"} {
		if n := logs.FilterMessage(msg).Len(); n != 1 {
			t.Errorf("%q written %d times in a second, want 1", msg, n)
		}
	}
	if got := logs.All()[0].ContextMap()["loop"]; got != "x" {
		t.Errorf("fields lost: %v", logs.All()[0].ContextMap())
	}
	core, logs = observer.New(zapcore.InfoLevel)
	Sampled(zap.New(core), nil).Debug("reported")
	if logs.Len() != 0 {
		t.Error("a debug line written at level info")
	}
}

// JSON logs write durations with their unit ("3.2s"), not as bare numbers.
func TestJSONDurationsCarryTheirUnit(t *testing.T) {
	out := captureStderr(t, func() {
		l := mustNew(t, "info", "json")
		l.Info("started", zap.Duration("window", 3200*time.Millisecond))
		_ = l.Sync()
	})
	if !strings.Contains(out, `"window":"3.2s"`) {
		t.Fatalf("log line %s, want \"window\":\"3.2s\"", out)
	}
}

// What Sampled leaves out is counted, by logger, from 0: only lines it
// thins, not debug lines, nor lines below the logger's level.
func TestSampledCountsWhatItLeavesOut(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	counts := map[string]int{}
	count := func(logger string, n int) { counts[logger] += n }
	l := Sampled(zap.New(core).Named("worker"), count)
	if n, ok := counts["worker"]; !ok || n != 0 {
		t.Fatalf("counts %v once built, want worker at 0", counts)
	}
	for range 5 {
		l.Debug("reported")
		l.Warn("redis read failed; retrying", zap.String("op", "read"))
		l.With(zap.Int("shard", 1)).Warn("redis read failed; retrying")
	}
	l.Warn("redis flush_script failed; retrying")
	if logs.Len() != 2 {
		t.Fatalf("%d lines written, want 2: %v", logs.Len(), logs.All())
	}
	if counts["worker"] != 9 || len(counts) != 1 {
		t.Errorf("counts %v, want worker: 9", counts)
	}
	Sampled(zap.New(core), count).Warn("x")
	if _, ok := counts[""]; !ok {
		t.Errorf("counts %v: the unnamed logger's count not made", counts)
	}
}

// steppedClock is a wall clock (zapcore.Clock) set by the test.
type steppedClock struct{ t time.Time }

func (c *steppedClock) Now() time.Time                         { return c.t }
func (c *steppedClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// A step back of the host's clock (NTP) does not hold lines back: zap's
// sampler timed them by their wall-clock time, so after a step back of
// 2 minutes a repeated error was left out for those 2 minutes. A second
// passed on the monotonic clock lets the next line through, whatever the
// wall clock says.
func TestSampledIgnoresStepsOfTheWallClock(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	wall := &steppedClock{t: time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)}
	mono := time.Now()
	l := sampled(zap.New(core, zap.WithClock(wall)), nil, func() time.Time { return mono })
	l.Warn("redis read failed; retrying")
	wall.t = wall.t.Add(-2 * time.Minute) // the host's clock stepped back
	mono = mono.Add(1100 * time.Millisecond)
	l.Warn("redis read failed; retrying")
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines written, want 2: a second passed since the first", n)
	}
	mono = mono.Add(100 * time.Millisecond)
	l.Warn("redis read failed; retrying")
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines written, want the third, within a second of the second, left out", n)
	}
	// Each level is sampled on its own, as zap's sampler did: a message
	// logged at warn does not hide the same message at error.
	l.Error("redis read failed; retrying")
	if n := logs.Len(); n != 3 {
		t.Fatalf("%d lines written, want the error line of a message just warned of", n)
	}
}

// A line left out costs no allocation: the handler logs a refused
// request's reason through Sampled, at every request while Redis is down.
func TestSampledLeavesLinesOutWithoutAllocating(t *testing.T) {
	l := Sampled(zap.New(zapcore.NewNopCore()).WithOptions(zap.WrapCore(func(zapcore.Core) zapcore.Core {
		core, _ := observer.New(zapcore.InfoLevel)
		return core
	})), nil)
	l.Warn("report refused: redis unavailable")
	if n := testing.AllocsPerRun(100, func() { l.Warn("report refused: redis unavailable") }); n != 0 {
		t.Fatalf("%v allocations per line left out, want 0", n)
	}
}

// Past 1024 keys, those idle for a second with nothing to report are
// forgotten, so a new key is still sampled.
func TestKeySamplerForgetsIdleKeys(t *testing.T) {
	now := time.Now()
	s := fullSampler(&now)
	now = now.Add(2 * time.Second)
	if ok, _, _ := s.pass("new"); !ok {
		t.Fatal("a new key's first line left out")
	}
	if ok, _, _ := s.pass("new"); ok {
		t.Fatal("a new key's second line within a second written: past the bound, nothing is sampled")
	}
	if len(s.seen) != 1 {
		t.Fatalf("%d keys kept, want the idle ones forgotten", len(s.seen))
	}
}

// mustNew is New(level, format), or the test's end.
func mustNew(t *testing.T, level, format string) *zap.Logger {
	t.Helper()
	l, err := New(level, format)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

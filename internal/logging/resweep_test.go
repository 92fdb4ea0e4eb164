package logging

// Tests pinning what a second mutation sweep of the package found no test
// for.

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A netpoll line below log.level is no line left out, as for Kitex's
// (TestKitexCountsNoLineBelowLogLevel): at error, netpoll's warnings are
// neither written nor counted in combo_log_lines_suppressed_total.
// (Mutant: Write's ce == nil return dropped, which samples and counts
// them.)
func TestNetpollCountsNoLineBelowLogLevel(t *testing.T) {
	w, logs, _ := observedNetpoll(zapcore.ErrorLevel)
	var c counted
	w.CountSuppressed(c.suppressed)
	nl := netpollLogger(w)
	for range 5 {
		nl.Printf("NETPOLL: accept conn failed: %v", "too many open files")
	}
	if n, _ := c.total("netpoll"); n != 0 || logs.Len() != 0 {
		t.Errorf("5 warnings at log.level error: %d counted left out, %d written; want 0, 0", n, logs.Len())
	}
}

// Debug lines are never thinned, so a repeated debug line is no line left
// out either, when log.level is debug. (Mutant: messageSampler.Check's
// Enabled check dropped: the info-and-above sampler then samples debug
// lines that the debug branch writes, and counts them as left out.)
func TestSampledCountsNoDebugLineAsLeftOut(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	counts := map[string]int{}
	l := Sampled(zap.New(core).Named("worker"), func(logger string, n int) { counts[logger] += n })
	for range 5 {
		l.Debug("reported")
	}
	if n := logs.FilterMessage("reported").Len(); n != 5 || counts["worker"] != 0 {
		t.Errorf("5 debug lines at level debug: %d written, %d counted left out; want 5, 0", n, counts["worker"])
	}
}

// Only go-redis's Sentinel lookups canceled because another Sentinel
// answered are news: another line ending in "context canceled" (a dial
// given up on) is a warning. (Mutant: the "sentinel: GetMasterAddrByName "
// prefix check dropped.)
func TestRedisLoggerWarnsOfOtherCanceledLines(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	r := Redis(zap.New(core))
	r.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, context.Canceled)
	if all := logs.All(); len(all) != 1 || all[0].Level != zapcore.WarnLevel {
		t.Fatalf("%v, want one warning", all)
	}
}

// New writes from the level it is given (log.level), in either format:
// debug lines at debug, none of info at warn. (Mutant: the level
// argument parsed but the config left at zap's default, info.)
func TestNewWritesFromTheLevelGiven(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		for _, c := range []struct {
			level   string
			wrote   string
			leftOut string
		}{{"debug", "a debug line", ""}, {"warn", "a warn line", "an info line"}} {
			out := captureStderr(t, func() {
				l := mustNew(t, c.level, format)
				l.Debug("a debug line")
				l.Info("an info line")
				l.Warn("a warn line")
				_ = l.Sync()
			})
			if !strings.Contains(out, c.wrote) || c.leftOut != "" && strings.Contains(out, c.leftOut) {
				t.Errorf("New(%q, %q) wrote %q: want %q in it and not %q", c.level, format, out, c.wrote, c.leftOut)
			}
		}
	}
}

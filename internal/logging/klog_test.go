package logging

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// observedKlog is a Klog logger writing to an observer from lvl up, on a
// clock the test moves.
func observedKlog(lvl zapcore.Level) (*klogger, *observer.ObservedLogs, *time.Time) {
	core, logs := observer.New(lvl)
	k := Klog(zap.New(core)).(*klogger)
	clock := time.Unix(1_700_000_000, 0)
	k.sample.now = func() time.Time { return clock }
	return k, logs, &clock
}

// Kitex's line for each refused request names its peer; sampled by the
// format, a flood of them is one line a second, which counts the rest.
func TestKlogSamplesByFormat(t *testing.T) {
	k, logs, clock := observedKlog(zapcore.DebugLevel)
	const refused = "KITEX: processing request error, remoteAddr=%v, error=%s"
	for i := range 100 {
		k.CtxErrorf(context.Background(), refused, i, "refused")
	}
	k.Warnf("KITEX: another line %d", 1)
	for range 3 {
		k.Debugf("KITEX: debug %d", 2)
	}
	if n := logs.FilterMessageSnippet("processing request error").Len(); n != 1 {
		t.Fatalf("%d lines for 100 refusals in one instant, want 1", n)
	}
	if logs.FilterMessageSnippet("another line").Len() != 1 || logs.FilterMessageSnippet("debug").Len() != 3 {
		t.Fatalf("other formats or debug lines thinned: %v", logs.All())
	}
	*clock = clock.Add(time.Second)
	k.CtxErrorf(context.Background(), refused, 100, "refused")
	lines := logs.FilterMessageSnippet("processing request error").All()
	if len(lines) != 2 || lines[1].ContextMap()["suppressed_since_last"] != int64(99) {
		t.Fatalf("a second later: %d lines, last %v; want 2, the second counting 99 suppressed", len(lines), lines[len(lines)-1].ContextMap())
	}
}

// Kitex logs through klog's package functions; the caller each line names
// is the Kitex code that logged, on every path.
func TestKlogCallerIsTheLoggingCode(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	klog.SetLogger(Klog(zap.New(core, zap.AddCaller())))
	t.Cleanup(func() { klog.SetLogger(klog.DefaultLogger()) })
	klog.CtxErrorf(context.Background(), "ctx %d", 1)
	klog.Errorf("formatted %d", 2)
	klog.Error("plain")
	for _, e := range logs.All() {
		if !strings.HasSuffix(e.Caller.File, "klog_test.go") {
			t.Errorf("%q: caller %s, want this test", e.Message, e.Caller)
		}
	}
	if logs.Len() != 3 {
		t.Fatalf("%d lines, want 3", logs.Len())
	}
}

// Past the bound on sampled keys, a new key is written unsampled and the
// others keep sampling, their counts intact.
func TestKlogBoundKeepsCounts(t *testing.T) {
	k, logs, clock := observedKlog(zapcore.InfoLevel)
	const busy = "KITEX: busy %d"
	for i := range 10 {
		k.Errorf(busy, i)
	}
	for i := range 2000 {
		k.Info(fmt.Sprint("distinct ", i))
	}
	*clock = clock.Add(time.Second)
	k.Errorf(busy, 10)
	lines := logs.FilterMessageSnippet("busy").All()
	if len(lines) != 2 || lines[1].ContextMap()["suppressed_since_last"] != int64(9) {
		t.Fatalf("busy lines %d, last %v: want 2, counting 9 suppressed", len(lines), lines[len(lines)-1].ContextMap())
	}
	if n := logs.FilterMessageSnippet("distinct").Len(); n != 2000 {
		t.Fatalf("%d of 2000 distinct lines written", n)
	}
}

// The count of a burst's suppressed lines may come with a line of the same
// format hours later; it says when the burst was, or the count would be
// read as about the line it comes with.
func TestKlogDatesSuppressedCount(t *testing.T) {
	k, logs, clock := observedKlog(zapcore.InfoLevel)
	const f = "KITEX: processing request error, remoteAddr=%v, error=%s"
	burst := *clock
	k.Errorf(f, 0, "refused")
	for i := range 99 {
		*clock = burst.Add(time.Duration(i+1) * time.Millisecond)
		k.Errorf(f, i+1, "refused")
	}
	*clock = burst.Add(time.Hour)
	k.Errorf(f, 100, "refused")
	lines := logs.All()
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	got := lines[1].ContextMap()
	if got["suppressed_since_last"] != int64(99) {
		t.Errorf("an hour later: %v, want 99 suppressed", got)
	}
	if since, _ := got["suppressed_since"].(time.Time); !since.Equal(burst.Add(time.Millisecond)) {
		t.Errorf("an hour later: suppressed_since %v, want the first suppressed line's time %v", got["suppressed_since"], burst.Add(time.Millisecond))
	}

	// A second burst is dated by its own first suppressed line.
	*clock = clock.Add(10 * time.Millisecond)
	second := *clock
	k.Errorf(f, 101, "refused")
	*clock = clock.Add(time.Second)
	k.Errorf(f, 102, "refused")
	got = logs.All()[logs.Len()-1].ContextMap()
	if since, _ := got["suppressed_since"].(time.Time); got["suppressed_since_last"] != int64(1) || !since.Equal(second) {
		t.Errorf("second burst: %v, want 1 suppressed since %v", got, second)
	}
	if _, ok := lines[0].ContextMap()["suppressed_since"]; ok {
		t.Errorf("the first line has suppressed_since, with nothing suppressed")
	}
}

// Kitex's lines are the service logger's named "kitex", as netpoll's are
// named "netpoll": a log query for the RPC layer's refusals selects them
// by that name.
func TestKlogLinesAreNamedKitex(t *testing.T) {
	k, logs, _ := observedKlog(zapcore.DebugLevel)
	k.Errorf("KITEX: processing request error, remoteAddr=%v", "127.0.0.1:1")
	k.Warn("KITEX: x")
	for _, e := range logs.All() {
		if e.LoggerName != "kitex" {
			t.Errorf("%q: logger %q, want kitex", e.Message, e.LoggerName)
		}
	}
	if logs.Len() != 2 {
		t.Fatalf("%d lines, want 2", logs.Len())
	}
}

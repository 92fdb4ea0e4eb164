package logging

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Info lines are thinned like warnings, and written once: the debug core
// covers debug only, the sampler info and above.
func TestSampledThinsInfoLinesAndWritesEachOnce(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := Sampled(zap.New(core), nil)
	for range 5 {
		l.Info("stream trimmed")
	}
	if n := logs.FilterMessage("stream trimmed").Len(); n != 1 {
		t.Fatalf("%d of 5 info lines in a second written, want 1", n)
	}
}

// Kitex's info lines are sampled by format too, as its warnings are.
func TestKlogSamplesInfoLines(t *testing.T) {
	k, logs, _ := observedKlog(zapcore.DebugLevel)
	for i := range 5 {
		k.Infof("KITEX: server listen at addr=%d", i)
		k.CtxNoticef(context.Background(), "KITEX: notice %d", i)
	}
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines for 5 info and 5 notice lines of two formats in one instant, want 2: %v", n, logs.All())
	}
}

// Each klog method writes at its level: Trace and Debug at debug, Info and
// Notice at info, Warn at warn, Error and Fatal at error.
func TestKlogLevels(t *testing.T) {
	k, logs, clock := observedKlog(zapcore.DebugLevel)
	ctx := context.Background()
	cases := []struct {
		name string
		log  func(string)
		want zapcore.Level
	}{
		{"Trace", func(m string) { k.Trace(m) }, zapcore.DebugLevel},
		{"Debug", func(m string) { k.Debug(m) }, zapcore.DebugLevel},
		{"Info", func(m string) { k.Info(m) }, zapcore.InfoLevel},
		{"Notice", func(m string) { k.Notice(m) }, zapcore.InfoLevel},
		{"Warn", func(m string) { k.Warn(m) }, zapcore.WarnLevel},
		{"Error", func(m string) { k.Error(m) }, zapcore.ErrorLevel},
		{"Fatal", func(m string) { k.Fatal(m) }, zapcore.ErrorLevel},
		{"Tracef", func(m string) { k.Tracef("%s", m) }, zapcore.DebugLevel},
		{"Debugf", func(m string) { k.Debugf("%s", m) }, zapcore.DebugLevel},
		{"Infof", func(m string) { k.Infof("%s", m) }, zapcore.InfoLevel},
		{"Noticef", func(m string) { k.Noticef("%s", m) }, zapcore.InfoLevel},
		{"Warnf", func(m string) { k.Warnf("%s", m) }, zapcore.WarnLevel},
		{"Errorf", func(m string) { k.Errorf("%s", m) }, zapcore.ErrorLevel},
		{"Fatalf", func(m string) { k.Fatalf("%s", m) }, zapcore.ErrorLevel},
		{"CtxTracef", func(m string) { k.CtxTracef(ctx, "%s", m) }, zapcore.DebugLevel},
		{"CtxDebugf", func(m string) { k.CtxDebugf(ctx, "%s", m) }, zapcore.DebugLevel},
		{"CtxInfof", func(m string) { k.CtxInfof(ctx, "%s", m) }, zapcore.InfoLevel},
		{"CtxNoticef", func(m string) { k.CtxNoticef(ctx, "%s", m) }, zapcore.InfoLevel},
		{"CtxWarnf", func(m string) { k.CtxWarnf(ctx, "%s", m) }, zapcore.WarnLevel},
		{"CtxErrorf", func(m string) { k.CtxErrorf(ctx, "%s", m) }, zapcore.ErrorLevel},
		{"CtxFatalf", func(m string) { k.CtxFatalf(ctx, "%s", m) }, zapcore.ErrorLevel},
	}
	for _, c := range cases {
		*clock = clock.Add(time.Hour)
		c.log("line of " + c.name)
		got := logs.FilterMessage("line of " + c.name).All()
		if len(got) != 1 || got[0].Level != c.want {
			t.Errorf("%s: %v, want one line at %s", c.name, got, c.want)
		}
	}
}

// Past the bound on keys, a key idle for over a second keeps its count of
// suppressed lines: only keys with nothing to report are forgotten.
func TestKeySamplerBoundKeepsCountsOfIdleKeys(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := newKeySampler()
	s.now = func() time.Time { return now }
	for range 10 {
		s.pass("busy")
	}
	now = now.Add(2 * time.Second)
	for i := range 1100 {
		s.pass(strconv.Itoa(i))
	}
	if ok, n, _ := s.pass("busy"); !ok || n != 9 {
		t.Fatalf("busy after the bound: written %v, %d suppressed; want written, counting 9", ok, n)
	}
}

// Past the bound, keys written less than a second ago are not forgotten:
// their next line within the second is still left out.
func TestKeySamplerBoundForgetsOnlyIdleKeys(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := fullSampler(&now)
	if ok, _, _ := s.pass("new"); !ok {
		t.Fatal("a new key's line left out at the bound")
	}
	if ok, _, _ := s.pass("0"); ok {
		t.Fatal("a key written in this instant written again: forgotten at the bound while not idle")
	}
}

// The process logger does not sample: start-up and shutdown lines are all
// written, however many share a message (zap's production default
// thinned past 100 a second).
func TestNewDoesNotSample(t *testing.T) {
	out := captureStderr(t, func() {
		l := mustNew(t, "info", "json")
		for i := range 300 {
			l.Info("shard ready", zap.Int("shard", i))
		}
		_ = l.Sync()
	})
	if n := strings.Count(out, `"msg":"shard ready"`); n != 300 {
		t.Fatalf("%d of 300 lines written", n)
	}
}

// Error lines carry no stack of their own, in either format (zap adds one
// at error in production, at warn in development); one that asks for its
// stack (a recovered panic's) has it.
func TestNewAddsNoStackToErrorLines(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		out := captureStderr(t, func() {
			l := mustNew(t, "info", format)
			l.Warn("consumer group missing, created again")
			l.Error("window lost unpublished")
			l.Error("recovered panic in the flush loop", zap.Stack("stack"))
			_ = l.Sync()
		})
		if n := strings.Count(out, "logging.TestNewAddsNoStackToErrorLines.func1"); n != 1 {
			t.Errorf("%s: the test's frame appears in %d stacks, want 1 (the panic line's own):\n%s", format, n, out)
		}
	}
}

// go-redis's lines are warnings, sampled by their text: the same line
// repeated per connection attempt during an outage is one a second.
func TestRedisLoggerWarnsSampled(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	r := Redis(zap.New(core))
	for range 5 {
		r.Printf(context.Background(), "redis: dial %s failed: %s", "10.0.0.1:6379", "connection refused")
	}
	r.Printf(context.Background(), "redis: discarding bad PubSub connection: %s", "EOF")
	all := logs.All()
	if len(all) != 2 {
		t.Fatalf("%d lines, want 2 (one per message in a second): %v", len(all), all)
	}
	for _, e := range all {
		if e.Level != zapcore.WarnLevel || e.LoggerName != "go-redis" {
			t.Errorf("%q: level %s, logger %q; want warn, go-redis", e.Message, e.Level, e.LoggerName)
		}
	}
}

// go-redis's Sentinel client's routine news is logged at info: a healthy
// start with Sentinel printed two warnings. Its failures stay warnings.
func TestRedisLoggerSaysSentinelNewsAtInfo(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	r := Redis(zap.New(core))
	ctx := context.Background()
	r.Printf(ctx, "sentinel: selected addr=%s masterAddr=%s", "127.0.0.1:26379", "127.0.0.1:6379")
	r.Printf(ctx, "sentinel: new master=%q addr=%q", "combo", "127.0.0.1:6380")
	r.Printf(ctx, "sentinel: discovered new sentinel=%q for master=%q", "x", "combo")
	r.Printf(ctx, "sentinel: ignore addr for master=%q", "other")
	// Canceled because another Sentinel answered first: news too.
	r.Printf(ctx, "sentinel: GetMasterAddrByName addr=%s, master=%q failed: %s", "127.0.0.1:26380", "combo", context.Canceled)
	r.Printf(ctx, "sentinel: GetMasterAddrByName name=%q failed: %s", "combo", "i/o timeout")
	want := []zapcore.Level{zapcore.InfoLevel, zapcore.InfoLevel, zapcore.InfoLevel, zapcore.InfoLevel, zapcore.InfoLevel, zapcore.WarnLevel}
	all := logs.All()
	if len(all) != len(want) {
		t.Fatalf("%d lines, want %d: %v", len(all), len(want), all)
	}
	for i, e := range all {
		if e.Level != want[i] {
			t.Errorf("%q at %s, want %s", e.Message, e.Level, want[i])
		}
	}
}

// A single suppressed netpoll line is counted on the next one written.
func TestNetpollWriterCountsOneSuppressedLine(t *testing.T) {
	w, logs, clock := observedNetpoll(zapcore.DebugLevel)
	nl := netpollLogger(w)
	first := *clock
	nl.Printf("NETPOLL: accept conn failed: %v", "too many open files")
	nl.Printf("NETPOLL: accept conn failed: %v", "too many open files")
	*clock = clock.Add(time.Second)
	nl.Printf("NETPOLL: accept conn failed: %v", "too many open files")
	if logs.Len() != 2 {
		t.Fatalf("%d lines, want 2", logs.Len())
	}
	got := logs.All()[1].ContextMap()
	if since, _ := got["suppressed_since"].(time.Time); got["suppressed_since_last"] != int64(1) || !since.Equal(first) {
		t.Fatalf("%v, want 1 suppressed since %v", got, first)
	}
}

// A sampled logger's With fields reach its info-and-above lines, not only
// its debug ones (settingswatch's "consumer" is added this way), and the
// lines of a With logger share the parent's one-a-second budget.
func TestSampledWithFieldsReachSampledLevels(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	at := time.Unix(1_700_000_000, 0) // one second for every line: no stall lets a third through
	parent := sampled(zap.New(core), nil, func() time.Time { return at })
	l := parent.With(zap.String("consumer", "replica-a"))
	l.Warn("settings differ")
	l.Error("settings unreadable")
	parent.Warn("settings differ") // same message, within the second: thinned
	if logs.Len() != 2 {
		t.Fatalf("%d lines written, want 2: %v", logs.Len(), logs.All())
	}
	for _, e := range logs.All() {
		if got := e.ContextMap()["consumer"]; got != "replica-a" {
			t.Errorf("%s line %q: consumer %v, want replica-a (fields %v)", e.Level, e.Message, got, e.ContextMap())
		}
	}
}

// JSON logs carry "ts" as an ISO 8601 string (README's example line), not
// zap's epoch-seconds float.
func TestJSONTimeIsISO8601(t *testing.T) {
	out := captureStderr(t, func() {
		l := mustNew(t, "info", "json")
		l.Info("started")
		_ = l.Sync()
	})
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &line); err != nil {
		t.Fatalf("log line %q: %v", out, err)
	}
	ts, ok := line["ts"].(string)
	if !ok || !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d{4})$`).MatchString(ts) {
		t.Fatalf("ts %#v in %s, want an ISO 8601 string", line["ts"], out)
	}
}

// File descriptors with a 0 in them are left out of a netpoll line's key
// like any other digits.
func TestNetpollKeyLeavesOutEveryDigit(t *testing.T) {
	a, b := netpollKey("NETPOLL: netFD[10] close error: x"), netpollKey("NETPOLL: netFD[7] close error: y")
	if a != b {
		t.Errorf("keys %q and %q, want one", a, b)
	}
}

// Only log.LstdFlags's date is trimmed: a line that does not start with
// one is kept whole.
func TestTrimLogDateKeepsWhatIsNotADate(t *testing.T) {
	for _, s := range []string{
		"2024/01/02 15:04:05 NETPOLL: x",
	} {
		if got := string(trimLogDate([]byte(s))); got != "NETPOLL: x" {
			t.Errorf("trimLogDate(%q) = %q, want %q", s, got, "NETPOLL: x")
		}
	}
	for _, s := range []string{
		"NETPOLL: accept conn failed: x",
		"abcd/ef/gh ij:kl:mn NETPOLL: x",
		"2024-01-02T15:04:05 NETPOLL: x",
		"2024/01/02 15:04:0",
	} {
		if got := string(trimLogDate([]byte(s))); got != s {
			t.Errorf("trimLogDate(%q) = %q, want it whole", s, got)
		}
	}
}

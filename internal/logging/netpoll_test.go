package logging

import (
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// netpollLogger is a log.Logger as netpoll makes one for its
// Config.LoggerOutput.
func netpollLogger(w io.Writer) *log.Logger { return log.New(w, "", log.LstdFlags) }

// observedNetpoll is a NetpollWriter writing to an observer from lvl up,
// on a clock the test moves.
func observedNetpoll(lvl zapcore.Level) (*NetpollWriter, *observer.ObservedLogs, *time.Time) {
	core, logs := observer.New(lvl)
	w := NewNetpollWriter()
	w.SetLogger(zap.New(core, zap.AddCaller()))
	clock := time.Unix(1_700_000_000, 0)
	w.sample.now = func() time.Time { return clock }
	return w, logs, &clock
}

// captureStderr runs f with os.Stderr a pipe, and returns what f wrote.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	defer func() { os.Stderr = old }()
	f()
	w.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// netpoll's lines are the service's logger's: at warn, named netpoll,
// without log's date, the caller netpoll's code. After an accept fails
// for want of file descriptors, netpoll logs a line per connection it
// takes, each naming its peer: those are one line a second, which counts
// the rest and dates them.
func TestNetpollWriterLogsThroughZapSampled(t *testing.T) {
	w, logs, clock := observedNetpoll(zapcore.DebugLevel)
	nl := netpollLogger(w)
	stderr := captureStderr(t, func() {
		nl.Printf("NETPOLL: accept conn failed: %v", "too many open files")
		for i := range 50 {
			nl.Println("NETPOLL: re-accept conn success:", fmt.Sprintf("127.0.0.1:%d", 39000+i))
		}
		for i := range 5 {
			nl.Printf("NETPOLL: re-accept conn failed, err=[%s] and next retrytime=%dms", "accept4: too many open files", 10*i)
		}
		nl.Printf("NETPOLL: netFD[%d] close error: %s", 12, "bad file descriptor")
		nl.Printf("NETPOLL: netFD[%d] close error: %s", 13, "bad file descriptor")
	})
	if stderr != "" {
		t.Errorf("written to stderr with a logger set: %q", stderr)
	}
	want := map[string]int{
		"NETPOLL: accept conn failed: too many open files":                                          1,
		"NETPOLL: re-accept conn success: 127.0.0.1:39000":                                          1,
		"NETPOLL: re-accept conn failed, err=[accept4: too many open files] and next retrytime=0ms": 1,
		"NETPOLL: netFD[12] close error: bad file descriptor":                                       1,
	}
	got := map[string]int{}
	for _, e := range logs.All() {
		got[e.Message]++
		if e.Level != zapcore.WarnLevel || e.LoggerName != "netpoll" {
			t.Errorf("%q: level %s, logger %q; want warn, netpoll", e.Message, e.Level, e.LoggerName)
		}
		if !strings.HasSuffix(e.Caller.File, "netpoll_test.go") {
			t.Errorf("%q: caller %s, want the code that logged (this test)", e.Message, e.Caller)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("lines in one instant:\n got %v\nwant %v", got, want)
	}

	start := *clock
	*clock = clock.Add(time.Second)
	nl.Println("NETPOLL: re-accept conn success:", "127.0.0.1:40000")
	last := logs.All()[logs.Len()-1]
	if last.Message != "NETPOLL: re-accept conn success: 127.0.0.1:40000" {
		t.Fatalf("a second later: %q not written", "re-accept conn success")
	}
	if since, _ := last.ContextMap()["suppressed_since"].(time.Time); last.ContextMap()["suppressed_since_last"] != int64(49) || !since.Equal(start) {
		t.Errorf("a second later: %v; want 49 suppressed since %v", last.ContextMap(), start)
	}
}

// log.level decides: at error, netpoll's warnings are not written, to the
// logger or to stderr.
func TestNetpollWriterFollowsLogLevel(t *testing.T) {
	w, logs, _ := observedNetpoll(zapcore.ErrorLevel)
	stderr := captureStderr(t, func() {
		netpollLogger(w).Printf("NETPOLL: accept conn failed: %v", "too many open files")
	})
	if logs.Len() != 0 || stderr != "" {
		t.Errorf("at level error: %v logged, %q on stderr; want nothing", logs.All(), stderr)
	}

	// From the service's own logger, built by New, as JSON.
	var l *zap.Logger
	stderr = captureStderr(t, func() {
		var err error
		if l, err = New("warn", "json"); err != nil {
			t.Fatal(err)
		}
		w := NewNetpollWriter()
		w.SetLogger(l)
		netpollLogger(w).Printf("NETPOLL: accept conn failed: %v", "too many open files")
		_ = l.Sync()
	})
	if !strings.HasPrefix(stderr, `{"level":"warn","ts":`) || !strings.Contains(stderr, `"logger":"netpoll"`) ||
		!strings.Contains(stderr, `"msg":"NETPOLL: accept conn failed: too many open files"`) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("with New(warn, json): %q, want one JSON line at warn", stderr)
	}
}

// Before main has a logger (netpoll takes its writer in an init
// function), lines go to stderr as netpoll writes them.
func TestNetpollWriterWithoutLoggerWritesStderr(t *testing.T) {
	w := NewNetpollWriter()
	stderr := captureStderr(t, func() {
		netpollLogger(w).Printf("NETPOLL: accept conn failed: %v", "too many open files")
	})
	if !strings.HasSuffix(stderr, " NETPOLL: accept conn failed: too many open files\n") || trimLogDate([]byte(stderr))[0] != 'N' {
		t.Errorf("stderr %q, want netpoll's own dated line", stderr)
	}
	w.SetLogger(zap.NewNop())
	w.SetLogger(nil)
	if stderr := captureStderr(t, func() { netpollLogger(w).Print("NETPOLL: again") }); !strings.HasSuffix(stderr, " NETPOLL: again\n") {
		t.Errorf("after SetLogger(nil): stderr %q", stderr)
	}
}

func TestNetpollKeyLeavesOutWhatVaries(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"NETPOLL: re-accept conn success: 127.0.0.1:39384", "NETPOLL: re-accept conn success: [::1]:1"},
		{"NETPOLL: accept conn failed: too many open files", "NETPOLL: accept conn failed: accept4: bad file descriptor"},
		{"NETPOLL: re-accept conn failed, err=[too many open files] and next retrytime=10ms", "NETPOLL: re-accept conn failed, err=[x] and next retrytime=1000ms"},
		{"NETPOLL: netFD[12] close error: x", "NETPOLL: netFD[7] close error: y"},
		{"NETPOLL: readall(fd=3)=0 before close: EOF", "NETPOLL: readall(fd=12)=40 before close: reset"},
		{"NETPOLL: operator has critical problem! event=1 operator=&{12}", "NETPOLL: operator has critical problem! event=4 operator=&{3}"},
	} {
		if ka, kb := netpollKey(c.a), netpollKey(c.b); ka != kb {
			t.Errorf("%q and %q: keys %q and %q, want one", c.a, c.b, ka, kb)
		}
	}
	kinds := []string{
		"NETPOLL: accept conn failed: x", "NETPOLL: re-accept conn success: x", "NETPOLL: re-accept conn failed, err=[x]",
		"NETPOLL: detach listener fd failed: x", "NETPOLL: netFD close failed: x", "NETPOLL: netFD[1] close error: x",
		"NETPOLL: poller close failed: x\n",
	}
	seen := map[string]string{}
	for _, k := range kinds {
		if other, ok := seen[netpollKey(k)]; ok {
			t.Errorf("%q and %q share key %q", k, other, netpollKey(k))
		}
		seen[netpollKey(k)] = k
	}
}

// log.LstdFlags's date is trimmed whatever its digits: left on a line
// with a 9 in it, the date would also be the line's sampling key
// ("// :: NETPOLL"), and every kind of netpoll line would share one.
func TestTrimLogDateTakesEveryDigit(t *testing.T) {
	for _, s := range []string{"2019/09/29 19:59:59 NETPOLL: x", "2000/10/01 00:00:00 NETPOLL: x", "2345/06/78 12:34:56 NETPOLL: x"} {
		if got := string(trimLogDate([]byte(s))); got != "NETPOLL: x" {
			t.Errorf("trimLogDate(%q) = %q, want %q", s, got, "NETPOLL: x")
		}
	}
}

// Every digit, 9 too, is left out of a netpoll line's key: a file
// descriptor of 9 and one of 7 are one kind of line.
func TestNetpollKeyLeavesOutTheDigitNine(t *testing.T) {
	for _, fd := range []string{"9", "19", "99", "1234567890"} {
		if a, b := netpollKey("NETPOLL: netFD["+fd+"] close error: x"), netpollKey("NETPOLL: netFD[7] close error: y"); a != b {
			t.Errorf("fd %s: keys %q and %q, want one", fd, a, b)
		}
	}
}

package logging

import (
	"io"
	"os"
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
	l := Sampled(zap.New(core)).With(zap.String("loop", "x"))
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
	Sampled(zap.New(core)).Debug("reported")
	if logs.Len() != 0 {
		t.Error("a debug line written at level info")
	}
}

// JSON logs write durations with their unit ("3.2s"), not as bare numbers.
func TestJSONDurationsCarryTheirUnit(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	l, err := New("info", "json")
	os.Stderr = old
	if err != nil {
		t.Fatal(err)
	}
	l.Info("started", zap.Duration("window", 3200*time.Millisecond))
	_ = l.Sync()
	w.Close()
	out, _ := io.ReadAll(r)
	if !strings.Contains(string(out), `"window":"3.2s"`) {
		t.Fatalf("log line %s, want \"window\":\"3.2s\"", out)
	}
}

package main

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/cloudwego/kitex/pkg/klog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/internal/logging"
)

// Kitex's and netpoll's loggers are the process's, installed in main
// before run makes its metrics: run counts their thinned lines in its
// registry (a flood of refused connections is thinned in Kitex's logger
// above all), the netpoll count at 0 from the start.
func TestKitexAndNetpollThinnedLinesAreCounted(t *testing.T) {
	old := klog.DefaultLogger()
	core, _ := observer.New(zapcore.InfoLevel) // a level, where a Nop logger has none
	klog.SetLogger(logging.Klog(zap.New(core)))
	t.Cleanup(func() { klog.SetLogger(old) })
	s := startService(t, options{})

	for range 5 {
		klog.Errorf("KITEX: refused connection from %s (test)", "10.0.0.1:5000")
	}
	text := scrape(t, s)
	if want := `combo_log_lines_suppressed_total{logger="netpoll"} 0`; !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `$`).MatchString(text) {
		t.Errorf("/metrics lacks %q", want)
	}
	m := regexp.MustCompile(`(?m)^combo_log_lines_suppressed_total\{logger="kitex"\} (\d+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal(`/metrics lacks combo_log_lines_suppressed_total{logger="kitex"}`)
	}
	// Five lines of one format, microseconds apart: four left out, fewer
	// only if a second passed between two of them (more if Kitex thinned
	// lines of its own meanwhile, the test's clients' among them).
	if n, _ := strconv.Atoi(m[1]); n < 1 {
		t.Errorf(`combo_log_lines_suppressed_total{logger="kitex"} = %d after 5 lines of one format, want them counted (4 unless a second passed between them)`, n)
	}
}

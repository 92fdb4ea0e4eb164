package logging

import (
	"sync"
	"testing"

	"go.uber.org/zap/zapcore"
)

// counted records what a Suppressed was called with.
type counted struct {
	mu    sync.Mutex
	calls map[string][]int
}

func (c *counted) suppressed(logger string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string][]int{}
	}
	c.calls[logger] = append(c.calls[logger], n)
}

func (c *counted) total(logger string) (sum int, seen bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns, seen := c.calls[logger]
	for _, n := range ns {
		sum += n
	}
	return sum, seen
}

// Kitex's and netpoll's thinned lines count in
// combo_log_lines_suppressed_total as the service's own do: a flood of
// refused connections is thinned there above all, and the metric showed
// none of it. The count exists at 0 once set; stopped, nothing counts.
func TestLibraryLoggersCountTheLinesTheyLeaveOut(t *testing.T) {
	k, _, _ := observedKlog(zapcore.InfoLevel)
	w, _, _ := observedNetpoll(zapcore.InfoLevel)
	nl := netpollLogger(w)
	var c counted
	stopK := k.CountSuppressed(c.suppressed)
	stopW := w.CountSuppressed(c.suppressed)
	for _, name := range []string{"kitex", "netpoll"} {
		if n, seen := c.total(name); !seen || n != 0 {
			t.Errorf("logger %q once counted: total %d, seen %v; want the count made, at 0", name, n, seen)
		}
	}
	// Five lines of each, on a clock that does not move: four left out.
	floodThenCount := func(when string) {
		t.Helper()
		for range 5 {
			k.Errorf("KITEX: refused connection from %s", "10.0.0.1:5000")
			nl.Printf("NETPOLL: accept conn failed: %v", "too many open files")
		}
		for _, name := range []string{"kitex", "netpoll"} {
			if n, _ := c.total(name); n != 4 {
				t.Errorf("%s: logger %q counted %d lines left out, want 4", when, name, n)
			}
		}
	}
	floodThenCount("5 lines in a second")
	stopK()
	stopW()
	floodThenCount("5 more once the count was stopped")
}

// A line below log.level is no line left out: the service's own loggers
// and netpoll's count none, and Kitex's counted a flood of info lines
// that log.level=warn would never have written.
func TestKitexCountsNoLineBelowLogLevel(t *testing.T) {
	k, _, _ := observedKlog(zapcore.WarnLevel)
	var c counted
	k.CountSuppressed(c.suppressed)
	for range 5 {
		k.Infof("KITEX: connection from %s closed", "10.0.0.1:5000")
	}
	if n, _ := c.total("kitex"); n != 0 {
		t.Errorf("5 info lines at log.level warn counted %d left out, want 0", n)
	}
}

// Two runs of the service in one process (tests that run replicas side by
// side) each set the count of the process's one Kitex logger. Whichever
// ends first, the other, still serving, goes on counting (the one set
// last counts while both run), and its own stop ends counting.
func TestLibraryCountOutlastsTheOtherRunsStop(t *testing.T) {
	for _, firstToEnd := range []string{"the run set first", "the run set last"} {
		t.Run(firstToEnd, func(t *testing.T) {
			k, _, _ := observedKlog(zapcore.InfoLevel)
			var earlier, later counted
			stopEarlier := k.CountSuppressed(earlier.suppressed)
			stopLater := k.CountSuppressed(later.suppressed)
			ended, going, stopGoing := &earlier, &later, stopLater
			if firstToEnd == "the run set first" {
				stopEarlier()
			} else {
				stopLater()
				ended, going, stopGoing = &later, &earlier, stopEarlier
			}
			for range 3 {
				k.Errorf("KITEX: refused connection from %s", "10.0.0.1:5000")
			}
			if n, _ := going.total("kitex"); n != 2 {
				t.Errorf("the run still serving counted %d lines left out of 3, want 2", n)
			}
			if n, _ := ended.total("kitex"); n != 0 {
				t.Errorf("the run that ended counted %d, want 0", n)
			}
			stopGoing()
			k.Errorf("KITEX: refused connection from %s", "10.0.0.1:5000")
			if n, _ := going.total("kitex"); n != 2 {
				t.Errorf("the run still serving, once stopped too, counted %d, want still 2", n)
			}
		})
	}
}

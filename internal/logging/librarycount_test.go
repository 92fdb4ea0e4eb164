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
// side) each set the count of the process's one Kitex logger: the first
// to end must not stop the other's, and the other's stop ends counting.
func TestLibraryCountOutlastsAnEarlierRunsStop(t *testing.T) {
	k, _, _ := observedKlog(zapcore.InfoLevel)
	var first, second counted
	stopFirst := k.CountSuppressed(first.suppressed)
	stopSecond := k.CountSuppressed(second.suppressed)
	stopFirst()
	for range 3 {
		k.Errorf("KITEX: refused connection from %s", "10.0.0.1:5000")
	}
	if n, _ := second.total("kitex"); n != 2 {
		t.Errorf("the second run's count: %d lines left out of 3, want 2 after the first run stopped its own", n)
	}
	if n, _ := first.total("kitex"); n != 0 {
		t.Errorf("the first run's count: %d, want 0 (replaced before any line)", n)
	}
	stopSecond()
	k.Errorf("KITEX: refused connection from %s", "10.0.0.1:5000")
	if n, _ := second.total("kitex"); n != 2 {
		t.Errorf("the second run's count after its stop: %d, want still 2", n)
	}
}

// The other order: the later of two runs ends first (a replica started
// beside another, then stopped). Its stop must not leave the earlier run,
// still serving, counting nothing: the count goes back to the earlier
// run's, which its own stop then ends.
func TestLibraryCountOutlastsALaterRunsStop(t *testing.T) {
	k, _, _ := observedKlog(zapcore.InfoLevel)
	var first, second counted
	stopFirst := k.CountSuppressed(first.suppressed)
	stopSecond := k.CountSuppressed(second.suppressed)
	stopSecond()
	for range 3 {
		k.Errorf("KITEX: refused connection from %s", "10.0.0.1:5000")
	}
	if n, _ := first.total("kitex"); n != 2 {
		t.Errorf("the first run's count: %d lines left out of 3, want 2 after the second run stopped its own", n)
	}
	if n, _ := second.total("kitex"); n != 0 {
		t.Errorf("the second run's count after its stop: %d, want 0", n)
	}
	stopFirst()
	k.Errorf("KITEX: refused connection from %s", "10.0.0.1:5000")
	if n, _ := first.total("kitex"); n != 2 {
		t.Errorf("the first run's count after its stop: %d, want still 2", n)
	}
}

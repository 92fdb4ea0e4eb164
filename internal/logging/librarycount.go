package logging

import (
	"slices"
	"sync"
)

// libraryCount counts the lines Klog or NetpollWriter leaves out. Those
// loggers are the process's (Kitex and netpoll take one logger each,
// installed at start), while the metrics they count into are made later,
// by each run of the service: so the count is set after the logger is
// built, and unset when the run ends.
type libraryCount struct {
	name   string // the logger label: "kitex", "netpoll"
	mu     sync.Mutex
	active []*Suppressed // the counts not stopped yet, in the order set; the last counts
}

// set counts the lines left out from now on by s, until stop is called.
// Like Sampled, it calls s with n = 0 at once, so that the count exists,
// at 0, before the first line is left out. Of two runs of the service in
// one process (tests that run replicas side by side), the one set last
// counts, and the one to end first, in either order, must not stop the
// other's count: stop drops s alone, and the lines count again by the
// latest s not stopped.
func (c *libraryCount) set(s Suppressed) (stop func()) {
	s(c.name, 0)
	p := &s // s's identity for stop (funcs do not compare)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active = append(c.active, p)
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if i := slices.Index(c.active, p); i >= 0 {
			c.active = slices.Delete(c.active, i, i+1)
		}
	}
}

// add counts one line left out. Lines are left out at most as often as
// they are logged, so the lock costs nothing next to the log's own.
func (c *libraryCount) add() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.active); n > 0 {
		(*c.active[n-1])(c.name, 1)
	}
}

// SuppressedCounter is what Klog's logger and a NetpollWriter offer to
// count the lines they leave out (combo_log_lines_suppressed_total, by
// logger "kitex" and "netpoll").
type SuppressedCounter interface {
	CountSuppressed(s Suppressed) (stop func())
}

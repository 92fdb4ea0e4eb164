package logging

import "sync/atomic"

// libraryCount counts the lines Klog or NetpollWriter leaves out. Those
// loggers are the process's (Kitex and netpoll take one logger each,
// installed at start), while the metrics they count into are made later,
// by each run of the service: so the count is set after the logger is
// built, and unset when the run ends.
type libraryCount struct {
	name string // the logger label: "kitex", "netpoll"
	fn   atomic.Pointer[Suppressed]
}

// set counts the lines left out from now on by s, until stop is called.
// Like Sampled, it calls s with n = 0 at once, so that the count exists,
// at 0, before the first line is left out. stop unsets s only if no later
// set replaced it: of two runs of the service in one process (tests that
// run replicas side by side), the first to end must not stop the other's
// count.
func (c *libraryCount) set(s Suppressed) (stop func()) {
	s(c.name, 0)
	p := &s
	c.fn.Store(p)
	return func() { c.fn.CompareAndSwap(p, nil) }
}

// add counts one line left out.
func (c *libraryCount) add() {
	if s := c.fn.Load(); s != nil {
		(*s)(c.name, 1)
	}
}

// SuppressedCounter is what Klog's logger and a NetpollWriter offer to
// count the lines they leave out (combo_log_lines_suppressed_total, by
// logger "kitex" and "netpoll").
type SuppressedCounter interface {
	CountSuppressed(s Suppressed) (stop func())
}

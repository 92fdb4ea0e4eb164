package worker

import "time"

// SkewClock moves this worker's estimate of Redis's clock by ms, as a jump
// of Redis's clock would, for tests of how it is learned again.
func (w *Worker) SkewClock(ms int64) {
	now := time.Now()
	w.clock.observe(w.clock.now()+ms, now, now)
}

// ClockNow is the worker's estimate of Redis's clock, in ms.
func (w *Worker) ClockNow() int64 { return w.clock.now() }

// ClockRead reports whether the worker has read Redis's clock yet.
func (w *Worker) ClockRead() bool {
	w.clock.mu.Lock()
	defer w.clock.mu.Unlock()
	return w.clock.has
}

package worker

import "time"

// SkewClock moves this worker's estimate of Redis's clock by ms, as a jump
// of Redis's clock would, for tests of how it is learned again.
func (w *Worker) SkewClock(ms int64) {
	now := time.Now()
	seen := map[*redisClock]bool{}
	for _, q := range w.qs {
		if !seen[q.clock] {
			seen[q.clock] = true
			q.clock.observe(q.clock.now()+ms, now, now)
		}
	}
}

// ClockNow is the worker's estimate of the clock of shard 0's Redis node,
// in ms.
func (w *Worker) ClockNow() int64 { return w.qs[0].clock.now() }

// ClockRead reports whether the worker has read the clock of every shard's
// Redis node yet.
func (w *Worker) ClockRead() bool {
	for _, q := range w.qs {
		if !q.clock.known() {
			return false
		}
	}
	return true
}

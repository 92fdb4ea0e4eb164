package worker

import (
	"time"

	"github.com/combo-service/combo-service/repo"
)

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

// RetryDelay puts back, as retryLater does, a window whose flushes Redis
// has answered with an error fails times (0: it failed only with its
// batch), and says how much later than the clock's reading it is due
// again: at least lo, at most hi (the clock runs on while it is put back).
func RetryDelay(fails int) (lo, hi time.Duration) {
	q := newDueQueue()
	q.clock = &redisClock{}
	now := time.Now()
	q.clock.observe(1_000_000, now, now)
	before := q.clock.now()
	(&Worker{}).retryLater(q, []dueItem{{w: repo.Window{ID: "1-0"}, fails: fails}})
	after := q.clock.now()
	due, _ := q.next()
	return time.Duration(due-after) * time.Millisecond, time.Duration(due-before) * time.Millisecond
}

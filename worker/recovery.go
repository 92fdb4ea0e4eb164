package worker

import (
	"sync"
	"sync/atomic"
	"time"
)

// failingOps tracks the worker's Redis operations that are failing now, so
// that each recovery is logged once. A failure's own line ("redis read
// failed; retrying") is thinned to about one a second and then simply
// stops: read alone, the log of an outage that ended looks like the log of
// a replica that stopped logging. An op is failing from its first failure
// until everywhere it failed has succeeded since: where is a shard, or for
// the flush script a window (windowRef), which Redis may refuse alone (a
// channel the ACL user may not publish on) while the shard's other windows
// go through. So an outage of one Redis gives one "redis read recovered"
// line, not one per shard; a Cluster whose one master is down keeps the op
// failing until that master's shards answer too; and a window refused
// alone keeps its op failing until it is flushed, rather than a recovery
// logged at every other window's success.
//
// The recovery line goes through the worker's sampled logger: one thinned
// away (the op flapping within a second) leaves the run ended but unlogged,
// and the housekeeper writes it at its next round (writeHeld), or Shutdown
// once the drain is over (writeHeldAtExit), so the last line of an op that
// recovered never says it is failing, even for an op that runs once
// (prepare, at start). Not the op's next success: it came every few ms,
// each a refused line the sampler counted as left out, and an op that runs
// once has none.
type failingOps struct {
	open atomic.Int32 // runs open or unlogged: successes take no lock while none is
	mu   sync.Mutex
	runs map[string]*failRun // by op
	// written is when each op's last recovery line was written, read
	// just after (so not before the sampler's own reading of the clock):
	// a held line's wait for the sampler's second starts there.
	written map[string]time.Time
}

// failRun is one op's run of failures.
type failRun struct {
	since    time.Time        // its first failure
	failures int              // failures, on every shard, since
	where    map[any]struct{} // failed there and not succeeded there since
	lastErr  error
	endedAt  time.Time // when every place had succeeded, its line not written yet; zero while failing
	lastLine time.Time // when op's previous recovery line was written; zero if none
}

// failed records op's failure at where.
func (f *failingOps) failed(op string, where any, err error, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	run := f.runs[op]
	if run == nil {
		if f.runs == nil {
			f.runs = map[string]*failRun{}
		}
		run = &failRun{since: now, where: map[any]struct{}{}, lastLine: f.written[op]}
		f.runs[op] = run
		f.open.Add(1)
	}
	run.failures++
	run.where[where] = struct{}{}
	run.lastErr = err
	run.endedAt = time.Time{} // failing again before its recovery was written: one run
}

// succeeded records op's success at where, at now. When that ends op's
// run of failures (everywhere it failed has succeeded since), it calls
// logRecovery with the run, under the lock (once per run, however many
// succeed at once); the run is over once logRecovery says it wrote the
// line, else writeHeld tries again. It takes no lock while no op is
// failing: it runs after every read and flush.
func (f *failingOps) succeeded(op string, where any, now time.Time, logRecovery func(op string, run failRun) (written bool)) {
	if f.open.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	run := f.runs[op]
	if run == nil {
		return
	}
	delete(run.where, where)
	if len(run.where) > 0 || !run.endedAt.IsZero() {
		return
	}
	run.endedAt = now
	if logRecovery(op, *run) {
		f.ended(op)
	}
}

// ended ends op's run, its recovery line just written. Under f.mu.
func (f *failingOps) ended(op string) {
	if f.written == nil {
		f.written = map[string]time.Time{}
	}
	f.written[op] = time.Now()
	delete(f.runs, op)
	f.open.Add(-1)
}

// writeHeld calls logRecovery again for every run that ended with its
// line unwritten, ends those it writes, and reports whether any is still
// held.
func (f *failingOps) writeHeld(logRecovery func(op string, run failRun) (written bool)) (stillHeld bool) {
	if f.open.Load() == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for op, run := range f.runs {
		if run.endedAt.IsZero() {
			continue
		}
		if logRecovery(op, *run) {
			f.ended(op)
		} else {
			stillHeld = true
		}
	}
	return stillHeld
}

// forget drops where from op's run of failures without a success there:
// a window gone from the flusher's queue unflushed (its flush panicked),
// whose success would never come. A run it leaves with no place failing
// ends at the op's next success.
func (f *failingOps) forget(op string, where any) {
	if f.open.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if run := f.runs[op]; run != nil {
		delete(run.where, where)
	}
}

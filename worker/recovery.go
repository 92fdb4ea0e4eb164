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
type failingOps struct {
	open atomic.Int32 // runs open: successes take no lock while none is
	mu   sync.Mutex
	runs map[string]*failRun // by op
}

// failRun is one op's run of failures.
type failRun struct {
	since    time.Time        // its first failure
	failures int              // failures, on every shard, since
	where    map[any]struct{} // failed there and not succeeded there since
	lastErr  error
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
		run = &failRun{since: now, where: map[any]struct{}{}}
		f.runs[op] = run
		f.open.Add(1)
	}
	run.failures++
	run.where[where] = struct{}{}
	run.lastErr = err
}

// succeeded records op's success at where and, when that ends op's run of
// failures (everywhere it failed has succeeded since), returns the run.
// It takes no lock while no op is failing: it runs after every read and
// flush.
func (f *failingOps) succeeded(op string, where any) (failRun, bool) {
	if f.open.Load() == 0 {
		return failRun{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	run := f.runs[op]
	if run == nil {
		return failRun{}, false
	}
	delete(run.where, where)
	if len(run.where) > 0 {
		return failRun{}, false
	}
	delete(f.runs, op)
	f.open.Add(-1)
	return *run, true
}

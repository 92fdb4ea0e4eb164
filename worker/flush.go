package worker

import (
	"context"
	"runtime/debug"
	"strconv"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// flushLoop flushes one shard's queue until Shutdown: at once when its
// deadline passes, or once the queue is empty after draining begins.
func (w *Worker) flushLoop(shard int, q *dueQueue) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	bo := newBackoff()
	draining, isDraining := w.draining, false
	for {
		for {
			select {
			case <-w.flushCtx.Done(): // Shutdown's deadline passed: leave the rest pending
				return
			default:
			}
			// Nothing is scheduled by this host's clock, which may be ahead
			// of the node's or behind it by any amount: before a reading of
			// the node's clock (the housekeeper's first may still be under
			// way, or have failed), the flusher reads it, and waits for a
			// reading. A window popped by the host's clock behind the node's
			// waited out the difference; one retried (retryLater) at the
			// host's clock ahead of it, the same once the clock was read.
			if !q.clock.known() {
				if _, ok := q.next(); !ok {
					break // nothing to flush: read when there is
				}
				if w.readClock(w.flushCtx, q, shard, metrics.LoopFlush) != nil {
					bo.wait(w.flushCtx)
					break
				}
			}
			batch := q.popDue(q.clock.now(), w.cfg.BatchSize)
			if len(batch) == 0 {
				break
			}
			if !w.flushBatch(q, batch) {
				bo.wait(w.flushCtx)
				break
			}
			bo.reset()
		}
		if isDraining && q.holding() == 0 {
			return
		}
		if due, ok := q.next(); ok {
			wait := time.Duration(0) // no reading yet: read again at once (above, after a backoff)
			if q.clock.known() {
				wait = max(q.clock.until(due), 0)
			}
			timer.Reset(wait)
		} else {
			timer.Reset(time.Hour)
		}
		select {
		case <-w.flushCtx.Done():
			return
		case <-draining:
			draining, isDraining = nil, true
		case <-timer.C:
		case <-q.wake:
		}
	}
}

// flushBatch flushes one batch and reports whether Redis answered. Items
// not retired go back to the queue.
func (w *Worker) flushBatch(q *dueQueue, batch []dueItem) bool {
	return w.flushItems(q, batch, nil)
}

// panickedAlone collects the windows of a split batch whose flush panicked
// on its own, to be named in one line: a line each, under the sampled
// logger, would name only the first in a second.
type panickedAlone struct {
	ids   []string
	first any    // the first one's panic value
	stack string // and where it was raised
}

// flushItems is flushBatch; split is set when batch is one window of a
// batch that panicked, and collects it if it panics again.
func (w *Worker) flushItems(q *dueQueue, batch []dueItem, split *panickedAlone) (ok bool) {
	defer func() {
		switch p := recover(); {
		case p != nil && len(batch) > 1:
			// One bad window must not hold back the rest of its batch:
			// forgotten together and reclaimed together, they would panic
			// together again at every reclaim. Each is flushed on its own,
			// so only a window that panics alone is left (the flush script
			// publishes a window at most once, whatever ran before the
			// panic).
			w.panicked(metrics.LoopFlush, "recovered panic flushing a batch; flushing its windows one at a time", p,
				zap.Int("windows", len(batch)))
			ok = true
			var alone panickedAlone
			for _, it := range batch {
				if !w.flushItems(q, []dueItem{it}, &alone) {
					ok = false
				}
			}
			if len(alone.ids) > 0 {
				w.log.Error("windows whose flush panicked on their own; left pending for the claimer",
					zap.Strings("ids", alone.ids), zap.String("loop", metrics.LoopFlush), zap.Any("panic", alone.first),
					zap.String("stack", alone.stack))
			}
		case p != nil:
			id := strconv.Itoa(batch[0].w.Shard) + "/" + batch[0].w.ID
			if split != nil {
				w.metrics.LoopPanics.WithLabelValues(metrics.LoopFlush).Inc()
				if split.ids = append(split.ids, id); split.first == nil {
					split.first, split.stack = p, string(debug.Stack())
				}
			} else {
				w.panicked(metrics.LoopFlush, "recovered panic flushing a window; left pending for the claimer", p,
					zap.Strings("ids", []string{id}))
			}
			w.metrics.BadEntries.Add(float64(len(batch)))
			// Forget it locally; it stays pending and the claimer retries
			// it after ClaimIdle, so nothing is lost, until it is stale.
			q.done(batch...)
			// Gone from the queue: a run of flush_script failures it is
			// part of must not wait for its flush here (failingOps).
			w.failing.forget(metrics.OpFlushScript, windowRef{batch[0].w.Shard, batch[0].w.ID})
			w.retireIfDone(batch[0].w)
			ok = true
		}
		w.setHeldGauge()
	}()
	// A flush that runs past the answer's deadline changes nothing (Late):
	// one left waiting on a paused master's socket must not run when that
	// master resumes, after its replica was promoted and pushed the window.
	// The deadline is when its sender stops waiting for the answer to this
	// send (flushWait: redis.timeout, not the op's 2 s), since the window
	// is then sent again, to the new master once the client follows it.
	// On the node's clock as estimated (a lower bound of it, so the bound
	// errs early by a round trip at most); a reading it corrects answers
	// Late at worst once, and the window is sent again at once. Before the
	// first reading the estimate would be this host's clock, which may be
	// ahead of the node's: flushLoop pops nothing before a reading.
	notAfter := q.clock.now() + w.flushWait.Milliseconds()
	ws := make([]repo.Window, len(batch))
	for i, it := range batch {
		ws[i] = it.w
		ws[i].NotAfter = notAfter
	}
	shard := batch[0].w.Shard // a queue holds one shard's windows
	var res []repo.FlushResult
	sent := time.Now()
	err := w.op(w.flushCtx, func(ctx context.Context) error {
		var err error
		res, err = w.store.Flush(ctx, ws)
		return err
	})
	if err != nil {
		if w.flushCtx.Err() == nil { // not Shutdown's deadline cutting it short
			w.redisError(metrics.OpFlush, shard, err)
		}
		// No answer does not mean it did not run: the send may still wait
		// on a paused master's socket (go-redis's Sentinel client cuts it
		// short at +switch-master) and run when that master resumes. Its
		// fate is fixed by its deadline, not by when the window goes again:
		// run by notAfter, it publishes there however long we wait; run
		// past it, it answers Late and changes nothing. So no wait for it.
		w.retryLater(q, batch)
		return false
	}
	w.redisOK(metrics.OpFlush, shard)
	w.learnClock(q, batch, res, sent, time.Now())
	var retry, failed []dueItem
	refusingWrites := true // every window failed because Redis refuses writes
	for i, r := range res {
		it := batch[i]
		if r.Err != nil {
			refusingWrites = refusingWrites && repo.RefusesWrites(r.Err)
			w.opFailed(metrics.OpFlushScript, windowRef{shard, it.w.ID}, r.Err, zap.Int("shard", shard), zap.String("entry", it.w.ID))
			failed = append(failed, it)
			continue
		}
		w.redisOK(metrics.OpFlushScript, windowRef{shard, it.w.ID})
		switch r.Status {
		case repo.Published:
			w.metrics.WindowsFlushed.WithLabelValues(metrics.FlushedPublished).Inc()
			if r.Heard == 0 { // -1 on a Cluster: not known
				w.metrics.WindowsUnheard.Inc()
			}
			w.metrics.PushLag.Observe(r.Lag.Seconds())
			q.done(it)
		case repo.Early:
			// Our estimate of Redis's clock was ahead (learnClock has
			// corrected it): wait until due.
			it.due = r.Due
			retry = append(retry, it)
		case repo.Late:
			// Our estimate of Redis's clock was behind (learnClock has
			// corrected it), or the node ran it at the very end of our
			// wait: nothing changed, so send it again. Counted, so an
			// estimate that keeps falling behind shows. A flush run after
			// its sender stopped waiting is not seen here: that answer is
			// never read (the send failed: OpFlush).
			w.metrics.FlushesLate.Inc()
			retry = append(retry, it)
		case repo.Stale:
			w.stale(it.w, r, zapcore.WarnLevel, "window dropped unpublished: older than window.stale")
			q.done(it)
		case repo.Gone:
			w.metrics.WindowsFlushed.WithLabelValues(metrics.FlushedGone).Inc()
			q.done(it)
		case repo.Lost:
			w.lost(it.w, r.Age)
			q.done(it)
		}
	}
	if len(retry) > 0 {
		q.requeue(retry...)
	}
	if len(failed) > 0 {
		// Redis answered with an error for these windows (writes refused,
		// BUSY, a script error): nothing of theirs changed, so they are
		// retried, each later than the last time, not at once.
		for i := range failed {
			failed[i].fails++
		}
		w.retryLater(q, failed)
	}
	// Redis answered, if only with errors: the failed windows wait their
	// own growing delays (retryLater). Backing the flusher off too held up
	// every window of the shard falling due meanwhile, for up to 2 s, behind
	// one that Redis kept refusing alone (a channel the ACL user may not
	// publish on). But a Redis refusing every write (OOM, MISCONF,
	// NOREPLICAS) refuses them all alike: without backing off, a backlog of
	// windows was retried as fast as their own delays came due (20,000 held
	// windows: about 1,900 flushes a second against 200 backing off).
	return len(failed) < len(batch) || !refusingWrites
}

// retireIfDone asks Redis to retire win, whose flush just panicked, if it
// is done with: older than window.stale by Redis's clock (then the flush
// script deletes its data and its entry, as a flush would), or already
// published or lost. Without this it would stay pending, taken back by the
// claimer and panicking again every ClaimIdle, for ever. The script
// decides, and Retire builds no push: a panic there too is recovered,
// and the window stays pending as before.
func (w *Worker) retireIfDone(win repo.Window) {
	if w.flushCtx.Err() != nil {
		return // Shutdown's deadline passed: it stays pending for another replica
	}
	defer func() {
		if p := recover(); p != nil {
			w.panicked(metrics.LoopFlush, "recovered panic retiring a window", p, zap.Int("shard", win.Shard), zap.String("entry", win.ID), zap.String("during", "retire"))
		}
	}()
	var res repo.FlushResult
	if err := w.op(w.flushCtx, func(ctx context.Context) error {
		var err error
		res, err = w.store.Retire(ctx, win)
		return err
	}); err != nil {
		w.oneOffError(metrics.OpRetire, win.Shard, err) // still pending: tried again at the next panic
		return
	}
	switch res.Status {
	case repo.Stale:
		w.stale(win, res, zapcore.ErrorLevel, "window dropped unpublished: its flush panicked until it was older than window.stale")
	case repo.Gone:
		w.metrics.WindowsFlushed.WithLabelValues(metrics.FlushedGone).Inc()
	case repo.Lost:
		w.lost(win, res.Age)
	}
}

// stale counts and logs a window the flush script dropped unpublished,
// older than window.stale, found by a flush or a retire.
func (w *Worker) stale(win repo.Window, r repo.FlushResult, lvl zapcore.Level, msg string) {
	w.metrics.WindowsFlushed.WithLabelValues(metrics.FlushedStale).Inc()
	// A window holds 1 or more; flush.lua answers 0 when its data had
	// expired first, which is no quantity: say so rather than log 0.
	held := zap.Int64("quantity", r.Quantity)
	if r.Quantity == 0 {
		held = zap.String("quantity_unknown", "its data had expired: the window waited past its keys' time to live")
	}
	w.log.Log(lvl, msg, zap.Int("shard", win.Shard), zap.String("entry", win.ID), zap.Int64("activity", win.ActivityID),
		zap.Int64("user", win.UserID), zap.String("item_type", win.ItemType),
		zap.Duration("age", r.Age), held)
}

// lost counts and logs a window whose data vanished before it could be
// published, found by a flush or a retire.
func (w *Worker) lost(win repo.Window, age time.Duration) {
	w.metrics.WindowsFlushed.WithLabelValues(metrics.FlushedLost).Inc()
	w.log.Error("window lost unpublished: its data was evicted, deleted or overwritten with another type (maxmemory-policy must be noeviction; nothing else may write combo: keys)",
		zap.Int("shard", win.Shard), zap.String("entry", win.ID), zap.Int64("activity", win.ActivityID),
		zap.Int64("user", win.UserID), zap.String("item_type", win.ItemType), zap.Duration("age", age))
}

// retryLater puts items back a little later, so a failing Redis is not
// hammered: 200 ms for an item that has not failed on its own, and for one
// that has, 100 ms doubling per failure up to 5 s. The windows stay pending
// in Redis all along.
func (w *Worker) retryLater(q *dueQueue, items []dueItem) {
	now := q.clock.now()
	for i := range items {
		d := 200 * time.Millisecond
		if f := items[i].fails; f > 0 {
			d = min(100*time.Millisecond<<min(f-1, 6), 5*time.Second)
		}
		items[i].due = max(items[i].due, now+d.Milliseconds())
	}
	q.requeue(items...)
}

// learnClock takes Redis's time from a batch's flush replies, sent and
// received at those local times: an early reply says it, a published one
// says how long past due. The latest of them is the closest to recv.
func (w *Worker) learnClock(q *dueQueue, batch []dueItem, res []repo.FlushResult, sent, recv time.Time) {
	var latest int64
	for i, r := range res {
		switch {
		case r.Err != nil:
		case r.Status == repo.Early, r.Status == repo.Late:
			latest = max(latest, r.Now)
		case r.Status == repo.Published:
			latest = max(latest, batch[i].w.Due+r.Lag.Milliseconds())
		}
	}
	if latest > 0 {
		w.observeClock(q, latest, sent, recv)
	}
}

// observeClock takes a reading of the clock of q's Redis node and, if the
// estimate moved, wakes the flushers timed by it: their timers were set
// from the old estimate, and a window read before the first reading (timed
// by this host's clock) or before a jump of Redis's clock (a failover)
// would otherwise go out late by as much, or stale.
func (w *Worker) observeClock(q *dueQueue, redisMs int64, sent, recv time.Time) {
	if q.clock.observe(redisMs, sent, recv) {
		for _, other := range w.qs {
			if other.clock == q.clock {
				other.poke()
			}
		}
	}
}

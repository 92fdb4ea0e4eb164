package worker

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// groupLost counts and logs a consumer group found missing after this
// replica prepared it, and created again: Redis lost the stream with its
// waiting windows. Their flushes find neither data nor entry and count
// as gone, like windows another replica published, so this is the loss's
// only sign. losses is w.losses[shard] read before the call that found
// the group missing: when another loop of this replica (the reader, the
// claimer) has counted a loss since, both found the same one, and it is
// not counted again.
func (w *Worker) groupLost(shard int, losses uint64, err error) {
	if !w.losses[shard].CompareAndSwap(losses, losses+1) {
		return
	}
	w.metrics.GroupsRecreated.Inc()
	w.log.Error("consumer group missing, created again: Redis lost the stream and the windows waiting in it "+
		"(FLUSHALL, a restart without persistence, or eviction: maxmemory-policy must be noeviction)",
		zap.Int("shard", shard), zap.Error(err))
}

// redisError counts and logs a failed Redis operation on shard.
func (w *Worker) redisError(op string, shard int, err error) {
	w.opFailed(op, shard, err, zap.Int("shard", shard))
}

// oneOffError counts and logs a failed Redis operation on shard that is
// not tried again in a loop (a drop, which a claim later does itself; a
// retire, tried again only at the next panic): no run of failures is
// opened for it, which no later success would end.
func (w *Worker) oneOffError(op string, shard int, err error) {
	w.opFailed(op, nil, err, zap.Int("shard", shard))
}

// opFailed counts and logs a failure of op at where: a shard, or for the
// flush script a window (see failingOps); nil opens no run. The op is in
// the message ("redis flush_script failed; retrying"), not only in a
// field: the worker's log is sampled by message (logging.Sampled), and
// with one message for all, one op failing without end (reads timing out
// on a dead master) hid every other op's failure (NOPERM on flush_script)
// for as long as it lasted.
func (w *Worker) opFailed(op string, where any, err error, fields ...zap.Field) {
	w.metrics.RedisErrors.WithLabelValues(op).Inc()
	if where != nil {
		w.failing.failed(op, where, err, time.Now())
	}
	w.log.Warn("redis "+op+" failed; retrying", append(append([]zap.Field{zap.String("op", op)}, fields...), zap.Error(err))...)
}

// redisOK records a success of op at where and logs, once, the end of a
// run of its failures (see failingOps): how many there were, for how long,
// and the last error, which the thinned failure lines may not have shown.
func (w *Worker) redisOK(op string, where any) {
	w.failing.succeeded(op, where, time.Now(), w.logRecovery)
}

// writeHeldRecoveries writes the recovery lines the sampler held back
// (see failingOps), and reports whether any is held still. A line is not
// tried again within a second of the op's previous recovery line: the
// sampler refused it for that line (no other of its message is written
// while it is held), and would refuse it until that second is over,
// counting each refusal as a line left out (combo_log_lines_suppressed_total,
// and the line's suppressed_since_last once written): tried every 100 ms
// at exit, one held line counted eleven. Not a second from its own run's
// end, later: an exit whose drain had run out tries once, and lost a line
// the sampler would have let through.
func (w *Worker) writeHeldRecoveries() (stillHeld bool) {
	return w.failing.writeHeld(func(op string, run failRun) bool {
		if time.Since(run.lastLine) < time.Second { // the sampler's second (logging.Sampled)
			return false
		}
		return w.logRecovery(op, run)
	})
}

// logRecovery writes op's recovery line, unless the sampler thins it away.
func (w *Worker) logRecovery(op string, run failRun) (written bool) {
	if !w.log.Core().Enabled(zapcore.InfoLevel) {
		// log.level leaves the line out, not the sampler: nothing to
		// hold, and a run held for good kept its op's successes locking.
		return true
	}
	ce := w.log.Check(zapcore.InfoLevel, "redis "+op+" recovered")
	if ce == nil {
		return false // thinned away: written by the housekeeper's next round
	}
	ce.Write(zap.String("op", op), zap.Int("failures", run.failures),
		zap.Duration("failing_for", run.endedAt.Sub(run.since).Round(time.Millisecond)),
		zap.NamedError("last_error", run.lastErr))
	return true
}

// errRecovered marks the error of a read or claim that panicked: the panic
// is counted in combo_loop_panics_total, and is not a Redis error (counted
// there too, it would page whoever watches Redis for a bug of ours).
var errRecovered = errors.New("recovered panic")

// loopPanic is the message of a panic recovered in a read, claim or
// housekeeping loop, or in the flusher's reading of Redis's clock (which
// it never runs beside a flush). The flusher's flushes' panics have
// messages of their own: the logger is sampled by message, and a batch's
// panic and its window's, raised in the same instant, must not hide each
// other.
const loopPanic = "recovered panic in worker loop"

func (w *Worker) panicked(loop, msg string, p any, fields ...zap.Field) {
	w.metrics.LoopPanics.WithLabelValues(loop).Inc()
	w.log.Error(msg, append(fields, zap.String("loop", loop), zap.Any("panic", p), zap.Stack("stack"))...)
}

// recoverAs, deferred, turns a panic into *err (errRecovered), counted and
// logged as loop's, for a store call outside the per-batch recovers (a
// shard's preparation, the final read's LastID): a panic there ended the
// process, or Shutdown.
func (w *Worker) recoverAs(loop string, err *error, fields ...zap.Field) {
	if p := recover(); p != nil {
		w.panicked(loop, loopPanic, p, fields...)
		*err = fmt.Errorf("worker: %w: %v", errRecovered, p)
	}
}

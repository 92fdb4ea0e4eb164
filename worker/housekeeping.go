package worker

import (
	"context"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/metrics"
)

// housekeepingLoop reads the clock of each shard's Redis node again (so a
// jump of it is learned even while no window is flushed), samples each
// stream's length and pending count for the metrics, and removes dead consumers from the group.
// A consumer is removed only when its pending list is empty (DELCONSUMER
// would drop pending entries), it has been idle for ConsumerIdleDelete (by
// then the claimer has taken over anything it held) and its replica's
// settings key is gone; this replica's own consumer, removed all the same,
// is put back (repo.PruneConsumers).
func (w *Worker) housekeepingLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.SampleEvery)
	defer t.Stop()
	st := housekeeping{sampleFailures: make([]int, w.cfg.Shards)}
	for {
		w.writeHeldRecoveries()
		w.housekeep(ctx, &st)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readClocks reads the clock of each shard's Redis node, one reading per
// estimate (one in all unless NodePerShard), all at once: a node that does
// not answer must not hold up the others' readings for OpTimeout each.
func (w *Worker) readClocks(ctx context.Context) {
	w.byClock(func(shards []int) { _ = w.readClock(ctx, w.qs[shards[0]], shards[0], metrics.LoopHousekeeping) })
}

// byClock calls fn with each group of shards that share a clock estimate
// (one per shard with NodePerShard, whose nodes may differ; else one
// group, on the one Redis), the groups at once, and waits for all. A node
// that does not answer costs its own shards OpTimeout each, not every
// shard after it: sampled in turn, a Redis Cluster master that hung made
// each round of the others' stream gauges, clock readings and consumer
// removal wait that long per hung shard (about 20 s with 128 shards over
// 3 masters). A panic in fn is counted and logged (with its shards) as
// the housekeeper's, and ends its group's part of the round: on a Redis
// Cluster, a panic of every shard's sample counts once per shard.
func (w *Worker) byClock(fn func(shards []int)) {
	groups := map[*redisClock][]int{}
	var order []*redisClock
	for shard, q := range w.qs {
		if groups[q.clock] == nil {
			order = append(order, q.clock)
		}
		groups[q.clock] = append(groups[q.clock], shard)
	}
	var wg sync.WaitGroup
	for _, c := range order {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					w.panicked(metrics.LoopHousekeeping, loopPanic, p, zap.Ints("node_shards", groups[c]))
				}
			}()
			fn(groups[c])
		})
	}
	wg.Wait()
}

// readClock reads the clock of shard's node into q's estimate; a failure
// is counted and logged (op time) and returned, a panic counted and logged
// as loop's (the housekeeper's, or the flusher's before its first reading)
// and returned: it ended the process from the flusher.
func (w *Worker) readClock(ctx context.Context, q *dueQueue, shard int, loop string) (err error) {
	defer w.recoverAs(loop, &err, zap.Int("shard", shard))
	err = w.op(ctx, func(ctx context.Context) error {
		sent := time.Now()
		t, err := w.store.Time(ctx, shard)
		if err == nil {
			w.observeClock(q, t.UnixMilli(), sent, time.Now())
		}
		return err
	})
	// A failure is the clock's, not the shard's: one Redis's clock, read
	// for every shard by the housekeeper as shard 0's, fails too when a
	// flusher reads it as its own shard's, which it then reads no more.
	place := shard
	if !w.cfg.NodePerShard {
		place = 0
	}
	switch {
	case err == nil:
		w.redisOK(metrics.OpTime, place)
	case ctx.Err() == nil:
		w.opFailed(metrics.OpTime, place, err, zap.Int("shard", shard))
	}
	return err
}

// housekeeping is what the housekeeping loop keeps between its rounds.
type housekeeping struct {
	lastPrune      time.Time
	sampleFailures []int // by shard: stream samples failed in a row
}

// gaugeFailures is how many stream samples in a row may fail before the
// shard's gauges are removed. Kept for good, a replica cut off from Redis
// went on exporting its last sample, and the alerts take the highest over
// replicas: a backlog long cleared kept ComboStreamBacklog firing.
// Removed at the first failure, a Redis slow enough to fail one sample in
// a few (when the backlog is real) left the series missing at some
// scrapes, and each restarted the alerts' for: countdown.
const gaugeFailures = 3

func (w *Worker) housekeep(ctx context.Context, st *housekeeping) {
	defer func() {
		if p := recover(); p != nil {
			w.panicked(metrics.LoopHousekeeping, loopPanic, p)
		}
	}()
	w.readClocks(ctx)
	w.byClock(func(shards []int) {
		for _, shard := range shards {
			if ctx.Err() != nil {
				return
			}
			w.sampleStream(ctx, st, shard)
		}
	})
	idle := w.cfg.ConsumerIdleDelete
	if idle <= 0 || time.Since(st.lastPrune) < min(idle/10, time.Hour) {
		return
	}
	st.lastPrune = time.Now()
	w.byClock(func(shards []int) {
		for _, shard := range shards {
			if ctx.Err() != nil {
				return
			}
			w.pruneConsumers(ctx, shard, idle)
		}
	})
}

// sampleStream sets shard's stream gauges from a sample, or counts its
// failure, removing them after gaugeFailures in a row. Shards of
// different nodes are sampled at once: each writes only its own
// st.sampleFailures[shard].
func (w *Worker) sampleStream(ctx context.Context, st *housekeeping, shard int) {
	label := strconv.Itoa(shard)
	err := w.op(ctx, func(ctx context.Context) error {
		st, err := w.store.StreamStats(ctx, shard)
		if err == nil {
			w.metrics.StreamLength.WithLabelValues(label).Set(float64(st.Length))
			w.metrics.StreamPending.WithLabelValues(label).Set(float64(st.Pending))
			w.sampleOverdue(shard, label, st.OldestDue)
			w.sampleIDsAhead(shard, label, st.NewestOpened)
		}
		return err
	})
	switch {
	case err == nil:
		st.sampleFailures[shard] = 0
		w.redisOK(metrics.OpStreamStats, shard)
	case ctx.Err() == nil:
		w.redisError(metrics.OpStreamStats, shard, err)
		if st.sampleFailures[shard]++; st.sampleFailures[shard] >= gaugeFailures {
			w.metrics.StreamLength.DeleteLabelValues(label)
			w.metrics.StreamPending.DeleteLabelValues(label)
			w.metrics.StreamOverdue.DeleteLabelValues(label)
			w.metrics.StreamIDsAhead.DeleteLabelValues(label)
		}
	}
}

// pruneConsumers removes shard's consumers idle for idle with nothing
// pending (see housekeepingLoop).
func (w *Worker) pruneConsumers(ctx context.Context, shard int, idle time.Duration) {
	var removed []string
	err := w.op(ctx, func(ctx context.Context) error {
		var err error
		removed, err = w.store.PruneConsumers(ctx, shard, w.cfg.Consumer, idle)
		return err
	})
	if len(removed) > 0 {
		w.metrics.ConsumersGone.Add(float64(len(removed)))
		w.log.Info("removed dead consumers with nothing pending", zap.Int("shard", shard), zap.Strings("consumers", removed))
	}
	switch {
	case err == nil:
		w.redisOK(metrics.OpPruneConsumers, shard)
	case ctx.Err() == nil:
		w.redisError(metrics.OpPruneConsumers, shard, err)
	}
}

// sampleOverdue sets shard's overdue gauge from when its oldest window
// comes due (Redis ms, 0 for none), by this replica's estimate of the
// node's clock. Before the estimate's first reading (every one so far
// failed) the gauge is left as it is, unset or the last sample: this
// host's clock may be off the node's by any amount. A window due ahead of
// the estimate (an id ahead of the node's clock after it jumped back) is
// not overdue.
func (w *Worker) sampleOverdue(shard int, label string, oldestDue int64) {
	q := w.qs[shard]
	switch {
	case oldestDue == 0:
		w.metrics.StreamOverdue.WithLabelValues(label).Set(0)
	case q.clock.known():
		overdue := max(q.clock.now()-oldestDue, 0)
		w.metrics.StreamOverdue.WithLabelValues(label).Set(float64(overdue) / 1000)
	}
}

// sampleIDsAhead sets shard's ids-ahead gauge from when its newest window
// opened (Redis ms by its id, 0 for none), by this replica's estimate of
// the node's clock, left as it is before the estimate's first reading
// (see sampleOverdue). A window opened a moment ago can read a few ms
// ahead, the estimate's error; a step of the clock reads its size.
func (w *Worker) sampleIDsAhead(shard int, label string, newestOpened int64) {
	q := w.qs[shard]
	switch {
	case newestOpened == 0:
		w.metrics.StreamIDsAhead.WithLabelValues(label).Set(0)
	case q.clock.known():
		ahead := max(newestOpened-q.clock.now(), 0)
		w.metrics.StreamIDsAhead.WithLabelValues(label).Set(float64(ahead) / 1000)
	}
}

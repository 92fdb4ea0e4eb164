// Package worker closes windows: it consumes the stream of windows waiting
// to close as a member of the consumer group, holds what it read in a local
// due-time queue and flushes due windows in pipelined batches.
//
// Loops, all started by Start:
//   - one reader per shard: its own pending entries first (id "0", after a
//     restart and after a failed read, whose entries Redis may have
//     delivered), then new ones (">"), with a finite BLOCK;
//   - one claimer: takes over entries idle on another consumer longer than
//     ClaimIdle (XAUTOCLAIM), so a dead replica's windows are published;
//     one per shard with NodePerShard, so that on a Redis Cluster a master
//     that does not answer holds up only its own shards' claims. When a
//     claim fails (its reply lost, maybe after Redis ran it), this
//     consumer's own pending entries of the shard are read again;
//   - one flusher per shard, with its own due queue: sleeps until its
//     earliest due window, flushes all due windows in batches of BatchSize.
//     Per shard, because a shard's windows live on one Redis node: on a
//     Redis Cluster a master that does not answer holds up only its own
//     shards' flushes (go-redis fails a whole cluster pipeline when one
//     node's part times out, answered parts included);
//   - one housekeeper: reads each shard's Redis clock, samples the stream
//     gauges (length, pending count, oldest overdue, ids ahead), writes
//     recovery lines the sampler held back, and removes dead consumers
//     once they have nothing pending and their replica's settings key is
//     gone (putting this replica's own back if it finds it removed).
//
// Shutdown order: stop the readers, the claimers and the housekeeper (nothing new is taken),
// read once more this replica's own pending entries it does not hold and
// what its last RPCs enqueued (new entries up to the newest one at that
// moment), let the flushers
// publish every held window as it comes due, then stop the flushers. What
// is still held when the deadline passes stays pending in Redis for another
// replica (or this one, restarted) to publish.
//
// Every loop survives a bad entry or batch: it recovers, logs, counts and
// goes on.
//
// Files: worker.go the configuration, New and Start; read.go the readers;
// claim.go the claimers; flush.go the flushers, with queue.go (the due
// queue) and clock.go (each node's clock); housekeeping.go; shutdown.go;
// failures.go and recovery.go how failed Redis calls and panics are
// counted and logged; ids.go stream ids; backoff.go.
package worker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// Store is what the worker needs of Redis.
type Store interface {
	EnsureGroup(ctx context.Context, shard int) error
	Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) (ws []repo.Window, bad []repo.BadEntry, deleted []string, err error)
	LastID(ctx context.Context, shard int) (string, error)
	PendingIDs(ctx context.Context, shard int, consumer, start string, count int) ([]string, error)
	Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) (ws []repo.Window, bad []repo.BadEntry, deleted []string, next string, err error)
	Drop(ctx context.Context, shard int, ids []string) error
	Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error)
	Retire(ctx context.Context, w repo.Window) (repo.FlushResult, error)
	Time(ctx context.Context, shard int) (time.Time, error)
	StreamStats(ctx context.Context, shard int) (repo.StreamStats, error)
	PruneConsumers(ctx context.Context, shard int, self string, idle time.Duration) ([]string, error)
}

// ReplyWaiter is a Store that says how long its Redis client waits for
// the reply to one send (its read timeout, redis.timeout) before it gives
// up on it, and may send the command again (the worker's retry, or
// go-redis's own loop on a Redis Cluster), perhaps to a newly promoted
// master. A flush's deadline (Window.NotAfter) must not outlast that
// wait: the first send, held on a paused old master's socket, would
// otherwise still run when that master resumes, after the second was
// published by the new one, and push the window again.
type ReplyWaiter interface {
	ReplyTimeout() time.Duration // 0: no bound but the call's ctx
}

var _ ReplyWaiter = (*repo.Repo)(nil)

// DefaultMaxHeld is the cap on the windows one replica holds when
// Config.MaxHeld is 0. deploy/alerts.yml and README name it
// (ComboStreamUnread's cause "every replica at its cap"); a test there
// keeps them in step with this value.
const DefaultMaxHeld = 200_000

// Config tunes the worker.
type Config struct {
	Consumer  string        // stable name in the consumer group
	Shards    int           // streams to consume
	ClaimIdle time.Duration // take over entries idle longer than this
	// Stale is window.stale: a window claimed later than this after it
	// opened is dropped, so the claimer looks often enough to take a dead
	// replica's windows in the time claim_idle leaves before it (0 = no
	// bound).
	Stale     time.Duration
	ReadCount int           // XREADGROUP COUNT
	BatchSize int           // windows per pipelined flush
	Block     time.Duration // XREADGROUP BLOCK, finite
	// MaxHeld pauses reading and claiming while this many windows are
	// held, so a replica that falls behind leaves entries to the others
	// (0 = DefaultMaxHeld).
	MaxHeld int
	// OpTimeout bounds one Redis call of a loop.
	OpTimeout time.Duration
	// ConsumerIdleDelete: remove consumers idle this long with nothing
	// pending whose replica's settings key is gone (0 = never).
	ConsumerIdleDelete time.Duration
	// SampleEvery is how often stream length and pending count are sampled.
	SampleEvery time.Duration
	// NodePerShard says shards may live on different Redis nodes, whose
	// clocks may differ (a Redis Cluster): each shard's windows are then
	// timed by its own estimate of its node's clock. Otherwise all shards
	// share one estimate, so a jump of the one node's clock learned from
	// any shard's reply retimes them all. (On a cluster the shards of one
	// master do not share theirs: each learns a jump of that master's
	// clock from its own replies or the next housekeeping round.)
	NodePerShard bool
}

func (c *Config) defaults() {
	if c.Shards < 1 {
		c.Shards = 1
	}
	if c.ReadCount < 1 {
		c.ReadCount = 512
	}
	if c.BatchSize < 1 {
		c.BatchSize = 256
	}
	if c.Block <= 0 {
		c.Block = time.Second
	}
	if c.MaxHeld < 1 {
		c.MaxHeld = DefaultMaxHeld
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = 2 * time.Second
	}
	if c.SampleEvery <= 0 {
		c.SampleEvery = 5 * time.Second
	}
}

// Conns is how many Redis connections a worker over shards may hold at
// once on one node, the least its client's pool must have: per shard, one
// held by its reader's blocking read for up to Block, one for its flusher
// (past the client's own pipeline pool) and one for the housekeeper's
// call to its node (a reading of its clock, then a sample of its stream,
// then, now and then, a removal of dead consumers: each step for all
// shards at once on a cluster, one step after another); one for the
// claimer, or with nodePerShard (Config.NodePerShard) one per shard, each
// shard having its own; and one for the housekeeper. With fewer, the
// readers of idle shards hold every connection while the others wait for
// one and fail: windows are read and published late, and dead replicas'
// windows are not taken over.
func Conns(shards int, nodePerShard bool) int {
	shards = max(shards, 1)
	if nodePerShard {
		return 4*shards + 1
	}
	return 3*shards + 2
}

// Worker is one replica's consumer of the window streams.
type Worker struct {
	cfg     Config
	store   Store
	log     *zap.Logger // sampled: repeated failures log about once a second
	metrics *metrics.Metrics
	failing failingOps // Redis ops failing now, to log each recovery once

	qs []*dueQueue // one per shard, each drained by its own flusher, on its node's clock
	// prepared[shard] is set once the shard's group was created or found
	// at start: a group missing after that was lost with Redis's data.
	prepared []atomic.Bool
	// losses[shard] counts the losses of the shard's group this replica
	// has counted. A loop reads it before its Redis call and counts a
	// missing group only if no other loop counted one since: the reader
	// and the claimer both find the group missing after one loss.
	losses []atomic.Uint64

	takeCtx    context.Context // readers and claimer
	stopTaking context.CancelFunc
	takers     sync.WaitGroup

	draining  chan struct{}   // closed: each flusher exits once its queue is empty
	flushCtx  context.Context // done: the flushers exit now, even mid-backoff
	stopFlush context.CancelFunc
	flushDone chan struct{} // closed when every flusher has exited

	startOnce, shutdownOnce sync.Once

	// flushWait is how long a flush's sender waits for the answer to one
	// send of it: OpTimeout, or the store's reply timeout if shorter
	// (ReplyWaiter). Past it the flush must not run (Window.NotAfter).
	flushWait time.Duration

	// heldGauge orders the held_windows gauge's updates: without it a
	// reader and a flusher could each count, then set in the other order,
	// and leave an old count on the gauge until the next change.
	heldGauge sync.Mutex
}

// New returns a worker; Start runs it.
func New(store Store, cfg Config, log *zap.Logger, m *metrics.Metrics) *Worker {
	cfg.defaults()
	flushCtx, stopFlush := context.WithCancel(context.Background())
	qs := make([]*dueQueue, cfg.Shards)
	shared := &redisClock{}
	for i := range qs {
		qs[i] = newDueQueue()
		qs[i].clock = shared
		if cfg.NodePerShard {
			qs[i].clock = &redisClock{}
		}
	}
	flushWait := cfg.OpTimeout
	if rw, ok := store.(ReplyWaiter); ok {
		if d := rw.ReplyTimeout(); d > 0 {
			flushWait = min(flushWait, d)
			if cfg.NodePerShard && cfg.Block > clusterBlock(d) {
				log.Info("worker.block shortened on a Redis Cluster: a read redirected while its slot moves is waited for only redis.timeout",
					zap.Duration("block", clusterBlock(d)), zap.Duration("configured", cfg.Block))
				cfg.Block = clusterBlock(d)
			}
		}
	}
	return &Worker{
		cfg: cfg, store: store, log: log, metrics: m, qs: qs, flushWait: flushWait,
		prepared: make([]atomic.Bool, cfg.Shards), losses: make([]atomic.Uint64, cfg.Shards),
		draining: make(chan struct{}), flushCtx: flushCtx, stopFlush: stopFlush, flushDone: make(chan struct{}),
	}
}

// clusterBlock is the longest BLOCK of a read on a Redis Cluster whose
// client waits replyTimeout for a reply. While a shard's slot is half
// moved, its stream already on the new master, the old one answers a read
// ASK, and go-redis sends it on as a pipeline (ASKING, the read) whose
// reply it waits for only replyTimeout, not replyTimeout plus the BLOCK as
// for a read sent once: with a BLOCK that long every such read failed "i/o
// timeout" (a Redis error counted and logged, its connection dropped) for
// as long as the slot stayed half moved, though Redis answered each.
func clusterBlock(replyTimeout time.Duration) time.Duration {
	return max(replyTimeout/2, time.Millisecond)
}

// Start launches the loops and returns at once; they retry Redis by
// themselves until Shutdown.
func (w *Worker) Start() {
	w.startOnce.Do(func() {
		w.takeCtx, w.stopTaking = context.WithCancel(context.Background())
		var flushers sync.WaitGroup
		for shard, q := range w.qs {
			flushers.Go(func() { w.flushLoop(shard, q) })
		}
		go func() { flushers.Wait(); close(w.flushDone) }()
		// Each shard is prepared and read on its own: on a Redis Cluster
		// with a dead master, the live masters' shards are read at once.
		for shard := 0; shard < w.cfg.Shards; shard++ {
			w.takers.Go(func() {
				if w.prepare(w.takeCtx, shard) {
					w.readLoop(w.takeCtx, shard)
				}
			})
		}
		// Housekeeping's first round reads Redis's clock at once.
		if w.cfg.NodePerShard {
			// Each shard's node on its own (as the readers): a master
			// that does not answer held up the claims of every shard
			// after it for OpTimeout each, every round, and a dead
			// replica's windows there could go stale unpublished.
			for shard := range w.cfg.Shards {
				w.takers.Go(func() { w.claimLoop(w.takeCtx, shard) })
			}
		} else {
			w.takers.Go(func() { w.claimLoop(w.takeCtx, allShards) })
		}
		w.takers.Go(func() { w.housekeepingLoop(w.takeCtx) })
	})
}

// Held is the number of windows this replica holds.
func (w *Worker) Held() int {
	n := 0
	for _, q := range w.qs {
		n += q.holding()
	}
	return n
}

// setHeldGauge sets held_windows to Held(). Counting under the lock makes
// the last update the newest count: each change to a queue happens before
// the count of the update that follows it.
func (w *Worker) setHeldGauge() {
	w.heldGauge.Lock()
	w.metrics.HeldWindows.Set(float64(w.Held()))
	w.heldGauge.Unlock()
}

// Running reports whether the worker has started and not shut down.
func (w *Worker) Running() bool {
	if w.takeCtx == nil {
		return false
	}
	return w.takeCtx.Err() == nil
}

// prepare creates shard's consumer group, retrying until Redis answers or
// the worker stops; it reports whether it succeeded.
func (w *Worker) prepare(ctx context.Context, shard int) bool {
	bo := newBackoff()
	for ctx.Err() == nil {
		err := w.op(ctx, func(ctx context.Context) (err error) {
			defer w.recoverAs(metrics.LoopRead, &err, zap.Int("shard", shard))
			return w.store.EnsureGroup(ctx, shard)
		})
		if err == nil {
			w.redisOK(metrics.OpPrepare, shard)
			w.prepared[shard].Store(true)
			return true
		}
		if ctx.Err() == nil && !errors.Is(err, errRecovered) {
			w.redisError(metrics.OpPrepare, shard, err)
		}
		bo.wait(ctx)
	}
	return false
}

// op runs one Redis call under OpTimeout.
func (w *Worker) op(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	defer cancel()
	return fn(ctx)
}

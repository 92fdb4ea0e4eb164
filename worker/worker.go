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
package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

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

func (w *Worker) readLoop(ctx context.Context, shard int) {
	start := "0" // own pending entries first: they survived our last run
	bo := newBackoff()
	for ctx.Err() == nil {
		if w.Held() >= w.cfg.MaxHeld {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		losses := w.losses[shard].Load()
		n, err := w.readOnce(ctx, shard, start, w.cfg.Block)
		if errors.Is(err, repo.ErrGroupRecreated) {
			w.groupLost(shard, losses, err) // recreated: read it from the start
			start = "0"
			// Redis answered and the group is there again: the next read
			// goes after the shortest wait, not after the backoff of an
			// outage that ended (up to 2 s, every window opened meanwhile
			// pushed that late). Still a wait, should the group go on
			// vanishing.
			bo.reset()
			bo.wait(ctx)
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !errors.Is(err, errRecovered) {
				w.redisError(metrics.OpRead, shard, err)
			}
			// Redis may have delivered the entries and lost only the reply
			// (a timeout, a reset): they are ours now and ">" would never
			// return them again. Read our own pending entries first, as
			// after a restart; those we hold already are skipped.
			start = "0"
			bo.wait(ctx)
			continue
		}
		w.redisOK(metrics.OpRead, shard)
		bo.reset()
		if start != ">" {
			if n.last == "" {
				start = ">"
			} else {
				start = n.last
			}
		}
	}
}

type readResult struct {
	count int
	last  string // last entry id returned
}

// readOnce reads one batch and queues it; a panic on a bad entry is
// recovered and counted so the loop goes on.
func (w *Worker) readOnce(ctx context.Context, shard int, start string, block time.Duration) (res readResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			w.panicked(metrics.LoopRead, loopPanic, p, zap.Int("shard", shard))
			err = fmt.Errorf("worker.read: %w: %v", errRecovered, p)
		}
	}()
	// New entries no more than MaxHeld leaves room for, as the claimer
	// takes: a full ReadCount at the cap went past it by as much per shard.
	// Our own pending entries come in full pages: those held already are
	// skipped, and pages of the room left could take a round trip each.
	count := w.cfg.ReadCount
	if start == ">" {
		count = max(min(count, w.cfg.MaxHeld-w.Held()), 1)
	}
	// The read may block for Block; its timeout must cover that.
	rctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout+max(block, 0))
	defer cancel()
	ws, bad, deleted, err := w.store.Read(rctx, shard, w.cfg.Consumer, start, count, block)
	if err != nil {
		return res, err
	}
	w.dropBad(ctx, shard, bad)
	if len(deleted) > 0 {
		// Our own pending entries, deleted under us (found re-reading them
		// after a restart): lost windows, counted as the claimer counts
		// them. XREADGROUP, unlike XAUTOCLAIM, leaves them pending.
		w.deletedEntries(shard, deleted)
		// Not counted when the stop cut it short, as in dropBad: no
		// Redis failure.
		if err := w.op(ctx, func(ctx context.Context) error { return w.store.Drop(ctx, shard, deleted) }); err != nil && ctx.Err() == nil {
			w.oneOffError(metrics.OpDrop, shard, err)
		}
	}
	w.hold(shard, ws)
	res.count = len(ws) + len(bad) + len(deleted)
	for _, win := range ws {
		res.last = maxID(res.last, win.ID)
	}
	for _, b := range bad {
		res.last = maxID(res.last, b.ID)
	}
	for _, id := range deleted {
		res.last = maxID(res.last, id)
	}
	return res, nil
}

// hold queues windows read from one shard's stream.
func (w *Worker) hold(shard int, ws []repo.Window) int {
	if len(ws) == 0 {
		return 0
	}
	items := make([]dueItem, len(ws))
	for i, win := range ws {
		items[i] = dueItem{w: win, due: win.Due}
	}
	n := w.qs[shard].push(items...)
	w.setHeldGauge()
	return n
}

// badReasonsLogged bounds the reasons one drop line gives (a batch of
// entries of an incompatible version repeats one reason), and
// badReasonBytes each reason, which quotes a field another writer may have
// made as long as it liked: the line stays well under the 16 KB at which
// container runtimes split a line.
const (
	badReasonsLogged = 8
	badReasonBytes   = 256 // JSON may double it (a quoted field of quotes); with 512 ids the line stays near 13 KB
)

func (w *Worker) dropBad(ctx context.Context, shard int, bad []repo.BadEntry) {
	if len(bad) == 0 {
		return
	}
	ids := make([]string, len(bad))
	reasons := make([]string, 0, min(len(bad), badReasonsLogged))
	for i, b := range bad {
		ids[i] = b.ID
		if i < badReasonsLogged {
			reason := b.Err.Error()
			if len(reason) > badReasonBytes {
				reason = strings.ToValidUTF8(reason[:badReasonBytes], "") + "…"
			}
			reasons = append(reasons, reason)
		}
	}
	w.metrics.BadEntries.Add(float64(len(ids)))
	// The reasons quote what each entry held: once dropped, this line is
	// all that is left to tell a version skew from a foreign writer.
	w.log.Warn("dropping stream entries that cannot be flushed", zap.Int("shard", shard),
		zap.Strings("ids", ids), zap.Strings("reasons", reasons))
	if err := w.op(ctx, func(ctx context.Context) error { return w.store.Drop(ctx, shard, ids) }); err != nil && ctx.Err() == nil {
		// They stay pending; the claimer brings them back and we try again.
		w.oneOffError(metrics.OpDrop, shard, err)
	}
}

// deletedEntries counts and logs pending entries found deleted from the
// stream: their windows can no longer be published.
func (w *Worker) deletedEntries(shard int, ids []string) {
	if len(ids) == 0 {
		return
	}
	w.metrics.ClaimDeleted.Add(float64(len(ids)))
	w.log.Warn("pending entries were deleted from the stream before their windows were published",
		zap.Int("shard", shard), zap.Strings("ids", ids))
}

// allShards, as claimLoop's shard: one loop scans every shard in turn.
const allShards = -1

// claimLoop scans shard's pending entries (every shard's, one after
// another, for allShards) for idle ones, again and again until ctx ends.
func (w *Worker) claimLoop(ctx context.Context, shard int) {
	every := max(w.cfg.ClaimIdle/2, 100*time.Millisecond)
	// An entry becomes claimable ClaimIdle after its delivery and is found
	// at the next scan: up to a period later. When window.stale leaves
	// less than that after ClaimIdle (a W near it; claim_idle's default is
	// then halfway between), scanning every ClaimIdle/2 dropped a dead
	// replica's windows stale that could have been published. Scan so that
	// half the room remains for the flush.
	if room := w.cfg.Stale - w.cfg.ClaimIdle; room > 0 {
		every = min(every, max(room/2, 10*time.Millisecond))
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if shard != allShards {
			w.claimOrReread(ctx, shard)
			continue
		}
		for s := 0; s < w.cfg.Shards && ctx.Err() == nil; s++ {
			w.claimOrReread(ctx, s)
		}
	}
}

// claimOrReread scans shard's pending entries for idle ones. When the scan
// fails, Redis may have claimed entries for this consumer and lost only
// the reply (a timeout, a reset), or a panic may have come between the
// claim and holding them: they are ours now, and no claim returns them
// before they idle ClaimIdle again, by when window.stale may have passed.
// So this consumer's own pending entries are read again, as the reader
// does after a failed read; those held already are skipped.
func (w *Worker) claimOrReread(ctx context.Context, shard int) {
	err := w.claimShard(ctx, shard)
	if err == nil || ctx.Err() != nil {
		return
	}
	if !errors.Is(err, errRecovered) {
		w.redisError(metrics.OpClaim, shard, err)
	}
	start := "0"
	for ctx.Err() == nil && w.Held() < w.cfg.MaxHeld {
		n, err := w.readOnce(ctx, shard, start, -1) // own entries: never blocks
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, errRecovered) {
				w.redisError(metrics.OpRead, shard, err)
			}
			return
		}
		w.redisOK(metrics.OpRead, shard)
		if n.last == "" {
			return
		}
		start = n.last
	}
}

// claimShard scans shard's pending entries once, taking over the idle ones.
func (w *Worker) claimShard(ctx context.Context, shard int) (err error) {
	defer func() {
		if p := recover(); p != nil {
			w.panicked(metrics.LoopClaim, loopPanic, p, zap.Int("shard", shard))
			err = fmt.Errorf("worker.claim: %w: %v", errRecovered, p)
		}
	}()
	cursor := "0-0"
	for ctx.Err() == nil {
		// Claim no more than MaxHeld allows: a dead replica may have left
		// far more pending than this one can hold. What is left stays for
		// a replica with room, or for a later round.
		room := w.cfg.MaxHeld - w.Held()
		if room <= 0 {
			return nil
		}
		var ws []repo.Window
		var bad []repo.BadEntry
		var deleted []string
		var next string
		// Read before the claim: the reader may prepare the shard while
		// the claim finds a new Redis's group missing and creates it.
		prepared := w.prepared[shard].Load()
		losses := w.losses[shard].Load()
		err := w.op(ctx, func(ctx context.Context) error {
			var err error
			ws, bad, deleted, next, err = w.store.Claim(ctx, shard, w.cfg.Consumer, w.cfg.ClaimIdle, cursor, min(w.cfg.ReadCount, room))
			return err
		})
		if errors.Is(err, repo.ErrGroupRecreated) {
			w.redisOK(metrics.OpClaim, shard) // Redis answered
			// Before the shard's reader prepared it, a missing group is
			// a new Redis's, not a loss.
			if prepared {
				w.groupLost(shard, losses, err)
			}
			return nil
		}
		if err != nil {
			return err
		}
		w.redisOK(metrics.OpClaim, shard)
		w.deletedEntries(shard, deleted)
		w.dropBad(ctx, shard, bad)
		if n := w.hold(shard, ws); n > 0 {
			w.metrics.Reclaimed.Add(float64(n))
			w.log.Info("took over idle windows", zap.Int("shard", shard), zap.Int("count", n))
		}
		if next == "" || next == "0-0" {
			return nil
		}
		cursor = next
	}
	return nil
}

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

// Shutdown stops taking windows, publishes the held ones as they come due
// and returns when none is held, or with an error when ctx ends first.
func (w *Worker) Shutdown(ctx context.Context) error {
	var err error
	w.shutdownOnce.Do(func() {
		if w.stopTaking == nil { // never started
			return
		}
		w.stopTaking()
		// A reader's blocking read (worker.block) is waited out, for the
		// final reads must not race it; go-redis does not cut it short.
		// Not past the drain's bound: what such a read still takes stays
		// pending, for another replica to claim, and the read ends with
		// the Redis client's Close.
		takersDone := make(chan struct{})
		go func() { w.takers.Wait(); close(takersDone) }()
		select {
		case <-takersDone:
		case <-ctx.Done():
		}
		// The RPC server has stopped; take what its last calls enqueued
		// so this replica's own windows go out before it exits, after our
		// own pending entries that we do not hold (a read cut off by
		// stopTaking, or one whose reply was lost).
		// A Redis that stalls or refuses now would leave windows of
		// acknowledged reports unread, for a replica that may not exist:
		// shards whose read failed are tried again, after the others (on a
		// cluster, a dead master must not keep the live ones unread), until
		// the drain's bound.
		todo := make([]int, w.cfg.Shards)
		for i := range todo {
			todo[i] = i
		}
		var readErr error
		b := newBackoff()
		for len(todo) > 0 && ctx.Err() == nil {
			var failed []int
			for _, shard := range todo {
				rerr := w.finalRead(ctx, shard)
				if rerr == nil {
					w.redisOK(metrics.OpFinalRead, shard)
				} else {
					// Neither a panic (counted as the read loop's) nor
					// the drain's own bound running out is Redis's.
					if !errors.Is(rerr, errRecovered) && ctx.Err() == nil {
						w.redisError(metrics.OpFinalRead, shard, rerr)
					}
					readErr = fmt.Errorf("final read of shard %d: %w", shard, rerr)
					failed = append(failed, shard)
				}
			}
			if todo = failed; len(todo) > 0 {
				b.wait(ctx)
			}
		}
		if len(todo) == 0 {
			readErr = nil
		} else if readErr == nil { // ctx had ended before any final read
			readErr = fmt.Errorf("final read of %d shards not begun: %w", len(todo), ctx.Err())
		}
		// Said here, not before Shutdown: the final reads add this
		// replica's last windows, and a count taken before them read 0
		// next to an error naming 25 windows still held.
		if readErr != nil {
			w.log.Warn("final read failed; publishing the windows held, the rest left pending for another replica",
				zap.Int("held", w.Held()), zap.Int("shards_unread", len(todo)), zap.Error(readErr))
		} else {
			w.log.Info("final read done; publishing held windows", zap.Int("held", w.Held()))
		}
		close(w.draining)
		select {
		case <-w.flushDone:
		case <-ctx.Done():
			w.stopFlush()
			<-w.flushDone
			// select picks at random when the flushers had finished too:
			// then nothing is held, and no flush was cut short.
			if n := w.Held(); n > 0 {
				err = fmt.Errorf("worker.Shutdown: %d windows still held, left pending for another replica: %w", n, ctx.Err())
			}
		}
		if readErr != nil { // ctx ended while the final read failed
			err = errors.Join(err, fmt.Errorf("worker.Shutdown: windows left unread for another replica: %w", readErr))
		}
		w.writeHeldAtExit(ctx)
	})
	return err
}

// writeHeldAtExit writes the recovery lines still held back once every
// loop has ended: the housekeeper, their writer, stopped with the takers,
// before the drain, whose flushes and final reads may hold more. The
// sampler lets a message through once a second, so it tries for a little
// over one, within the drain's bound.
func (w *Worker) writeHeldAtExit(ctx context.Context) {
	deadline := time.Now().Add(1100 * time.Millisecond)
	for {
		if !w.writeHeldRecoveries() || !time.Now().Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// finalRead takes what is left of shard for this replica at shutdown: its
// own pending entries that it does not hold, then new ones up to the
// newest entry in the stream when it began. This replica's RPCs have
// stopped, so every window they opened is at or before that entry; later
// ones are the other replicas' traffic, theirs to read: under their load a
// read that finds nothing new might never come, and the drain would run
// into its bound and leave every window held here to wait claim_idle.
// It stops at MaxHeld, as the reader does: the unread entries before that
// newest one are the other replicas' too, and with every replica at its
// cap they are a backlog that read here would take memory past the cap
// and, not due before the drain's bound, wait claim_idle pending here,
// where left unread any replica with room takes them at once.
func (w *Worker) finalRead(ctx context.Context, shard int) error {
	var last string
	if err := w.op(ctx, func(ctx context.Context) (err error) {
		defer w.recoverAs(metrics.LoopRead, &err, zap.Int("shard", shard))
		last, err = w.store.LastID(ctx, shard)
		return err
	}); err != nil {
		return err
	}
	if w.Held() >= w.cfg.MaxHeld {
		return nil
	}
	// Own pending entries first: each page from just before the next one
	// not held, where they can be listed (XREADGROUP reads own entries
	// after the id it is given), else all of them from the start; then new
	// ones.
	unheld, listed := w.unheldPending(ctx, shard)
	after := func(id string) string {
		if !listed {
			return id
		}
		i, _ := slices.BinarySearchFunc(unheld, id, compareIDs)
		for i < len(unheld) && compareIDs(unheld[i], id) <= 0 {
			i++
		}
		if i == len(unheld) {
			return ">"
		}
		return prevID(unheld[i])
	}
	start := after("0-0")
	for ctx.Err() == nil {
		if w.Held() >= w.cfg.MaxHeld {
			return nil
		}
		losses := w.losses[shard].Load()
		n, err := w.readOnce(ctx, shard, start, -1)
		if errors.Is(err, repo.ErrNoStream) {
			return nil // never written to, and Redis refuses to create it: nothing to read
		}
		if errors.Is(err, repo.ErrGroupRecreated) {
			// A shard whose reader never prepared it (Redis was down
			// since the start) finds a new Redis's group missing: no loss.
			if w.prepared[shard].Load() {
				w.groupLost(shard, losses, err)
			}
			start, listed = "0", false // the list is of a group now gone
			continue
		}
		if err != nil {
			return err
		}
		if start != ">" {
			if n.last == "" {
				start = ">"
			} else {
				start = after(n.last)
			}
			continue
		}
		// ">" reads in id order: past last, everything up to it was
		// delivered, to this replica or to another.
		if n.count == 0 || last == "" || compareIDs(n.last, last) >= 0 {
			return nil
		}
	}
	return ctx.Err()
}

// unheldPending lists, in id order, the entries pending for this replica
// in shard's stream that it does not hold (a read cut off by the stop, a
// lost reply, a window whose flush panicked), by their ids alone
// (XPENDING), so that the final read re-reads those, not every one:
// XREADGROUP re-delivers each entry it returns, its idle time back to 0,
// and windows the drain then could not publish (Redis refusing writes, or
// the drain's bound) would wait claim_idle from the shutdown, not from
// when they were read, before another replica took them; a replica killed
// outright left them better placed. ok is false if the list could not be
// read whole.
func (w *Worker) unheldPending(ctx context.Context, shard int) (ids []string, ok bool) {
	q := w.qs[shard]
	for start := "-"; ctx.Err() == nil; {
		var page []string
		if err := w.op(ctx, func(ctx context.Context) (err error) {
			defer w.recoverAs(metrics.LoopRead, &err, zap.Int("shard", shard))
			page, err = w.store.PendingIDs(ctx, shard, w.cfg.Consumer, start, w.cfg.ReadCount)
			return err
		}); err != nil {
			// Counted, as every other Redis failure here: the re-read from
			// the start that follows re-delivers every held window. Not a
			// missing group, which Redis answered: that re-read finds it
			// missing too and counts the loss.
			if !errors.Is(err, errRecovered) && !errors.Is(err, repo.ErrNoGroup) && ctx.Err() == nil {
				w.redisError(metrics.OpFinalRead, shard, err)
			}
			return nil, false
		}
		for _, id := range page {
			if !q.holds(windowRef{shard, id}) {
				ids = append(ids, id)
			}
		}
		if len(page) < w.cfg.ReadCount {
			return ids, true
		}
		start = nextID(page[len(page)-1])
	}
	return nil, false
}

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

// maxID returns the larger stream id ("ms-seq").
func maxID(a, b string) string {
	if a == "" || compareIDs(b, a) > 0 {
		return b
	}
	return a
}

// prevID is the largest stream id before id ("0-0" for the smallest).
func prevID(id string) string {
	ms, seq := splitID(id)
	switch {
	case seq > 0:
		return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq-1, 10)
	case ms > 0:
		return strconv.FormatUint(ms-1, 10) + "-" + strconv.FormatUint(math.MaxUint64, 10)
	}
	return "0-0"
}

// nextID is the smallest stream id after id.
func nextID(id string) string {
	ms, seq := splitID(id)
	if seq == math.MaxUint64 {
		return strconv.FormatUint(ms+1, 10) + "-0"
	}
	return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq+1, 10)
}

func compareIDs(a, b string) int {
	am, as := splitID(a)
	bm, bs := splitID(b)
	if c := cmp.Compare(am, bm); c != 0 {
		return c
	}
	return cmp.Compare(as, bs)
}

func splitID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

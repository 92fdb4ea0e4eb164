package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

const w = 150 * time.Millisecond

// setup starts a redis-server with the scripts loaded, the group created
// and a subscriber on every push channel.
func setup(t *testing.T) (*repo.Repo, *redis.Client, *redis.PubSub, *metrics.Metrics) {
	return setupShards(t, 1)
}

func setupShards(t *testing.T, shards int) (*repo.Repo, *redis.Client, *redis.PubSub, *metrics.Metrics) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r, sub := prepare(t, rdb, w, shards)
	return r, rdb, sub, metrics.New(prometheus.NewRegistry())
}

// stop shuts wk down, waiting at most 30 s. A worker that never stops (a
// loop that leaks a window or a goroutine) then fails its own test, named,
// instead of hanging the package until go test's timeout, which names
// nothing and costs a CI run its remaining minutes.
func stop(t testing.TB, wk *worker.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := wk.Shutdown(ctx); err != nil && ctx.Err() != nil {
		t.Errorf("the worker did not stop within 30 s: %v", err)
	}
}

// startWorker starts worker c1 on store: it reads every 50 ms and
// neither claims nor samples within a test. It is stopped at cleanup (a
// second Shutdown, after the test's own, does nothing).
func startWorker(t *testing.T, store worker.Store, m *metrics.Metrics) *worker.Worker {
	t.Helper()
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: time.Hour}, zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	return wk
}

// prepare makes a repo on rdb (window W, grace 20ms) with its scripts
// loaded and groups created, and a subscriber on every push channel.
func prepare(t *testing.T, rdb redis.UniversalClient, window time.Duration, shards int) (*repo.Repo, *redis.PubSub) {
	ctx := context.Background()
	r := newRepo(t, rdb, window, shards)
	sub := rdb.PSubscribe(ctx, push.ChannelPattern)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	return r, sub
}

// newRepo makes a repo on rdb (grace 20ms) with its scripts loaded and
// groups created.
func newRepo(t *testing.T, rdb redis.UniversalClient, window time.Duration, shards int) *repo.Repo {
	t.Helper()
	ctx := context.Background()
	r := repo.New(rdb, repo.Settings{Window: window, Grace: 20 * time.Millisecond, Dedupe: time.Minute,
		Stale: time.Minute, Timeout: time.Second, Shards: shards, StreamMaxLen: 100000})
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

func contribution(id, activity int64) *combo.Contribution {
	return &combo.Contribution{Id: id, ActivityId: activity, UserId: 1, ItemId: 1, ItemType: "x", Quantity: 1,
		CreatedAt: time.Now().UnixMilli()}
}

// panicky wraps the real store and panics on the first flush: the loop
// must recover, count it and go on; the window is retried via reclaim.
type panicky struct {
	*repo.Repo
	panicked bool
}

func (p *panicky) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	if !p.panicked {
		p.panicked = true
		panic("boom")
	}
	return p.Repo.Flush(ctx, ws)
}

func TestWorkerSurvivesBadEntryAndPanic(t *testing.T) {
	r, rdb, sub, m := setup(t)
	ctx := context.Background()
	// A malformed entry, as a bug or a hand-edit might leave.
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: r.Keys().Stream(0), Values: []string{"junk", "1"}}).Err(); err != nil {
		t.Fatal(err)
	}
	store := &panicky{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: 500 * time.Millisecond, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)

	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(2, 6)}); err != nil {
		t.Fatal(err)
	}
	got := map[int64]bool{}
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case msg := <-sub.Channel():
			p, err := push.Decode([]byte(msg.Payload))
			if err != nil {
				t.Fatal(err)
			}
			if got[p.ActivityID] {
				t.Fatalf("activity %d pushed twice", p.ActivityID)
			}
			got[p.ActivityID] = true
		case <-deadline:
			t.Fatalf("pushes: %v", got)
		}
	}
	if n := testutil.ToFloat64(m.LoopPanics.WithLabelValues("flush")); n != 1 {
		t.Fatalf("flush panics counted: %v", n)
	}
	if n := testutil.ToFloat64(m.BadEntries); n < 1 {
		t.Fatalf("bad entries counted: %v", n)
	}
	if n := rdb.XLen(ctx, r.Keys().Stream(0)).Val(); n != 0 {
		t.Fatalf("stream holds %d entries", n)
	}
	// A panic on a fresh window retires nothing: Redis keeps it.
	if n := testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(metrics.FlushedStale)); n != 0 {
		t.Fatalf("stale windows %v after one transient panic", n)
	}
}

// panicsOnce wraps the real store; its first Read and first Claim panic,
// as a bug tripped by one reply would.
type panicsOnce struct {
	*repo.Repo
	read, claim atomic.Bool // set once each has panicked
}

func (p *panicsOnce) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	if p.read.CompareAndSwap(false, true) {
		panic("read boom")
	}
	return p.Repo.Read(ctx, shard, consumer, start, count, block)
}

func (p *panicsOnce) Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) ([]repo.Window, []repo.BadEntry, []string, string, error) {
	if p.claim.CompareAndSwap(false, true) {
		panic("claim boom")
	}
	return p.Repo.Claim(ctx, shard, consumer, minIdle, start, count)
}

// A panic in the reader or the claimer is counted as the loop's panic, not
// also as a Redis error: combo_redis_errors_total pages whoever watches
// Redis, and Redis did nothing wrong. The loops go on.
func TestReadAndClaimPanicsAreNotRedisErrors(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &panicsOnce{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: 500 * time.Millisecond, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.Channel():
	case <-time.After(10 * time.Second):
		t.Fatal("the window was not pushed after the reader's panic")
	}
	waitFor(t, "the claimer's panic", func() bool { return testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopClaim)) == 1 })
	if n := testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopRead)); n != 1 {
		t.Fatalf("read panics counted: %v, want 1", n)
	}
	for _, op := range []string{metrics.OpRead, metrics.OpClaim} {
		if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(op)); n != 0 {
			t.Errorf("redis errors counted for %s: %v, want 0 (only a panic happened)", op, n)
		}
	}
}

// panicsPreparing wraps the real store; its first EnsureGroup and first
// LastID panic.
type panicsPreparing struct {
	*repo.Repo
	ensure, last atomic.Bool // set once each has panicked
}

func (p *panicsPreparing) EnsureGroup(ctx context.Context, shard int) error {
	if p.ensure.CompareAndSwap(false, true) {
		panic("ensure boom")
	}
	return p.Repo.EnsureGroup(ctx, shard)
}

func (p *panicsPreparing) LastID(ctx context.Context, shard int) (string, error) {
	if p.last.CompareAndSwap(false, true) {
		panic("last id boom")
	}
	return p.Repo.LastID(ctx, shard)
}

// A panic preparing a shard (EnsureGroup) or in the final read's LastID
// is recovered and counted as the read loop's, and the call is tried
// again: unrecovered, the first ended the process, the second Shutdown.
func TestPanicsPreparingAndInTheFinalReadAreRecovered(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &panicsPreparing{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := wk.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown after a panic in the final read's LastID: %v", err)
	}
	if !store.ensure.Load() || !store.last.Load() {
		t.Fatal("EnsureGroup or LastID never panicked: the test did not test")
	}
	if n := testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopRead)); n != 2 {
		t.Fatalf("read loop panics counted: %v, want 2", n)
	}
	for _, op := range []string{metrics.OpPrepare, metrics.OpFinalRead} {
		if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(op)); n != 0 {
			t.Errorf("%s counted %v Redis errors for a panic, want 0", op, n)
		}
	}
}

// poisoned wraps the real store and panics on every flush that holds a
// window of activity 666, as a bug tripped by one entry would.
type poisoned struct{ *repo.Repo }

func (p poisoned) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	for _, w := range ws {
		if w.ActivityID == 666 {
			panic("bad entry " + w.ID)
		}
	}
	return p.Repo.Flush(ctx, ws)
}

// A window whose flush always panics does not hold back the good windows
// flushed in the same batch: they are published, once, and it alone is
// left pending (counted), not lost.
func TestPanickingWindowDoesNotHoldBackItsBatch(t *testing.T) {
	r, rdb, sub, m := setup(t)
	ctx := context.Background()
	wk := worker.New(poisoned{r}, worker.Config{Consumer: "c1", ClaimIdle: 300 * time.Millisecond, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)

	// One call: both windows open at once and come due in one batch.
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 666), contribution(2, 5), contribution(3, 6)}); err != nil {
		t.Fatal(err)
	}
	got := map[int64]int{}
	deadline := time.After(5 * time.Second)
	for got[5] == 0 || got[6] == 0 {
		select {
		case msg := <-sub.Channel():
			p, err := push.Decode([]byte(msg.Payload))
			if err != nil {
				t.Fatal(err)
			}
			got[p.ActivityID]++
		case <-deadline:
			t.Fatalf("pushes %v after 5 s, want activities 5 and 6; flush panics: %v", got,
				testutil.ToFloat64(m.LoopPanics.WithLabelValues("flush")))
		}
	}
	// The claimer retakes the bad window after ClaimIdle; it panics alone.
	waitFor(t, "the bad window's flush to panic on its own", func() bool { return testutil.ToFloat64(m.BadEntries) >= 2 })
	if got[5] != 1 || got[6] != 1 || got[666] != 0 {
		t.Fatalf("pushes %v, want activities 5 and 6 once each, 666 never", got)
	}
	if n := rdb.XLen(ctx, r.Keys().Stream(0)).Val(); n != 1 {
		t.Fatalf("stream holds %d entries, want the bad window's alone, still pending", n)
	}
}

// Every window whose flush panics on its own is named in the log, under
// the sampled logger the service gives the worker: the batch's panic and
// its windows', raised in the same instant, once shared one message, and
// the sampler kept only the batch's line, which names no window.
func TestWindowsWhoseFlushPanicsAreNamed(t *testing.T) {
	r, _, _, m := setup(t)
	core, logs := observer.New(zapcore.InfoLevel)
	wk := worker.New(poisoned{r}, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		logging.Sampled(zap.New(core).Named("worker"), nil), m)
	wk.Start()
	defer stop(t, wk)
	second := contribution(4, 666)
	second.UserId = 2 // a second bad window in the same batch
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 666), second, contribution(2, 5), contribution(3, 6)}); err != nil {
		t.Fatal(err)
	}
	named := func() map[string]bool {
		named := map[string]bool{}
		for _, e := range logs.All() {
			if ids, ok := e.ContextMap()["ids"].([]any); ok && e.Level == zapcore.ErrorLevel {
				for _, id := range ids {
					named[id.(string)] = true
				}
			}
		}
		return named
	}
	// The line naming them is written once the whole batch has been
	// flushed one window at a time.
	waitFor(t, "both bad windows named in the log", func() bool { return len(named()) == 2 })
	if got := testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopFlush)); got != 3 {
		t.Fatalf("flush panics counted %v, want 3: the batch's and each window's", got)
	}
}

// One bad window in a batch is named too: the batch's line names none,
// and the line naming the windows that panicked on their own must not
// wait for a second one.
func TestAWindowWhoseFlushPanicsAloneInItsBatchIsNamed(t *testing.T) {
	r, _, _, m := setup(t)
	core, logs := observer.New(zapcore.InfoLevel)
	wk := worker.New(poisoned{r}, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		logging.Sampled(zap.New(core).Named("worker"), nil), m)
	wk.Start()
	defer stop(t, wk)
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 666), contribution(2, 5)}); err != nil {
		t.Fatal(err)
	}
	// The line naming it is written once the batch has been flushed one
	// window at a time.
	waitFor(t, "the bad window named in the log", func() bool {
		for _, e := range logs.All() {
			if ids, ok := e.ContextMap()["ids"].([]any); ok && e.Level == zapcore.ErrorLevel && len(ids) == 1 {
				return true
			}
		}
		return false
	})
}

// switchable panics on every flush of a window of activity 666 while on,
// and on every retire too while retireToo is.
type switchable struct {
	*repo.Repo
	on, retireToo atomic.Bool
}

func (s *switchable) Retire(ctx context.Context, w repo.Window) (repo.FlushResult, error) {
	if s.retireToo.Load() {
		panic("retire " + w.ID)
	}
	return s.Repo.Retire(ctx, w)
}

func (s *switchable) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	for _, w := range ws {
		if s.on.Load() && w.ActivityID == 666 {
			panic("bad entry " + w.ID)
		}
	}
	return s.Repo.Flush(ctx, ws)
}

// A window whose flush always panics is taken back and panics again every
// ClaimIdle only until it is stale by Redis's clock: then Redis retires
// it, its data with its entry, as a flush would, and it is counted stale.
// A later report of its combo key opens a new window, which is pushed.
func TestPanickingWindowIsRetiredOnceStale(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	r := repo.New(rdb, repo.Settings{Window: w, Grace: 20 * time.Millisecond, Dedupe: time.Minute,
		Stale: 800 * time.Millisecond, Timeout: time.Second, Shards: 1, StreamMaxLen: 100000})
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	sub := rdb.PSubscribe(ctx, push.ChannelPattern)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry())
	store := &switchable{Repo: r}
	store.on.Store(true)
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: 300 * time.Millisecond, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	bad := contribution(1, 666)
	if _, err := r.Report(ctx, []*combo.Contribution{bad}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bad window to be retired stale", func() bool {
		return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(metrics.FlushedStale)) == 1
	})
	if n := testutil.ToFloat64(m.BadEntries); n < 2 {
		t.Fatalf("bad entries %v: want its flush to have panicked, and been retried, before it was retired", n)
	}
	if n := rdb.XLen(ctx, r.Keys().Stream(0)).Val(); n != 0 {
		t.Fatalf("stream holds %d entries after the retire", n)
	}
	if n := rdb.Exists(ctx, r.Keys().Current(0, 666, 1, "x")).Val(); n != 0 {
		t.Fatal("the retired window's data is left for later reports to join")
	}
	store.on.Store(false)
	late := contribution(2, 666)
	late.CreatedAt = bad.CreatedAt // would have joined the old window
	res, err := r.Report(ctx, []*combo.Contribution{late})
	if err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("report after the retire: %+v %v, want a new window", res, err)
	}
	msg := nextPush(t, sub)
	if p, err := push.Decode([]byte(msg.Payload)); err != nil || p.Record.ID != 2 || p.Record.Quantity != 1 {
		t.Fatalf("push %s, want the new window of report 2 alone", msg.Payload)
	}
}

// A panic while retiring a window whose flush panicked is recovered too:
// the loop goes on, the good windows are pushed, the bad one stays pending.
func TestPanicWhileRetiringIsRecovered(t *testing.T) {
	r, rdb, sub, m := setup(t)
	ctx := context.Background()
	store := &switchable{Repo: r}
	store.on.Store(true)
	store.retireToo.Store(true)
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: 300 * time.Millisecond, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 666), contribution(2, 5)}); err != nil {
		t.Fatal(err)
	}
	msg := nextPush(t, sub)
	if p, err := push.Decode([]byte(msg.Payload)); err != nil || p.ActivityID != 5 {
		t.Fatalf("push %s, want activity 5's", msg.Payload)
	}
	// Batch, alone, retire; then again after the claim.
	waitFor(t, "panics while retiring, recovered", func() bool { return testutil.ToFloat64(m.LoopPanics.WithLabelValues("flush")) >= 4 })
	if n := rdb.XLen(ctx, r.Keys().Stream(0)).Val(); n != 1 {
		t.Fatalf("stream holds %d entries, want the bad window's, pending", n)
	}
}

// A restarted consumer with the same name finds its own pending entries
// (read with id 0) and publishes them; another consumer reclaims those of
// a consumer that never comes back.
func TestPendingEntriesAreRecovered(t *testing.T) {
	r, _, sub, m := setup(t)
	ctx := context.Background()
	for i := range 4 {
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(int64(10+i), int64(100+i))}); err != nil {
			t.Fatal(err)
		}
	}
	// "dead" reads two entries and crashes (never flushes); "gone" reads two more.
	if ws, _, _, err := r.Read(ctx, 0, "dead", ">", 2, -1); err != nil || len(ws) != 2 {
		t.Fatalf("read: %v %v", ws, err)
	}
	if ws, _, _, err := r.Read(ctx, 0, "gone", ">", 2, -1); err != nil || len(ws) != 2 {
		t.Fatalf("read: %v %v", ws, err)
	}
	log := zaptest.NewLogger(t)
	// "dead" restarts under the same name: it publishes its two at once.
	restarted := worker.New(r, worker.Config{Consumer: "dead", ClaimIdle: time.Hour, Block: 50 * time.Millisecond}, log, m)
	restarted.Start()
	defer stop(t, restarted)
	waitPushes(t, sub, 2)
	// Another replica takes over "gone"'s entries once idle past ClaimIdle.
	other := worker.New(r, worker.Config{Consumer: "other", ClaimIdle: 400 * time.Millisecond, Block: 50 * time.Millisecond}, log, m)
	start := time.Now()
	other.Start()
	defer stop(t, other)
	waitPushes(t, sub, 2)
	if d := time.Since(start); d > 400*time.Millisecond+2*time.Second {
		t.Fatalf("reclaim took %s", d)
	}
	// The claimer counts what it took after handing it to the flusher,
	// which may publish it first: wait for the count, do not sample it.
	waitFor(t, "2 entries counted reclaimed", func() bool { return testutil.ToFloat64(m.Reclaimed) >= 2 })
	if n := testutil.ToFloat64(m.Reclaimed); n != 2 {
		t.Fatalf("reclaimed %v, want 2", n)
	}
}

// An entry deleted from the stream (by hand, or trimmed) while pending
// is a lost window, found either way: by a replica restarted under its
// name, re-reading its own pending entries, or by the claimer, taking a
// dead consumer's over (XAUTOCLAIM hands it back as deleted). Either way
// it is counted as the lost-entries alert watches, not as an entry that
// cannot be parsed (it was counted in combo_bad_entries_total, and no
// alert said a window was lost); it leaves the pending list, and the
// other window is pushed.
func TestDeletedPendingEntryIsCountedLost(t *testing.T) {
	for _, tc := range []struct {
		name, reader string // the consumer that read both entries
		cfg          worker.Config
	}{
		{"own, re-read after a restart", "c1", worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond}},
		{"a dead consumer's, claimed", "dead", worker.Config{Consumer: "live", ClaimIdle: 300 * time.Millisecond, Block: 50 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, rdb, sub, m := setup(t)
			ctx := context.Background()
			readTwoThenDeleteOne(t, r, rdb, tc.reader)
			wk := worker.New(r, tc.cfg, zaptest.NewLogger(t), m)
			wk.Start()
			defer stop(t, wk)
			waitPushes(t, sub, 1)
			waitFor(t, "an empty pending list", func() bool {
				return rdb.XPending(ctx, r.Keys().Stream(0), repo.Group).Val().Count == 0
			})
			if n := testutil.ToFloat64(m.ClaimDeleted); n != 1 {
				t.Errorf("deleted pending entries counted: %v, want 1", n)
			}
			if n := testutil.ToFloat64(m.BadEntries); n != 0 {
				t.Errorf("bad entries counted: %v, want 0", n)
			}
		})
	}
}

// A replica that starts while Redis is full (maxmemory with noeviction,
// as README asks) reads and flushes its windows: those commands work under
// OOM, and XGROUP CREATE, refused then even for an existing group, is not
// waited for. (It was: no push came until memory was freed.)
func TestWorkerStartsWhileRedisRefusesWrites(t *testing.T) {
	r, rdb, sub, m := setup(t)
	ctx := context.Background()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.ConfigSet(context.Background(), "maxmemory", "0") })
	if err := rdb.XGroupCreateMkStream(ctx, r.Keys().Stream(0), repo.Group, "0").Err(); err == nil ||
		!strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("XGROUP CREATE under maxmemory 1: %v, want OOM (the case this test is about)", err)
	}
	wk := worker.New(r, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	waitPushes(t, sub, 1)
}

func waitPushes(t *testing.T, sub *redis.PubSub, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for range n {
		select {
		case <-sub.Channel():
		case <-deadline:
			t.Fatalf("fewer than %d pushes", n)
		}
	}
}

// refusing answers every flush with an error for each window, as Redis does
// while it refuses writes (MISCONF, NOREPLICAS, READONLY), until allowed.
type refusing struct {
	*repo.Repo
	allowed atomic.Bool
	calls   atomic.Int64
}

func (s *refusing) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	s.calls.Add(1)
	if !s.allowed.Load() {
		out := make([]repo.FlushResult, len(ws))
		for i := range out {
			out[i].Err = errors.New("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk")
		}
		return out, nil
	}
	return s.Repo.Flush(ctx, ws)
}

// A window whose flush Redis keeps refusing is retried with growing delays,
// not in a busy loop, and is published once Redis accepts it again.
func TestFlushErrorsBackOff(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &refusing{Repo: r}
	wk := startReported(t, store, r, m)
	defer stop(t, wk)
	defer store.allowed.Store(true) // first: on a failure, stop's drain would retry to its bound
	waitFor(t, "a flush of the window", func() bool { return store.calls.Load() > 0 })
	first := store.calls.Load()
	// Over a second of refusals: 100, 200 and 400 ms apart, a handful of
	// tries (the busy loop this replaces made thousands).
	time.Sleep(time.Second)
	if n := store.calls.Load() - first; n > 10 {
		t.Fatalf("%d flush calls in a second of refusals, want a few", n)
	}
	if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues("flush_script")); n < 2 {
		t.Fatalf("flush_script errors counted: %v, want the refusals", n)
	}
	store.allowed.Store(true)
	waitPushes(t, sub, 1)
}

// lossy delivers the first new-entries read and loses its reply, as a read
// timeout or a connection reset after Redis answered would.
type lossy struct {
	*repo.Repo
	lost atomic.Bool
	// stall: once the reply is lost, the reader's own reads (they block;
	// Shutdown's do not) hang until the worker stops taking.
	stall bool
}

func (s *lossy) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	if s.stall && s.lost.Load() && block > 0 {
		<-ctx.Done()
		return nil, nil, nil, ctx.Err()
	}
	ws, bad, del, err := s.Repo.Read(ctx, shard, consumer, start, count, block)
	if err == nil && start == ">" && len(ws) > 0 && s.lost.CompareAndSwap(false, true) {
		return nil, nil, nil, errors.New("read tcp: i/o timeout")
	}
	return ws, bad, del, err
}

// Entries whose read reply was lost are ours in Redis; the reader finds
// them again among its own pending entries, long before a claimer would.
func TestLostReadReplyIsReadAgain(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &lossy{Repo: r}
	wk := startReported(t, store, r, m)
	defer stop(t, wk)
	waitPushes(t, sub, 1)
	if !store.lost.Load() {
		t.Fatal("no read reply was lost: the test did not test anything")
	}
}

// Shutdown publishes this replica's own pending entries that it does not
// hold (here: a read whose reply was lost just before the stop), not only
// new ones.
func TestShutdownPublishesOwnPendingNotHeld(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &lossy{Repo: r, stall: true}
	wk := startReported(t, store, r, m)
	waitFor(t, "a lost read reply", store.lost.Load)
	if wk.Held() != 0 {
		t.Fatalf("held %d: want the entry pending in Redis and not held", wk.Held())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- wk.Shutdown(ctx) }()
	waitPushes(t, sub, 1)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// startReported starts a worker (consumer c1, nothing claimed) on store and
// reports one contribution through r.
func startReported(t *testing.T, store worker.Store, r *repo.Repo, m *metrics.Metrics) *worker.Worker {
	t.Helper()
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	return wk
}

// timeCounting counts the worker's reads of Redis's clock (prepare, the
// housekeeper).
type timeCounting struct {
	*repo.Repo
	times atomic.Int64
}

func (s *timeCounting) Time(ctx context.Context, shard int) (time.Time, error) {
	defer s.times.Add(1)
	return s.Repo.Time(ctx, shard)
}

// startClockWorker starts a worker whose first housekeeping round has read
// Redis's clock (a later skew is not overwritten by that reading).
func startClockWorker(t *testing.T, r *repo.Repo, m *metrics.Metrics, sampleEvery time.Duration) (*worker.Worker, *timeCounting) {
	t.Helper()
	store := &timeCounting{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond, SampleEvery: sampleEvery},
		zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	waitFor(t, "the worker reading Redis's clock", wk.ClockRead)
	return wk, store
}

// nextPush is the next message on sub, within 10 s: a push that never
// comes fails the test instead of hanging the package until go test's
// timeout.
func nextPush(t *testing.T, sub *redis.PubSub) *redis.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("no push within 10 s: %v", err)
	}
	return msg
}

// waitFor waits for cond, failing the test after testwait.Deadline.
var waitFor = testwait.For

// An estimate of Redis's clock that is 2 s behind (as after a failover to a
// master whose clock is ahead) makes one window late; its flush reply says
// how late, and the next window goes out on time.
func TestFlushRepliesCorrectTheClock(t *testing.T) {
	r, _, sub, m := setup(t)
	wk, _ := startClockWorker(t, r, m, time.Hour)
	wk.SkewClock(-2000)
	report := func(id, activity int64) time.Duration {
		start := time.Now()
		if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(id, activity)}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sub.Channel():
			return time.Since(start)
		case <-time.After(10 * time.Second):
			t.Fatal("no push")
			return 0
		}
	}
	if took := report(1, 5); took < time.Second {
		t.Fatalf("first window pushed %s after its report: the estimate was not 2 s behind", took)
	}
	// Due 170 ms after its report; generous margin, far below the 2 s skew.
	if took := report(2, 6); took > time.Second {
		t.Fatalf("second window pushed %s after its report, want on time: the reply did not correct the clock", took)
	}
}

// On one Redis (not a cluster) the shards share one estimate of its clock:
// a jump learned from one shard's flush reply retimes every shard. With an
// estimate per shard, shard 1's next window went out 2 s late too.
func TestClockJumpLearnedByOneShardRetimesTheOthers(t *testing.T) {
	r, _, sub, m := setupShards(t, 2)
	wk := worker.New(r, worker.Config{Consumer: "c1", Shards: 2, ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: time.Hour}, zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	waitFor(t, "the worker reading Redis's clock", wk.ClockRead)
	wk.SkewClock(-2000)
	onShard := func(s int, from int64) int64 {
		for a := from; ; a++ {
			if c := contribution(1, a); r.Keys().Shard(c.ActivityId, c.UserId, c.ItemType) == s {
				return a
			}
		}
	}
	report := func(id, activity int64) time.Duration {
		start := time.Now()
		if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(id, activity)}); err != nil {
			t.Fatal(err)
		}
		waitPushes(t, sub, 1)
		return time.Since(start)
	}
	a0 := onShard(0, 1)
	if took := report(1, a0); took < time.Second {
		t.Fatalf("first window pushed %s after its report: the estimate was not 2 s behind", took)
	}
	if took := report(2, onShard(1, a0+1)); took > time.Second {
		t.Fatalf("window on shard 1 (same Redis) pushed %s after its report: the jump learned from shard 0 did not retime it",
			took.Round(time.Millisecond))
	}
}

// A window already queued on shard 1 while the shared estimate is 2 s
// behind is retimed when housekeeping learns the jump through shard 0's
// node (on one Redis it reads only one shard's): every flusher on that
// estimate is woken, not only shard 0's.
func TestClockJumpLearnedThroughShard0WakesShard1(t *testing.T) {
	r, _, sub, m := setupShards(t, 2)
	wk := worker.New(r, worker.Config{Consumer: "c1", Shards: 2, ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: 400 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	waitFor(t, "the worker reading Redis's clock", wk.ClockRead)
	var a int64
	for a = 1; ; a++ {
		if c := contribution(1, a); r.Keys().Shard(c.ActivityId, c.UserId, c.ItemType) == 1 {
			break
		}
	}
	wk.SkewClock(-2000)
	start := time.Now()
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, a)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	// Due 170 ms after the report; housekeeping reads within 400 ms.
	if took := time.Since(start); took > 1200*time.Millisecond {
		t.Fatalf("shard 1's window pushed %s after its report: the reading through shard 0 did not wake shard 1's flusher",
			took.Round(time.Millisecond))
	}
}

// The housekeeper reads Redis's clock again, so a wrong estimate is
// corrected even while no window is flushed.
func TestHousekeeperResyncsTheClock(t *testing.T) {
	r, _, _, m := setup(t)
	wk, store := startClockWorker(t, r, m, 50*time.Millisecond)
	wk.SkewClock(-2000)
	before := store.times.Load()
	waitFor(t, "two more housekeeping rounds", func() bool { return store.times.Load() >= before+2 })
	redisNow, err := r.Time(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := redisNow.UnixMilli() - wk.ClockNow(); d < -100 || d > 100 {
		t.Fatalf("estimate %d ms off Redis's clock after the housekeeper ran", d)
	}
}

// Shutdown's deadline stops the flusher at once, even while it waits to
// retry a window Redis keeps refusing (its waits grow to 5 s): the
// deadline is the operator's bound on how long a stop takes.
func TestShutdownDeadlineCutsFlushBackoff(t *testing.T) {
	r, _, _, m := setup(t)
	store := &refusing{Repo: r}
	wk := startReported(t, store, r, m)
	// Six refusals: the window's waits have grown past a second.
	waitFor(t, "six refused flushes", func() bool { return store.calls.Load() >= 6 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := wk.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown reported the refused window published")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Shutdown with a 100ms deadline took %s", d)
	}
}

// windowsDueInAMinute starts a Redis with a repo of W = 1 minute (nothing
// comes due during a test) and opens n windows there, ids and activities
// 1..n.
func windowsDueInAMinute(t *testing.T, n int64) (*repo.Repo, *redis.Client) {
	t.Helper()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r, _ := prepare(t, rdb, time.Minute, 1)
	for id := int64(1); id <= n; id++ {
		if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(id, id)}); err != nil {
			t.Fatal(err)
		}
	}
	return r, rdb
}

// startLeavingHeld starts a worker that the test's end shuts down within
// 100 ms, leaving what it holds (windows a minute from due) pending.
func startLeavingHeld(t *testing.T, r *repo.Repo, cfg worker.Config) *worker.Worker {
	t.Helper()
	wk := worker.New(r, cfg, zaptest.NewLogger(t), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = wk.Shutdown(ctx)
	})
	return wk
}

// The claimer holds no more than MaxHeld either: a dead replica may leave
// far more pending than one replica can hold.
func TestClaimerStopsAtMaxHeld(t *testing.T) {
	ctx := context.Background()
	r, _ := windowsDueInAMinute(t, 5)
	// A replica read all five and died.
	if ws, _, _, err := r.Read(ctx, 0, "dead", ">", 10, -1); err != nil || len(ws) != 5 {
		t.Fatalf("read %d windows: %v", len(ws), err)
	}
	wk := startLeavingHeld(t, r, worker.Config{Consumer: "c1", Shards: 1, ClaimIdle: 50 * time.Millisecond,
		Block: 50 * time.Millisecond, MaxHeld: 2})
	// One XAUTOCLAIM would take all five at once.
	waitFor(t, "windows claimed", func() bool { return wk.Held() >= 2 })
	// Claim rounds run every 100 ms: watch five of them.
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if h := wk.Held(); h != 2 {
			t.Fatalf("holding %d windows, MaxHeld 2", h)
		}
	}
}

// The reader takes no more new entries than MaxHeld leaves room for: at
// 2 of MaxHeld 3, a read of ReadCount 2 held 4.
func TestReaderStopsAtMaxHeld(t *testing.T) {
	ctx := context.Background()
	r, rdb := windowsDueInAMinute(t, 10)
	wk := startLeavingHeld(t, r, worker.Config{Consumer: "c1", Shards: 1, ClaimIdle: time.Hour,
		Block: 50 * time.Millisecond, ReadCount: 2, MaxHeld: 3})
	// Once it holds MaxHeld the reader starts no read, so what it holds
	// then is all it ever read.
	waitFor(t, "the reader at MaxHeld", func() bool { return wk.Held() >= 3 })
	p, err := rdb.XPending(ctx, r.Keys().Stream(0), repo.Group).Result()
	if err != nil {
		t.Fatal(err)
	}
	if h := wk.Held(); h != 3 || p.Count != 3 {
		t.Fatalf("holding %d windows, %d read, MaxHeld 3", h, p.Count)
	}
}

// On a Redis refusing writes (OOM), a shard whose stream was never created
// has nothing to read: Shutdown publishes the other shard's window and
// returns at once. (It retried the final read of the empty shard, whose
// group cannot be created then, until its deadline, and failed.)
func TestShutdownUnderOOMWithAShardThatHasNoStream(t *testing.T) {
	r, rdb, sub, m := setupShards(t, 2)
	ctx := context.Background()
	var c *combo.Contribution
	for a := int64(1); ; a++ {
		if c = contribution(1, a); r.Keys().Shard(c.ActivityId, c.UserId, c.ItemType) == 0 {
			break
		}
	}
	if _, err := r.Report(ctx, []*combo.Contribution{c}); err != nil {
		t.Fatal(err)
	}
	// setupShards created both streams; shard 1's is gone, as on a Redis
	// where nothing was ever reported there.
	if err := rdb.Del(ctx, r.Keys().Stream(1)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.ConfigSet(context.Background(), "maxmemory", "0") })
	wk := worker.New(r, worker.Config{Consumer: "c1", Shards: 2, ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	waitPushes(t, sub, 1)
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	if err := wk.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
}

// skewedRedis presents the real Redis as one whose clock runs skew ms ahead
// of this host's: every Redis time the worker sees (entry due times, TIME,
// early flush replies) is shifted by skew. Its first TIME answers late (a
// far node, or a cluster master that is down and retried).
type skewedRedis struct {
	*repo.Repo
	skew      int64
	firstSlow time.Duration
	times     atomic.Int64
}

func (s *skewedRedis) shift(ws []repo.Window) []repo.Window {
	for i := range ws {
		ws[i].Due += s.skew
	}
	return ws
}

func (s *skewedRedis) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	ws, bad, del, err := s.Repo.Read(ctx, shard, consumer, start, count, block)
	return s.shift(ws), bad, del, err
}

func (s *skewedRedis) Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) ([]repo.Window, []repo.BadEntry, []string, string, error) {
	ws, bad, del, next, err := s.Repo.Claim(ctx, shard, consumer, minIdle, start, count)
	return s.shift(ws), bad, del, next, err
}

func (s *skewedRedis) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	res, err := s.Repo.Flush(ctx, ws)
	for i := range res {
		if res[i].Status == repo.Early {
			res[i].Due += s.skew
			res[i].Now += s.skew
		}
	}
	return res, err
}

func (s *skewedRedis) Time(ctx context.Context, shard int) (time.Time, error) {
	if s.times.Add(1) == 1 {
		time.Sleep(s.firstSlow)
	}
	t, err := s.Repo.Time(ctx, shard)
	return t.Add(time.Duration(s.skew) * time.Millisecond), err
}

// A window read before the worker's first reading of Redis's clock is timed
// by this host's clock; when the reading comes, the flusher looks again.
// With Redis's clock 3 s ahead it went out 3 s late before (and past
// window.stale, never).
func TestWindowReadBeforeTheFirstClockReadingGoesOutOnTime(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &skewedRedis{Repo: r, skew: 3000, firstSlow: 200 * time.Millisecond}
	start := time.Now()
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	waitPushes(t, sub, 1)
	// Due W + grace = 170 ms after the report, and the reading comes at
	// 200 ms; the skew was 3 s.
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Fatalf("window pushed %s after its report, want well under the 3s skew", took.Round(time.Millisecond))
	}
}

// hangingFlush is the real store whose flushes never answer: they wait
// out their context.
type hangingFlush struct {
	*repo.Repo
	started chan struct{}
}

func (s *hangingFlush) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	select {
	case s.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A flush that Shutdown's deadline cuts short is the stop, not a failure of
// Redis: combo_redis_errors_total stays as it was (it counted one at every
// stop that left a flush under way, for alerts on Redis errors to see).
func TestShutdownDeadlineCountsNoRedisError(t *testing.T) {
	r, _, _, m := setup(t)
	store := &hangingFlush{Repo: r, started: make(chan struct{}, 1)}
	wk := startReported(t, store, r, m)
	select {
	case <-store.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no flush began")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := wk.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown reported the hung window published")
	}
	if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpFlush)); n != 0 {
		t.Fatalf("combo_redis_errors_total{op=\"flush\"} = %v after a stop cut a flush short, want 0", n)
	}
}

// readTwoThenDeleteOne opens two windows, has consumer read both (so both
// are pending on it), then deletes the first's entry from the stream, as
// a trim or a hand would.
func readTwoThenDeleteOne(t *testing.T, r *repo.Repo, rdb *redis.Client, consumer string) {
	t.Helper()
	ctx := context.Background()
	for i := range 2 {
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(int64(10+i), int64(100+i))}); err != nil {
			t.Fatal(err)
		}
	}
	ws, _, _, err := r.Read(ctx, 0, consumer, ">", 2, -1)
	if err != nil || len(ws) != 2 {
		t.Fatalf("read: %v %v", ws, err)
	}
	if err := rdb.XDel(ctx, r.Keys().Stream(0), ws[0].ID).Err(); err != nil {
		t.Fatal(err)
	}
}

// An entry the worker drops as unflushable is logged with why, quoting what
// it held: once XDEL'd, the log line is all that is left of it.
func TestBadEntriesAreLoggedWithTheirReasons(t *testing.T) {
	r, rdb, _, m := setup(t)
	ctx := context.Background()
	for _, values := range [][]string{{"junk", "1"}, {"k", "7:42:99:rose"}, {"k", strings.Repeat("x", 100_000)},
		{"a", "7", "u", "42", "t", "rose"}} { // the last an entry of 8c32588 or earlier
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: r.Keys().Stream(0), Values: values}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	core, logs := observer.New(zapcore.InfoLevel)
	wk := worker.New(r, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zap.New(core), m)
	wk.Start()
	defer stop(t, wk)
	// The count goes up just before the line is written, so this waits
	// for the lines too: all four entries' ids logged.
	dropLines := func() []observer.LoggedEntry {
		return logs.FilterMessage("dropping stream entries that cannot be flushed").All()
	}
	waitFor(t, "the entries dropped and logged", func() bool {
		logged := 0
		for _, e := range dropLines() {
			if ids, ok := e.ContextMap()["ids"].([]any); ok {
				logged += len(ids)
			}
		}
		return testutil.ToFloat64(m.BadEntries) == 4 && logged == 4
	})

	var reasons []string
	for _, e := range dropLines() {
		for _, f := range e.Context {
			if f.Key == "reasons" {
				reasons = append(reasons, fmt.Sprint(f.Interface))
			}
		}
	}
	// A field as long as its writer liked is cut: the line stays short.
	if n := len(strings.Join(reasons, " ")); n > 4<<10 {
		t.Errorf("drop lines' reasons hold %d bytes, want a few KB at most", n)
	}
	got := strings.Join(reasons, " ")
	for _, want := range []string{`no field "k"`, `7:42:99:rose`, `fields ["a" "t" "u"]`} {
		if !strings.Contains(got, want) {
			t.Errorf("drop lines gave reasons %q, want one naming %s", got, want)
		}
	}
}

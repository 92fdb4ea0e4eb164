package worker_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// The two-window case of TestPanickingWindowDoesNotHoldBackItsBatch: a
// batch whose flush panics is split when it holds more than one window,
// two included. Split only above two, a bad window flushed beside one good
// one took it down with it: both forgotten and counted bad, left pending,
// and claimed back together (both idle alike) to panic together again,
// until window.stale dropped the good one unpublished.
func TestPanickingBatchOfTwoIsSplit(t *testing.T) {
	r, rdb, sub, m := setup(t)
	ctx := context.Background()
	// One call opens both windows, but their entries may fall in two
	// milliseconds, due one after the other: a flusher awake at the first
	// would flush it alone. Started once both are due, the worker reads
	// them in one read and flushes them in one batch.
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 666), contribution(2, 5)}); err != nil {
		t.Fatal(err)
	}
	entries, err := rdb.XRange(ctx, r.Keys().Stream(0), "-", "+").Result()
	if err != nil || len(entries) != 2 {
		t.Fatalf("stream entries %v, %v: want the two windows'", entries, err)
	}
	opened, _, _ := strings.Cut(entries[1].ID, "-")
	ms, _ := strconv.ParseInt(opened, 10, 64)
	// Due W + grace (170 ms) after they opened: wait until well past
	// that by Redis's clock.
	waitFor(t, "both windows due", func() bool {
		now, err := rdb.Time(ctx).Result()
		return err == nil && now.UnixMilli() > ms+(w+100*time.Millisecond).Milliseconds()
	})
	wk := worker.New(poisoned{r}, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	// The good window is let go of only once it is published (or counted
	// bad with the other, unsplit).
	waitFor(t, "the batch's panic dealt with", func() bool { return testutil.ToFloat64(m.BadEntries) >= 1 && wk.Held() == 0 })
	if bad, pub := testutil.ToFloat64(m.BadEntries), testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(metrics.FlushedPublished)); bad != 1 || pub != 1 {
		t.Fatalf("%v windows counted bad and %v published from a batch of one bad window and one good, want 1 and 1", bad, pub)
	}
	if n := testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopFlush)); n != 2 {
		t.Fatalf("flush panics counted %v, want 2: the batch's and the bad window's alone", n)
	}
	p, err := push.Decode([]byte(nextPush(t, sub).Payload))
	if err != nil {
		t.Fatal(err)
	}
	if p.ActivityID != 5 {
		t.Fatalf("pushed activity %d, want the good window's, 5", p.ActivityID)
	}
}

// failSchedule fails the calls it is asked about: the first outage of
// them (an outage long enough to back a loop off), lets the next through
// (Redis is back), fails the one after (a single blip) and lets every
// later one through. It notes when each call began.
type failSchedule struct {
	outage int
	mu     sync.Mutex
	at     []time.Time
}

func (f *failSchedule) fails() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = append(f.at, time.Now())
	n := len(f.at)
	return n <= f.outage || n == f.outage+2
}

// blipRetried is how long after the single blip its call was tried again,
// once it has been.
func (f *failSchedule) blipRetried() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.at) < f.outage+3 {
		return 0, false
	}
	return f.at[f.outage+2].Sub(f.at[f.outage+1]), true
}

// blipOutage is how many calls in a row fail before Redis is back: 50 ms
// doubling, the backoff's step is then 1.6 s, its wait 0.8 to 1.6 s, where
// a reset one waits 25 to 50 ms.
const blipOutage = 5

// blipBound is the most a single failure after a success may be waited
// out: the backoff's first step (50 ms) and room for a loaded machine,
// well short of the 800 ms an outage's backoff kept waits.
const blipBound = 300 * time.Millisecond

// blippingReads is the real store whose reader's reads (they block; the
// final reads and the claimer's re-reads do not) fail as sched says.
type blippingReads struct {
	*repo.Repo
	sched failSchedule
}

func (s *blippingReads) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	if block > 0 && s.sched.fails() {
		return nil, nil, nil, errors.New("read tcp 127.0.0.1:6379: i/o timeout")
	}
	return s.Repo.Read(ctx, shard, consumer, start, count, block)
}

// A read that works resets the reader's backoff: a single failed read
// after an outage is retried within the backoff's first step, not after
// the outage's wait (up to 2 s), which held every window opened meanwhile
// that much past its due time.
func TestReadBackoffResetsOnceAReadWorks(t *testing.T) {
	r, _, _, m := setup(t)
	store := &blippingReads{Repo: r, sched: failSchedule{outage: blipOutage}}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	var d time.Duration
	waitFor(t, "the blip's read retried", func() (ok bool) { d, ok = store.sched.blipRetried(); return ok })
	t.Logf("read retried %s after the blip", d.Round(time.Millisecond))
	if d > blipBound {
		t.Fatalf("a read failing once after a read that worked was retried after %s, want at most %s (the backoff's first step, 50 ms): the outage's backoff was kept",
			d.Round(time.Millisecond), blipBound)
	}
}

// blippingFlushes is the real store whose flushes fail as sched says.
type blippingFlushes struct {
	*repo.Repo
	sched failSchedule
}

func (s *blippingFlushes) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	if s.sched.fails() {
		return nil, errors.New("read tcp 127.0.0.1:6379: i/o timeout")
	}
	return s.Repo.Flush(ctx, ws)
}

// A flush that works resets the flusher's backoff: a single failed flush
// after an outage holds up the shard's other due windows for the backoff's
// first step, not for the outage's wait (up to 2 s). Each flush is of one
// window (BatchSize 1) and many are due: a failed window waits its own
// 200 ms (retryLater), the next one only the flusher's backoff.
func TestFlushBackoffResetsOnceAFlushWorks(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &blippingFlushes{Repo: r, sched: failSchedule{outage: blipOutage}}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond, BatchSize: 1},
		zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = wk.Shutdown(ctx)
	})
	// Enough windows, all due at once, that one never tried is left due
	// when the blip's flush fails.
	const n = 10
	cs := make([]*combo.Contribution, n)
	for i := range cs {
		cs[i] = contribution(int64(i+1), int64(100+i))
	}
	if _, err := r.Report(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	var d time.Duration
	waitFor(t, "the flush after the blip's", func() (ok bool) { d, ok = store.sched.blipRetried(); return ok })
	t.Logf("next flush %s after the blip", d.Round(time.Millisecond))
	if d > blipBound {
		t.Fatalf("a due window was flushed %s after a single failed flush that followed one that worked, want at most %s (the backoff's first step, 50 ms): the outage's backoff was kept",
			d.Round(time.Millisecond), blipBound)
	}
	waitPushes(t, sub, n) // and all go out
}

// Two live replicas reading one stream take none of each other's
// entries: the claimer takes only entries idle longer than claim_idle. A
// claim of any idle time took a window from the replica that had just read
// it (counted reclaimed, delivered again), every round, and both replicas
// held it.
func TestLiveReplicasClaimNoneOfEachOthersEntries(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	r, _ := prepare(t, rdb, time.Minute, 1) // nothing comes due during the test
	type replica struct {
		wk     *worker.Worker
		m      *metrics.Metrics
		claims *claimCounting
	}
	var rs []replica
	for _, name := range []string{"a", "b"} {
		rp := replica{m: metrics.New(prometheus.NewRegistry()), claims: &claimCounting{Repo: r}}
		// Stale just past ClaimIdle: the claimer scans every 100 ms, and
		// no entry idles 10 s during the test.
		rp.wk = worker.New(rp.claims, worker.Config{Consumer: name, ClaimIdle: 10 * time.Second, Stale: 10*time.Second + 200*time.Millisecond,
			Block: 50 * time.Millisecond}, zaptest.NewLogger(t), rp.m)
		rp.wk.Start()
		t.Cleanup(func() { // leaves its windows, a minute from due, pending
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_ = rp.wk.Shutdown(ctx)
		})
		rs = append(rs, rp)
	}
	const n = 6
	for i := range n {
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(int64(i+1), int64(100+i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every window read", func() bool { return rs[0].wk.Held()+rs[1].wk.Held() >= n })
	var before [2]int64
	for i, rp := range rs {
		before[i] = rp.claims.calls[0].Load()
	}
	waitFor(t, "three claim rounds of each replica", func() bool {
		return rs[0].claims.calls[0].Load() >= before[0]+3 && rs[1].claims.calls[0].Load() >= before[1]+3
	})
	for i, rp := range rs {
		if got := testutil.ToFloat64(rp.m.Reclaimed); got != 0 {
			t.Errorf("replica %d took over %v entries of a live replica, want 0", i, got)
		}
	}
	t.Logf("a holds %d windows, b %d", rs[0].wk.Held(), rs[1].wk.Held())
	if a, b := rs[0].wk.Held(), rs[1].wk.Held(); a+b != n {
		t.Errorf("replicas hold %d and %d windows, want %d in all: each once", a, b, n)
	}
	pending, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: r.Keys().Stream(0), Group: repo.Group, Start: "-", End: "+", Count: 2 * n}).Result()
	if err != nil {
		t.Fatal(err)
	}
	owned := map[string]int{}
	for _, p := range pending {
		owned[p.Consumer]++
		if p.RetryCount != 1 {
			t.Errorf("entry %s delivered %d times, to %s last, want once: claimed from a live reader", p.ID, p.RetryCount, p.Consumer)
		}
	}
	if len(pending) != n || owned["a"] != rs[0].wk.Held() || owned["b"] != rs[1].wk.Held() {
		t.Errorf("pending %d entries, %v by consumer; want %d, a's %d and b's %d: each its reader's",
			len(pending), owned, n, rs[0].wk.Held(), rs[1].wk.Held())
	}
}

// parkedReader is the real store whose reader, once park is set, waits
// out of Redis before its next read until released, so that a loss of the
// group reaches only the claimer, which it notes.
type parkedReader struct {
	*repo.Repo
	park      atomic.Bool
	parked    chan struct{} // closed when the reader waits
	parkOnce  sync.Once
	release   chan struct{}
	found     atomic.Bool  // a claim found the group missing
	readsDone atomic.Int32 // reader's reads answered after its release
}

func (s *parkedReader) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	if block <= 0 {
		return s.Repo.Read(ctx, shard, consumer, start, count, block)
	}
	released := false
	if s.park.Load() {
		s.parkOnce.Do(func() { close(s.parked) })
		select {
		case <-s.release:
			released = true
		case <-ctx.Done():
			return nil, nil, nil, ctx.Err()
		}
	}
	ws, bad, del, err := s.Repo.Read(ctx, shard, consumer, start, count, block)
	if released || !s.park.Load() && s.found.Load() {
		s.readsDone.Add(1)
	}
	return ws, bad, del, err
}

func (s *parkedReader) Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) ([]repo.Window, []repo.BadEntry, []string, string, error) {
	ws, bad, del, next, err := s.Repo.Claim(ctx, shard, consumer, minIdle, start, count)
	if errors.Is(err, repo.ErrGroupRecreated) {
		s.found.Store(true)
	}
	return ws, bad, del, next, err
}

// A group lost after the shard was prepared is counted when the claimer
// finds it missing first: it creates the group again, and the reader's
// next read finds it there and counts nothing. The claimer counts a
// missing group only for a prepared shard (one missing before that is a
// new Redis's): with the shard never marked prepared, such a loss went
// uncounted, and it is the loss's only sign.
func TestGroupLossFoundFirstByTheClaimerIsCounted(t *testing.T) {
	r, rdb, _, m := setup(t)
	ctx := context.Background()
	store := &parkedReader{Repo: r, parked: make(chan struct{}), release: make(chan struct{})}
	wk := worker.New(store, worker.Config{Consumer: "a", ClaimIdle: 200 * time.Millisecond, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	store.park.Store(true)
	select { // the reader has prepared the shard and waits, not in Redis
	case <-store.parked:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader never read")
	}
	if err := rdb.XGroupDestroy(ctx, r.Keys().Stream(0), repo.Group).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claimer finding the group missing", store.found.Load)
	store.park.Store(false)
	close(store.release)
	waitFor(t, "the reader reading twice since", func() bool { return store.readsDone.Load() >= 2 })
	if n := testutil.ToFloat64(m.GroupsRecreated); n != 1 {
		t.Fatalf("groups recreated %v, want 1: the loss the claimer found", n)
	}
	// Redis answered the claim: a lost group is no Redis error.
	if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpClaim)); n != 0 {
		t.Errorf("redis claim errors counted: %v, want 0", n)
	}
}

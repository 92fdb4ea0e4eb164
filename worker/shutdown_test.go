package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// stalledFinalRead wraps the real store. While blind, the readers' BLOCK
// reads see nothing, as if their replies had not come back before the
// stop; then the first fail reads without BLOCK (Shutdown's final read)
// fail, as against a Redis stalled during a deploy; those of dead's shard,
// when set, always fail, as against a dead cluster master.
type stalledFinalRead struct {
	*repo.Repo
	blind    atomic.Bool
	inFlight atomic.Int32 // real BLOCK reads under way
	fail     atomic.Int32
	dead     atomic.Int32 // 1 + the shard whose final reads always fail; 0: none
}

func (s *stalledFinalRead) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	if block >= 0 {
		if s.blind.Load() {
			<-ctx.Done()
			return nil, nil, nil, nil
		}
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
	} else if int(s.dead.Load()) == shard+1 || s.fail.Add(-1) >= 0 {
		return nil, nil, nil, errors.New("read tcp: i/o timeout (injected)")
	}
	return s.Repo.Read(ctx, shard, consumer, start, count, block)
}

// A final read that fails (Redis stalled) is retried within Shutdown's
// bound: the window of a report acknowledged just before the stop is read
// and published, not left for a replica that may not exist.
func TestShutdownRetriesAFailedFinalRead(t *testing.T) {
	r, _, sub, m := setup(t)
	ctx := context.Background()
	store, wk := blindWorker(t, r, m, 1)
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 9)}); err != nil {
		t.Fatal(err)
	}
	store.fail.Store(3)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := wk.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := store.fail.Load(); n >= 0 {
		t.Fatalf("%d injected failures left: the final read was not retried past them", n)
	}
	select {
	case <-sub.Channel():
	case <-time.After(2 * time.Second):
		t.Fatal("the window of a report acknowledged before the stop was not published")
	}
}

// blindWorker starts a worker over r whose readers then stop seeing new
// entries (see stalledFinalRead), and returns its store.
func blindWorker(t *testing.T, r *repo.Repo, m *metrics.Metrics, shards int) (*stalledFinalRead, *worker.Worker) {
	t.Helper()
	store := &stalledFinalRead{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", Shards: shards, ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	store.blind.Store(true)
	for store.inFlight.Load() > 0 { // a read already under way could take the entry
		time.Sleep(time.Millisecond)
	}
	return store, wk
}

// A shard whose final read keeps failing (its cluster master is dead) does
// not keep the others unread: the window on the live shard is published,
// and Shutdown says, once its bound ends, what it left.
func TestShutdownFinalReadOfDeadShardSparesTheOthers(t *testing.T) {
	r, _, sub, m := setupShards(t, 2)
	ctx := context.Background()
	store, wk := blindWorker(t, r, m, 2)
	activity := int64(1)
	for r.Keys().Shard(activity, 1, "x") != 1 {
		activity++
	}
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, activity)}); err != nil {
		t.Fatal(err)
	}
	store.dead.Store(1) // shard 0
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := wk.Shutdown(sctx)
	if err == nil || !strings.Contains(err.Error(), "final read of shard 0") {
		t.Errorf("Shutdown with shard 0's reads failing: %v, want it to name the unread shard", err)
	}
	select {
	case <-sub.Channel():
	case <-time.After(2 * time.Second):
		t.Fatal("the live shard's window was not published: the dead shard's retries starved it")
	}
}

// busyFinalRead wraps the real store: before each of Shutdown's final
// reads of new entries, another replica's RPC opens a window, as under a
// load that opens windows faster than one read takes (10,000 a second
// with 1 ms reads).
type busyFinalRead struct {
	*repo.Repo
	other atomic.Int64 // the other replica's last contribution id
	reads atomic.Int32 // final reads of new entries
}

func (s *busyFinalRead) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	if block < 0 && start == ">" {
		s.reads.Add(1)
		id := s.other.Add(1)
		if _, err := s.Repo.Report(ctx, []*combo.Contribution{contribution(id, id)}); err != nil {
			return nil, nil, nil, err
		}
	}
	return s.Repo.Read(ctx, shard, consumer, start, count, block)
}

// Shutdown's final read takes what this replica's last RPCs enqueued, not
// the traffic other replicas keep taking: it read new entries until a read
// found none, which under load never came, so the stop ran into its bound,
// returned an error (exit 1), and left every window it held, its own
// acknowledged ones included, to wait claim_idle for another replica.
func TestShutdownFinalReadEndsUnderOthersLoad(t *testing.T) {
	r, _, sub, m := setup(t)
	ctx := context.Background()
	store := &busyFinalRead{Repo: r}
	store.other.Store(1000)
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	own := contribution(1, 1)
	if _, err := r.Report(ctx, []*combo.Contribution{own}); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	if err := wk.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown after %s and %d final reads: %v", time.Since(start).Round(time.Millisecond), store.reads.Load(), err)
	}
	for {
		select {
		case msg := <-sub.Channel():
			if strings.Contains(msg.Payload, `"activity_id":1,`) {
				return
			}
		case <-time.After(2 * time.Second):
			t.Fatal("this replica's own window was not published before Shutdown returned")
		}
	}
}

// blindReads is the real store whose reads find nothing: windows reported
// stay unread.
type blindReads struct{ *repo.Repo }

func (blindReads) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	return nil, nil, nil, nil
}

// Shutdown given a context already ended reads nothing more, and says so.
// It said only that no window was still held ("0 windows still held"), or,
// had its flushers finished before it looked, nothing at all, though a
// window of this replica's last reports was left unread.
func TestShutdownWithAnEndedContextSaysWindowsWereLeftUnread(t *testing.T) {
	r, _, _, m := setup(t)
	wk := startReported(t, blindReads{r}, r, m)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := wk.Shutdown(ctx)
	if err == nil || !strings.Contains(err.Error(), "left unread") {
		t.Fatalf("Shutdown with an ended context: %v; want it to say windows were left unread", err)
	}
	// Nothing was held: the error does not say "0 windows still held".
	if strings.Contains(err.Error(), "still held") {
		t.Fatalf("Shutdown with nothing held: %v; want no held windows named", err)
	}
}

// finalReadsOnly is the real store whose reader loop finds nothing (each
// read waits its BLOCK, as on an empty stream), so only Shutdown's final
// read, which does not block, takes the windows reported.
type finalReadsOnly struct{ *repo.Repo }

func (s finalReadsOnly) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	if block >= 0 {
		select {
		case <-time.After(block):
		case <-ctx.Done():
		}
		return nil, nil, nil, nil
	}
	return s.Repo.Read(ctx, shard, consumer, start, count, block)
}

// Shutdown says how many windows it publishes once its final read has
// taken this replica's last ones: said before that read, the count was 0
// next to an error naming the windows still held.
func TestShutdownSaysWhatItHoldsAfterTheFinalRead(t *testing.T) {
	const n = 3
	r, _ := windowsDueInAMinute(t, n)
	core, logs := observer.New(zapcore.InfoLevel)
	wk := worker.New(finalReadsOnly{r}, worker.Config{Consumer: "c1", Shards: 1, ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zap.New(core), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	if wk.Held() != 0 {
		t.Fatalf("%d windows held before Shutdown, want none (the reader reads nothing)", wk.Held())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := wk.Shutdown(ctx); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d windows still held", n)) {
		t.Fatalf("Shutdown: %v, want the %d windows (a minute from due) the final read took left held", err, n)
	}
	said := logs.FilterMessage("final read done; publishing held windows").All()
	if len(said) != 1 || said[0].ContextMap()["held"] != int64(n) {
		t.Fatalf("logs %v, want one line saying %d windows held after the final read", logs.All(), n)
	}
}

// The final read stops at MaxHeld, as the reader does: a backlog left
// unread because every replica is at its cap is the other replicas' too.
// Taken by a stopping replica, it went past the cap and, not due before
// the drain's bound, waited claim_idle pending on it.
func TestShutdownFinalReadStopsAtMaxHeld(t *testing.T) {
	ctx := context.Background()
	const n = 50
	r, rdb := windowsDueInAMinute(t, n)
	wk := worker.New(r, worker.Config{Consumer: "c1", Shards: 1, ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		ReadCount: 2, MaxHeld: 2}, zaptest.NewLogger(t), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	waitFor(t, "the reader at MaxHeld", func() bool { return wk.Held() == 2 })
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := wk.Shutdown(sctx); err == nil || !strings.Contains(err.Error(), "2 windows still held") {
		t.Fatalf("Shutdown: %v, want the 2 held windows (a minute from due) left pending", err)
	}
	stream := r.Keys().Stream(0)
	pending, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: repo.Group, Start: "-", End: "+", Count: n}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 2 {
		t.Fatalf("%d entries pending on the stopped replica, want its 2 held (MaxHeld)", len(pending))
	}
	ws, _, _, err := r.Read(ctx, 0, "c2", ">", n, -1)
	if err != nil || len(ws) != n-2 {
		t.Fatalf("another replica read %d windows (%v), want the %d left unread", len(ws), err, n-2)
	}
}

// A drain cut short leaves the windows it holds pending as they were read:
// the final read does not read them again, which would re-deliver each (its
// idle time back to 0, its delivery count up), so that another replica's
// claimer took them claim_idle after the shutdown instead of after the
// read, and with a tight window.stale dropped them stale.
func TestShutdownCutShortLeavesHeldWindowsAsRead(t *testing.T) {
	r, rdb, _, m := setup(t)
	store := &refusing{Repo: r} // Redis refuses every flush: the drain cannot publish
	wk := startReported(t, store, r, m)
	waitFor(t, "the window held and its flush refused", func() bool { return wk.Held() == 1 && store.calls.Load() > 0 })
	if got := deliveriesAfterADrainCutShort(t, wk, rdb, r, 1); got[0] != 1 {
		t.Fatalf("the window left pending was delivered %d times: the final read re-delivered it, resetting its idle time", got[0])
	}
}

// deliveriesAfterADrainCutShort shuts wk down with too little time to
// publish the held windows it must report left, and returns how many times
// each entry left pending was delivered, in id order.
func deliveriesAfterADrainCutShort(t *testing.T, wk *worker.Worker, rdb *redis.Client, r *repo.Repo, held int) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := wk.Shutdown(ctx); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d windows still held", held)) {
		t.Fatalf("Shutdown = %v, want %d windows left held", err, held)
	}
	pe, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{
		Stream: r.Keys().Stream(0), Group: repo.Group, Start: "-", End: "+", Count: int64(held) + 10}).Result()
	if err != nil || len(pe) != held {
		t.Fatalf("pending %+v %v, want %d", pe, err, held)
	}
	out := make([]int64, len(pe))
	for i, p := range pe {
		out[i] = p.RetryCount
	}
	return out
}

// losingRefusing refuses every flush, and loses the reply of a read of new
// entries while lose is set (once per setting).
type losingRefusing struct {
	refusing
	lose atomic.Bool
}

func (s *losingRefusing) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	ws, bad, del, err := s.Repo.Read(ctx, shard, consumer, start, count, block)
	if err == nil && start == ">" && len(ws) > 0 && s.lose.CompareAndSwap(true, false) {
		return nil, nil, nil, nil
	}
	return ws, bad, del, err
}

// Own pending entries the replica does not hold (their read replies were
// lost) are read again at shutdown, each page from just before the next
// of them: the windows it holds, listed over several pages, keep their one
// delivery, but for those a page of ReadCount (2 here) takes along after
// a lost one.
func TestShutdownRereadsOwnPendingNotHeld(t *testing.T) {
	for _, tc := range []struct {
		lost []int64
		want []int64 // deliveries of windows 1..8
	}{
		{[]int64{6, 8}, []int64{1, 1, 1, 1, 1, 2, 2, 2}}, // 7 comes along with 6
		{[]int64{1}, []int64{2, 2, 1, 1, 1, 1, 1, 1}},    // 2 comes along with 1
		{[]int64{2, 7}, []int64{1, 2, 2, 1, 1, 1, 2, 2}},
	} {
		t.Run(fmt.Sprint("lost ", tc.lost), func(t *testing.T) {
			r, rdb, _, m := setup(t)
			ctx := context.Background()
			store := &losingRefusing{}
			store.Repo = r
			wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond, ReadCount: 2},
				zaptest.NewLogger(t), m)
			wk.Start()
			held := 0
			for id := int64(1); id <= 8; id++ {
				lost := slices.Contains(tc.lost, id)
				store.lose.Store(lost)
				if _, err := r.Report(ctx, []*combo.Contribution{contribution(id, id)}); err != nil {
					t.Fatal(err)
				}
				if lost {
					waitFor(t, "the read reply lost", func() bool { return !store.lose.Load() })
				} else {
					held++
					waitFor(t, "the window held", func() bool { return wk.Held() == held })
				}
			}
			// All 8 held by then (the lost ones read again), left pending.
			if got := deliveriesAfterADrainCutShort(t, wk, rdb, r, 8); !slices.Equal(got, tc.want) {
				t.Fatalf("windows 1..8 delivered %v times, want %v", got, tc.want)
			}
		})
	}
}

// unlistable fails every listing of own pending entries.
type unlistable struct{ *repo.Repo }

func (unlistable) PendingIDs(context.Context, int, string, string, int) ([]string, error) {
	return nil, errors.New("read tcp: i/o timeout (injected)")
}

// A listing of own pending entries that fails at shutdown is counted as the
// final read's Redis error, and the final read still reads them all (from
// the start, as before the listing).
func TestShutdownCountsAFailedListingAndReadsAll(t *testing.T) {
	r, _, sub, m := setup(t)
	wk := startReported(t, unlistable{r}, r, m)
	waitFor(t, "the window held", func() bool { return wk.Held() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := wk.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpFinalRead)); n != 1 {
		t.Fatalf("combo_redis_errors_total{op=final_read} %v, want the failed listing counted once", n)
	}
}

// blindWhileRunning is the real store whose blocking reads find nothing:
// the reader does not notice what happens to the stream until the final
// read, which does not block. blind counts the reads it answered so
// (the first comes once the reader prepared its shard).
type blindWhileRunning struct {
	*repo.Repo
	blind atomic.Int32
}

func (s *blindWhileRunning) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	if block > 0 {
		s.blind.Add(1)
		return nil, nil, nil, nil
	}
	return s.Repo.Read(ctx, shard, consumer, start, count, block)
}

// A stream lost just before SIGTERM is one loss, counted as such: the final
// read's listing of its own pending entries, which finds no group, is not
// also a Redis error (it logged "redis final_read failed; retrying" and
// counted one, though Redis answered and nothing was retried).
func TestShutdownAfterTheStreamIsLostCountsOnlyTheLoss(t *testing.T) {
	r, rdb, _, m := setup(t)
	store := &blindWhileRunning{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	waitFor(t, "the shard prepared and read", func() bool { return store.blind.Load() > 0 })
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := wk.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpFinalRead)); n != 0 {
		t.Errorf("combo_redis_errors_total{op=final_read} %v, want 0: Redis answered", n)
	}
	if n := testutil.ToFloat64(m.GroupsRecreated); n != 1 {
		t.Errorf("combo_groups_recreated_total %v, want the loss counted once", n)
	}
}

// The drain's bound holds even while a reader's blocking read
// (worker.block) is under way: go-redis does not cut it short, and
// Shutdown waited it out however long it was (a worker.block of an hour
// held SIGTERM for that hour). What that read still takes stays pending.
func TestShutdownDoesNotWaitOutABlockingReadPastItsBound(t *testing.T) {
	r, rdb, _, m := setup(t)
	wk := worker.New(r, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 20 * time.Second,
		SampleEvery: time.Hour}, zaptest.NewLogger(t), m)
	wk.Start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := rdb.Info(context.Background(), "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info, "blocked_clients:0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no reader blocked in XREADGROUP within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := wk.Shutdown(ctx)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Shutdown took %v with a 300ms bound: it waited out the 20 s blocking read", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want its bound's error (the final read not begun)", err)
	}
}

// finalNewReads counts the final read's reads of new entries (">").
type finalNewReads struct {
	*stalledFinalRead
	n atomic.Int32
}

func (s *finalNewReads) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	if block < 0 && start == ">" {
		s.n.Add(1)
	}
	return s.stalledFinalRead.Read(ctx, shard, consumer, start, count, block)
}

// The final read stops at the stream's last entry as Shutdown found it: a
// read that ends on that entry is the last. One more would take entries
// other replicas' callers wrote since, which this stopping replica would
// then hold and publish, its drain longer by up to W + grace.
func TestShutdownFinalReadStopsAtTheLastEntry(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &finalNewReads{stalledFinalRead: &stalledFinalRead{Repo: r}}
	store.blind.Store(true) // the readers see nothing: the final read finds all three
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	for i := range 3 {
		if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(int64(i+1), int64(i+1))}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := wk.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 3)
	if n := store.n.Load(); n != 1 {
		t.Fatalf("%d final reads of new entries, want 1: the first ended on the last entry", n)
	}
}

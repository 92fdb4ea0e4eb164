package worker_test

import (
	"context"
	"errors"
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
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// panicsAfterDelivery wraps the real store; its first read of
// new entries that returns a window panics after Redis delivered it, as a
// bug parsing or holding the batch would: the entries are pending on this
// consumer, and no later ">" read returns them.
type panicsAfterDelivery struct {
	*repo.Repo
	panicked atomic.Bool
}

func (p *panicsAfterDelivery) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	ws, bad, deleted, err := p.Repo.Read(ctx, shard, consumer, start, count, block)
	if start == ">" && len(ws) > 0 && p.panicked.CompareAndSwap(false, true) {
		panic("boom after delivery")
	}
	return ws, bad, deleted, err
}

// A read that panics after Redis delivered its entries is survived, and
// its windows are read again from this consumer's own pending entries and
// published at once, not left pending until another replica (or this one)
// claims them claim_idle later, perhaps too late for window.stale.
func TestWindowsOfAReadThatPanickedAreReadAgain(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &panicsAfterDelivery{Repo: r}
	startWorker(t, store, m) // ClaimIdle 1 h: no claim brings them back
	ctx := context.Background()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 5), contribution(2, 6)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 2)
	if !store.panicked.Load() {
		t.Fatal("the read never panicked: the test did not test anything")
	}
	if n := testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopRead)); n != 1 {
		t.Errorf("read panics counted: %v, want 1", n)
	}
}

// An entry that cannot be flushed, the only one a final read of new
// entries returns, does not end the final read: the window behind it,
// of a report this replica acknowledged before its stop, is read and
// published, not left pending for claim_idle.
func TestShutdownFinalReadGoesOnPastABadEntry(t *testing.T) {
	r, rdb, sub, m := setup(t)
	ctx := context.Background()
	store := &stalledFinalRead{Repo: r}
	store.blind.Store(true) // the readers see nothing: the final read finds both
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond, ReadCount: 1},
		zaptest.NewLogger(t), m)
	wk.Start()
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: r.Keys().Stream(0), Values: []string{"junk", "1"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := wk.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	waitPushes(t, sub, 1)
	if n := testutil.ToFloat64(m.BadEntries); n != 1 {
		t.Errorf("bad entries counted: %v, want 1", n)
	}
}

// panicsAfterClaim wraps the real store; its first claim that takes a
// window panics after Redis ran it, as a bug holding what it took would:
// the entries are pending on this consumer now, idle from 0 again.
type panicsAfterClaim struct {
	*repo.Repo
	panicked atomic.Bool
	at       atomic.Int64 // when, unix ns
}

func (p *panicsAfterClaim) Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) ([]repo.Window, []repo.BadEntry, []string, string, error) {
	ws, bad, deleted, next, err := p.Repo.Claim(ctx, shard, consumer, minIdle, start, count)
	if len(ws) > 0 && p.panicked.CompareAndSwap(false, true) {
		p.at.Store(time.Now().UnixNano())
		panic("boom after claim")
	}
	return ws, bad, deleted, next, err
}

// A claim that panics after Redis moved a dead replica's entries to this
// consumer is survived, and those windows are read again from its own
// pending entries and published at once: treated as a claim that took
// nothing, they waited claim_idle more, idle from the claim, before the
// next claim took them (window.stale may pass meanwhile).
func TestWindowsOfAClaimThatPanickedAreReadAgain(t *testing.T) {
	r, rdb, sub, m := setup(t)
	ctx := context.Background()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	ws, _, _, err := r.Read(ctx, 0, "dead", ">", 1, -1)
	if err != nil || len(ws) != 1 {
		t.Fatalf("read: %v %v", ws, err)
	}
	// Idle for an hour already: the first claim takes it.
	if err := rdb.Do(ctx, "XCLAIM", r.Keys().Stream(0), repo.Group, "dead", 0, ws[0].ID, "IDLE", 3_600_000).Err(); err != nil {
		t.Fatal(err)
	}
	const claimIdle = 5 * time.Second
	store := &panicsAfterClaim{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "live", ClaimIdle: claimIdle, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	waitPushes(t, sub, 1)
	// Taken again by a claim, it would come claim_idle after the panic at
	// the soonest; read again, a moment after it.
	if !store.panicked.Load() {
		t.Fatal("the claim never panicked: the test did not test anything")
	}
	if d := time.Since(time.Unix(0, store.at.Load())); d >= claimIdle-time.Second {
		t.Fatalf("published %s after the claim's panic: it waited for another claim", d)
	}
	if n := testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopClaim)); n != 1 {
		t.Errorf("claim panics counted: %v, want 1", n)
	}
}

// lostReplyAt is the real store whose first claim that takes windows
// loses its reply (see lostClaimReply), saying when.
type lostReplyAt struct {
	*repo.Repo
	lost atomic.Bool
	at   atomic.Int64 // unix ns
}

func (s *lostReplyAt) Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) ([]repo.Window, []repo.BadEntry, []string, string, error) {
	ws, bad, del, next, err := s.Repo.Claim(ctx, shard, consumer, minIdle, start, count)
	if err == nil && len(ws) > 0 && s.lost.CompareAndSwap(false, true) {
		s.at.Store(time.Now().UnixNano())
		return nil, nil, nil, "", errors.New("read tcp: i/o timeout (injected)")
	}
	return ws, bad, del, next, err
}

// After a claim whose reply was lost, this consumer's own pending entries
// are read again page after page, past those it holds already: read only
// a first page (a replica holding a page of its own windows, as under
// load), the claimed window stayed unheld until claimed again, claim_idle
// later.
func TestLostClaimReplyIsReadAgainPastAPageOfHeldWindows(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r, _ := prepare(t, rdb, 4*time.Second, 1) // windows held, not yet due, all the test long
	ctx := context.Background()
	m := metrics.New(prometheus.NewRegistry())
	var deads string
	for i, consumer := range []string{"live", "dead"} {
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(int64(i+1), int64(i+1))}); err != nil {
			t.Fatal(err)
		}
		ws, _, _, err := r.Read(ctx, 0, consumer, ">", 1, -1)
		if err != nil || len(ws) != 1 {
			t.Fatalf("%s's read: %v %v", consumer, ws, err)
		}
		deads = ws[0].ID
	}
	// dead's entry, after live's, idle for an hour already: the first claim takes it.
	if err := rdb.Do(ctx, "XCLAIM", r.Keys().Stream(0), repo.Group, "dead", 0, deads, "IDLE", 3_600_000, "JUSTID").Err(); err != nil {
		t.Fatal(err)
	}
	const claimIdle = 2 * time.Second
	store := &lostReplyAt{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "live", ClaimIdle: claimIdle, Block: 50 * time.Millisecond, ReadCount: 1},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	waitFor(t, "both windows held", func() bool { return wk.Held() == 2 })
	if !store.lost.Load() {
		t.Fatal("no claim reply was lost: the test proves nothing")
	}
	if d := time.Since(time.Unix(0, store.at.Load())); d >= claimIdle-500*time.Millisecond {
		t.Fatalf("the claimed window held %s after the claim's lost reply: it waited for another claim", d)
	}
}

// lostUnlistable loses, once, the reply of a read of new entries that took
// a window (the read cut off, or the window's flush panicked: pending on
// this consumer, not held), and fails every listing of own pending entries.
type lostUnlistable struct {
	*repo.Repo
	lost atomic.Bool
}

func (s *lostUnlistable) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	ws, bad, del, err := s.Repo.Read(ctx, shard, consumer, start, count, block)
	if err == nil && start == ">" && len(ws) > 0 && s.lost.CompareAndSwap(false, true) {
		return nil, nil, nil, nil
	}
	return ws, bad, del, err
}

func (*lostUnlistable) PendingIDs(context.Context, int, string, string, int) ([]string, error) {
	return nil, errors.New("read tcp: i/o timeout (injected)")
}

// When the listing of own pending entries fails at shutdown, the final read
// re-reads them all from the start: taken for an empty list, the window
// pending here and not held was never read, and waited claim_idle for
// another replica, which may not exist.
func TestShutdownWithAFailedListingReadsOwnPendingNotHeld(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &lostUnlistable{Repo: r}
	wk := startReported(t, store, r, m)
	waitFor(t, "the read reply lost", store.lost.Load)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := wk.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
}

// The stream gauges say how many windows wait in each stream and how many
// of those a consumer has read: the alert on unread windows subtracts one
// from the other, and a length that showed the pending count said none
// was ever unread.
func TestStreamGaugesTellLengthFromPending(t *testing.T) {
	r, _, _, m := setup(t)
	ctx := context.Background()
	for i := range 3 {
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(int64(i+1), int64(i+1))}); err != nil {
			t.Fatal(err)
		}
	}
	if ws, _, _, err := r.Read(ctx, 0, "other", ">", 1, -1); err != nil || len(ws) != 1 {
		t.Fatalf("other's read: %v %v", ws, err)
	}
	store := &blindWhileRunning{Repo: r} // this replica reads none of them
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: 20 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	// Pending is set after length: both are then of a sample, and the stream does not change.
	waitFor(t, "a sample", func() bool { return testutil.CollectAndCount(m.StreamPending) == 1 })
	if n := testutil.ToFloat64(m.StreamLength.WithLabelValues("0")); n != 3 {
		t.Errorf("combo_stream_length %v, want 3", n)
	}
	if n := testutil.ToFloat64(m.StreamPending.WithLabelValues("0")); n != 1 {
		t.Errorf("combo_stream_pending %v, want 1", n)
	}
}

// Running says whether the worker takes windows: not before Start, and not
// once Shutdown began (the readiness probe asks it).
func TestRunningOnlyBetweenStartAndShutdown(t *testing.T) {
	r, _, _, m := setup(t)
	wk := worker.New(r, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: time.Hour}, zaptest.NewLogger(t), m)
	if wk.Running() {
		t.Error("Running before Start")
	}
	wk.Start()
	if !wk.Running() {
		t.Error("not Running after Start")
	}
	stop(t, wk)
	if wk.Running() {
		t.Error("Running after Shutdown")
	}
}

// A restarted replica re-reading its own pending entries moves past those
// deleted from the stream (counted lost) as past those of windows: with
// them left out of the read's last id, a page of nothing but deleted
// entries (ReadCount 1 here) read as the end of the pending list, and the
// window pending after it waited claim_idle (an hour here) where it was
// due at once.
func TestRestartRereadsPastDeletedPendingEntries(t *testing.T) {
	r, rdb, sub, m := setup(t)
	readTwoThenDeleteOne(t, r, rdb, "c1") // c1 read both, then died; the first was deleted
	wk := worker.New(r, worker.Config{Consumer: "c1", ReadCount: 1, ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	waitPushes(t, sub, 1)
	if n := testutil.ToFloat64(m.ClaimDeleted); n != 1 {
		t.Errorf("deleted pending entries counted: %v, want 1", n)
	}
}

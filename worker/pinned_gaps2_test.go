package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// pruneCounting is the real store that counts the housekeeper's rounds of
// dead-consumer removal.
type pruneCounting struct {
	*repo.Repo
	calls atomic.Int64
}

func (s *pruneCounting) PruneConsumers(ctx context.Context, shard int, self string, idle time.Duration) ([]string, error) {
	s.calls.Add(1)
	return s.Repo.PruneConsumers(ctx, shard, self, idle)
}

// consumers lists the names and idle times of the consumers of shard 0's
// group.
func consumers(t *testing.T, rdb *redis.Client, r *repo.Repo) map[string]time.Duration {
	t.Helper()
	cs, err := rdb.XInfoConsumers(context.Background(), r.Keys().Stream(0), repo.Group).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Duration{}
	for _, c := range cs {
		out[c.Name] = c.Idle
	}
	return out
}

// The housekeeper removes a dead consumer with nothing pending once it has
// been idle ConsumerIdleDelete, looking every ConsumerIdleDelete/10 (at
// most an hour): looking only every ConsumerIdleDelete, a consumer that
// went idle just after a round was removed up to twice that late (two
// days with the default of a day), and each removal is counted in
// combo_consumers_removed_total, whose only source it is. The live
// worker's own consumer, idle as long between its blocking reads (Block
// past ConsumerIdleDelete here), is never removed.
func TestDeadConsumerIsRemovedAndCounted(t *testing.T) {
	r, rdb, _, m := setup(t)
	ctx := context.Background()
	const idle = time.Second
	// A replica that joined the group, read nothing and died.
	if err := rdb.XGroupCreateConsumer(ctx, r.Keys().Stream(0), repo.Group, "dead").Err(); err != nil {
		t.Fatal(err)
	}
	store := &pruneCounting{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: idle + 1500*time.Millisecond,
		ConsumerIdleDelete: idle, SampleEvery: 20 * time.Millisecond}, zaptest.NewLogger(t), m)
	start := time.Now()
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	waitFor(t, "the dead consumer removed", func() bool { _, ok := consumers(t, rdb, r)["dead"]; return !ok })
	took, rounds := time.Since(start), store.calls.Load()
	t.Logf("dead consumer removed %s after the start, in removal round %d", took.Round(time.Millisecond), rounds)
	if took > idle+2*time.Second {
		t.Errorf("dead consumer removed %s after the start, want within about ConsumerIdleDelete (%s)", took.Round(time.Millisecond), idle)
	}
	// Every 100 ms (idle/10) the removal has had about 10 rounds by
	// then; every ConsumerIdleDelete, 2 (one at the start, one idle later).
	if rounds < 5 {
		t.Errorf("dead consumer removed in removal round %d, want at least 5: rounds every ConsumerIdleDelete/10 (%s), not every ConsumerIdleDelete",
			rounds, idle/10)
	}
	if n := testutil.ToFloat64(m.ConsumersGone); n != 1 {
		t.Errorf("combo_consumers_removed_total %v after the dead consumer's removal, want 1", n)
	}
	// The worker's own consumer, idle past ConsumerIdleDelete in its
	// blocking read, outlives two more rounds.
	waitFor(t, "the worker's own consumer idle past ConsumerIdleDelete", func() bool {
		d, ok := consumers(t, rdb, r)["c1"]
		return ok && d >= idle+50*time.Millisecond
	})
	seen := store.calls.Load()
	waitFor(t, "two more removal rounds", func() bool { return store.calls.Load() >= seen+2 })
	if _, ok := consumers(t, rdb, r)["c1"]; !ok {
		t.Errorf("the live worker's own consumer was removed")
	}
	if n := testutil.ToFloat64(m.ConsumersGone); n != 1 {
		t.Errorf("combo_consumers_removed_total %v, want 1: the dead consumer alone", n)
	}
}

// A restarted replica re-reading its own pending entries moves past the
// ids of entries that do not parse (dropped, counted bad) as past those of
// windows: with the bad ones left out of the read's last id, a page of
// nothing but bad entries (ReadCount 2 here) read as the end of the
// pending list, the reader went on to new entries (">"), and the valid
// window pending after them waited claim_idle for the claimer (an hour
// here) where it was due at once.
func TestRestartRereadsPastBadPendingEntries(t *testing.T) {
	r, rdb, sub, m := setup(t)
	ctx := context.Background()
	for range 2 {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: r.Keys().Stream(0), Values: []string{"junk", "1"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	// c1 read all three, then died before dropping or flushing any.
	if ws, bad, _, err := r.Read(ctx, 0, "c1", ">", 10, -1); err != nil || len(ws) != 1 || len(bad) != 2 {
		t.Fatalf("c1's read: %d windows, %d bad entries, %v; want 1 and 2", len(ws), len(bad), err)
	}
	start := time.Now()
	wk := worker.New(r, worker.Config{Consumer: "c1", ReadCount: 2, ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	// Due W + grace (170 ms) after its report; generous margin, and far
	// below ClaimIdle.
	select {
	case <-sub.Channel():
	case <-time.After(w + 3*time.Second):
		t.Fatalf("pending window not published %s after the restart, behind a page of 2 bad pending entries; it waits for the claimer",
			time.Since(start).Round(time.Millisecond))
	}
	if n := testutil.ToFloat64(m.BadEntries); n != 2 {
		t.Errorf("bad entries counted %v, want 2", n)
	}
}

// refusedBlind is the real store that refuses (an error for that window
// alone) every flush of a window of activity 666 until allowed, and
// whose blocking reads find nothing once blind is set, so that what is
// reported then is read only by the final read. blindReads counts the
// reads it answered so.
type refusedBlind struct {
	*repo.Repo
	allowed, blind atomic.Bool
	refusals       atomic.Int64
	blindReads     atomic.Int64
}

func (s *refusedBlind) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	if block > 0 && s.blind.Load() {
		s.blindReads.Add(1)
		return nil, nil, nil, nil
	}
	return s.Repo.Read(ctx, shard, consumer, start, count, block)
}

func (s *refusedBlind) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	if s.allowed.Load() {
		return s.Repo.Flush(ctx, ws)
	}
	res := make([]repo.FlushResult, len(ws))
	var others []repo.Window
	var at []int
	for i, win := range ws {
		if win.ActivityID == 666 {
			s.refusals.Add(1)
			res[i].Err = errors.New("NOPERM this user has no permissions to access the 'combo:push:666' channel")
			continue
		}
		others, at = append(others, win), append(at, i)
	}
	if len(others) == 0 {
		return res, nil
	}
	got, err := s.Repo.Flush(ctx, others)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		res[i] = got[j]
	}
	return res, nil
}

// The shutdown's listing of this replica's own pending entries goes on,
// page after page, from just after the last id of the page before: from
// that id itself, a page of one (ReadCount 1) listed the same held entry
// again and again for as long as it stayed pending (here a window Redis
// refuses), up to the drain's bound, and the windows this replica's last
// RPCs opened were never read, left to wait claim_idle for another
// replica.
func TestShutdownListsOwnPendingEntriesPageByPage(t *testing.T) {
	r, _, sub, m := setup(t)
	ctx := context.Background()
	store := &refusedBlind{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ReadCount: 1, ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	var shutdownErr error
	done := make(chan struct{}) // closed when Shutdown returned, with shutdownErr
	t.Cleanup(func() {
		store.allowed.Store(true)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
		}
	})
	// Held and pending, refused: it stays pending all through the drain.
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 666)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the held window refused", func() bool { return store.refusals.Load() >= 1 })
	// The reader stops seeing new entries (its read under way, if any, is
	// over once a blind one was answered): the last RPC's window is left
	// to the final read.
	store.blind.Store(true)
	waitFor(t, "the reader blind", func() bool { return store.blindReads.Load() >= 1 })
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(2, 5)}); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	go func() { shutdownErr = wk.Shutdown(sctx); close(done) }()
	// Due W + grace (170 ms) after its report; a generous margin, well
	// within the drain's 10 s.
	select {
	case msg := <-sub.Channel():
		if p, err := push.Decode([]byte(msg.Payload)); err != nil || p.ActivityID != 5 {
			t.Fatalf("pushed %+v, %v; want the last RPC's window, activity 5", p, err)
		}
		t.Logf("last RPC's window published %s into the shutdown", time.Since(start).Round(time.Millisecond))
	case <-time.After(w + 3*time.Second):
		t.Fatalf("last RPC's window not published %s into the shutdown (ReadCount 1, a held window pending): the final read never got past listing the pending entries",
			time.Since(start).Round(time.Millisecond))
	}
	store.allowed.Store(true)
	<-done
	if shutdownErr != nil {
		t.Fatalf("shutdown: %v", shutdownErr)
	}
	waitPushes(t, sub, 1) // the refused one, accepted at last
}

// A window whose flush Redis answered with an error of its own is put
// back 100 ms later, doubling per such error up to 5 s (README); one that
// failed only with its batch, 200 ms. Checked on the due time retryLater
// sets, not by timing flushes: a first retry 200 ms later stays within
// any bound a loaded host leaves a timing test.
func TestRetryLaterDelays(t *testing.T) {
	for _, c := range []struct {
		fails int
		want  time.Duration
	}{
		{0, 200 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond},
		{6, 3200 * time.Millisecond},
		{7, 5 * time.Second},
		{50, 5 * time.Second},
	} {
		if lo, hi := worker.RetryDelay(c.fails); c.want < lo || c.want > hi {
			t.Errorf("a window that failed %d times on its own put back %s to %s later, want %s", c.fails, lo, hi, c.want)
		}
	}
}

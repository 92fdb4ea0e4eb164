package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// claimCounting is the real store, counting the claims (XAUTOCLAIM calls)
// made on each shard.
type claimCounting struct {
	*repo.Repo
	calls [2]atomic.Int64
}

func (s *claimCounting) Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) ([]repo.Window, []repo.BadEntry, []string, string, error) {
	s.calls[shard].Add(1)
	return s.Repo.Claim(ctx, shard, consumer, minIdle, start, count)
}

// One claimer scans every shard in turn (one Redis, not a cluster). Each
// shard's scan ends when XAUTOCLAIM's cursor comes back to 0-0: taken for
// a cursor to go on from, the scan of shard 0 started over for ever, a busy
// loop of claims against Redis, and no shard after it was ever scanned: a
// dead replica's windows there were never taken over, and none of them was
// published before window.stale.
func TestClaimerScansEveryShardOncePerRound(t *testing.T) {
	store := &claimCounting{Repo: deadReplicasWindow(t, 2, 1)}
	m := metrics.New(prometheus.NewRegistry())
	claimIdle := conf.DefaultClaimIdle(tightWindow)
	wk := worker.New(store, worker.Config{Consumer: "live", Shards: 2, ClaimIdle: claimIdle,
		Stale: tightWindow.Stale, Block: 50 * time.Millisecond}, zaptest.NewLogger(t), m)
	start := time.Now()
	wk.Start()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_ = wk.Shutdown(ctx)
	}()
	// The claimer's period: half of what window.stale leaves after
	// claim_idle (145 ms), as claimLoop sets it.
	every := (tightWindow.Stale - claimIdle) / 2
	// Rounds so far, one scan (one claim) of each shard per round, with
	// room for a round under way and a late tick.
	bound := func() int64 { return int64(time.Since(start)/every) + 3 }
	flushed := func(s string) float64 { return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(s)) }
	waitFor(t, "the dead replica's window on shard 1 published or dropped", func() bool {
		if n, b := store.calls[0].Load(), bound(); n > b {
			t.Fatalf("%d claims on shard 0 in %s, want at most %d (one a round): the scan of shard 0 never ends; %d claims on shard 1",
				n, time.Since(start).Round(time.Millisecond), b, store.calls[1].Load())
		}
		return flushed(metrics.FlushedPublished)+flushed(metrics.FlushedStale) == 1
	})
	if flushed(metrics.FlushedStale) != 0 {
		t.Fatal("the dead replica's window on shard 1 was dropped stale, not taken over in time")
	}
	for s := range store.calls {
		if n, b := store.calls[s].Load(), bound(); n > b {
			t.Errorf("%d claims on shard %d in %s, want at most %d (one a round)", n, s, time.Since(start).Round(time.Millisecond), b)
		}
	}
}

// A window the flush script drops stale is done with: Redis deleted its
// data and its entry. Still held, it counted in held_windows for good (the
// gauge crept up with every stale window, and MaxHeld's room shrank with
// it: a replica that once fell behind read less and less), and Shutdown,
// which waits for every held window to go out, waited for it until its
// deadline and reported it left pending.
func TestStaleWindowIsNoLongerHeld(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	// window.stale below W + grace: every window is stale when it comes due.
	r := repo.New(rdb, repo.Settings{Window: w, Grace: 20 * time.Millisecond, Dedupe: time.Minute,
		Stale: 100 * time.Millisecond, Timeout: time.Second, Shards: 1, StreamMaxLen: 100000})
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry())
	wk := startReported(t, r, r, m)
	waitFor(t, "the window dropped stale", func() bool {
		return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(metrics.FlushedStale)) == 1
	})
	// The flusher lets go of it and sets the gauge right after counting it.
	for end := time.Now().Add(2 * time.Second); wk.Held() != 0 && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	if h, g := wk.Held(), testutil.ToFloat64(m.HeldWindows); h != 0 || g != 0 {
		t.Errorf("holding %d windows (held_windows %v) 2 s after the only one was dropped stale, want 0", h, g)
	}
	if n := rdb.XLen(ctx, r.Keys().Stream(0)).Val(); n != 0 {
		t.Errorf("stream holds %d entries after the stale drop, want 0", n)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	begin := time.Now()
	err := wk.Shutdown(sctx)
	if took := time.Since(begin); err != nil || took > time.Second {
		t.Fatalf("Shutdown with nothing left to publish: %v after %s, want nil at once", err, took.Round(time.Millisecond))
	}
}

// A replica restarted under its name re-reads its own pending entries a
// page (ReadCount) at a time, each page after the last entry of the one
// before, until none is left: only then does it go on to new entries
// (">"). Going to ">" after the first page left the rest of its pending
// entries to the claimer, claim_idle after their delivery (by when
// window.stale may have dropped them), where they were due at once.
func TestRestartReReadsEveryPageOfItsOwnPendingEntries(t *testing.T) {
	r, _, sub, m := setup(t)
	ctx := context.Background()
	const n = 6
	for i := range n {
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(int64(i+1), int64(100+i))}); err != nil {
			t.Fatal(err)
		}
	}
	// c1 read them all, then died before flushing any.
	if ws, _, _, err := r.Read(ctx, 0, "c1", ">", 10, -1); err != nil || len(ws) != n {
		t.Fatalf("c1's read: %d windows, %v", len(ws), err)
	}
	start := time.Now()
	wk := worker.New(r, worker.Config{Consumer: "c1", ReadCount: 2, ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	// Due W + grace (170 ms) after their reports; generous margin, and
	// far below ClaimIdle.
	deadline := time.After(w + 3*time.Second)
	for got := range n {
		select {
		case <-sub.Channel():
		case <-deadline:
			t.Fatalf("%d of %d pending windows published %s after the restart (ReadCount 2); the rest wait for the claimer",
				got, n, time.Since(start).Round(time.Millisecond))
		}
	}
}

// noPerm answers every flush, until allowed, with an error for each window
// that is not Redis refusing all writes (NOPERM: the ACL user may not
// publish on the channel), so that only the window's own retry delays
// space its flushes, and records the worker's estimate of Redis's clock at
// each. Its Redis's clock (TIME) runs 8 times as fast as this host's from
// t0.
type noPerm struct {
	*repo.Repo
	t0      time.Time
	wk      atomic.Pointer[worker.Worker]
	allowed atomic.Bool
	mu      sync.Mutex
	at      []int64 // the worker's Redis clock at each refused flush, ms
}

func (s *noPerm) Time(ctx context.Context, shard int) (time.Time, error) {
	t, err := s.Repo.Time(ctx, shard)
	return t.Add(7 * time.Since(s.t0)), err
}

func (s *noPerm) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	if s.allowed.Load() {
		return s.Repo.Flush(ctx, ws)
	}
	s.mu.Lock()
	s.at = append(s.at, s.wk.Load().ClockNow())
	s.mu.Unlock()
	out := make([]repo.FlushResult, len(ws))
	for i := range out {
		out[i].Err = errors.New("NOPERM User combo has no permissions to access the 'act:5:contributions' channel")
	}
	return out, nil
}

func (s *noPerm) refusals() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.at...)
}

// A window whose flush Redis keeps refusing is retried 100 ms after its
// first refusal, doubling per refusal up to 5 s, from the 7th on: a window
// refused for good (a channel the ACL user may not publish on) costs a
// flush every 5 s, not one every 400 ms for as long as it is held (until
// window.stale drops it, or for ever, and on every replica), and a Redis
// refusing many keeps a backlog of them from becoming a flood.
//
// The delays are timed, and read here, on the worker's estimate of Redis's
// clock, which runs 8 times as fast as this host's (housekeeping reads it
// every 5 ms, and each reading wakes the flusher): 21 s of delays take
// under 3 s.
func TestRefusedFlushBacksOffTo5s(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &noPerm{Repo: r, t0: time.Now()}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: 5 * time.Millisecond}, zaptest.NewLogger(t), m)
	store.wk.Store(wk)
	wk.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = wk.Shutdown(ctx)
	})
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	const refusals = 10 // 9 delays: the last three capped
	waitFor(t, "10 refused flushes", func() bool { return len(store.refusals()) >= refusals })
	at := store.refusals()
	gaps := make([]int64, refusals-1)
	for f := 1; f < refusals; f++ {
		want := min(100*time.Millisecond<<(f-1), 5*time.Second).Milliseconds()
		// Never before due (the estimate only moves forward here); after,
		// as soon as the next reading wakes the flusher: a loaded machine's
		// scheduling (8 Redis ms per host ms) is given a host second.
		gap := at[f] - at[f-1]
		gaps[f-1] = gap
		if gap < want || gap > 2*want+8000 {
			t.Errorf("refusal %d retried after %d ms (Redis's clock), want %d", f, gap, want)
		}
	}
	t.Logf("retry delays (Redis ms): %v", gaps)
	// Allowed, the window goes out at its next retry, within 5 s by
	// Redis's clock as the worker reads it.
	store.allowed.Store(true)
	waitPushes(t, sub, 1)
}

// The claimer scans every claim_idle/2, or every room/2 when window.stale
// leaves less room than claim_idle after it (room = stale - claim_idle),
// so a dead replica's window is taken over at most half a period after it
// could be and still has half the room to be published in. Both periods
// are 500 ms here: three scans take 1.5 s; scanning a whole period apart
// 3 s, or 2 × claim_idle apart 6 s. 2.5 s is room for a loaded machine's
// late ticks (a ticker does not add them up), not for a scan a whole
// period apart.
func TestClaimerScansEveryHalfPeriod(t *testing.T) {
	for _, tc := range []struct {
		name             string
		claimIdle, stale time.Duration
	}{
		// Every other test set window.stale tight: scanning every 2 ×
		// claim_idle passed them, and left a dead replica's windows up to
		// 8 s later than need be at the defaults.
		{"half claim_idle, stale far off", time.Second, time.Minute},
		// Scanning every room, a window found at the end of a period had
		// no room left, and went stale.
		{"half the room before stale", 2 * time.Second, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, _, m := setup(t)
			store := &claimCounting{Repo: r}
			wk := worker.New(store, worker.Config{Consumer: "live", ClaimIdle: tc.claimIdle, Stale: tc.stale,
				Block: 50 * time.Millisecond}, zaptest.NewLogger(t), m)
			start := time.Now()
			wk.Start()
			defer stop(t, wk)
			waitFor(t, "three scans", func() bool { return store.calls[0].Load() >= 3 })
			if took := time.Since(start); took >= 2500*time.Millisecond {
				t.Fatalf("three scans took %v, want about 1.5 s (one each 500 ms)", took.Round(time.Millisecond))
			}
		})
	}
}

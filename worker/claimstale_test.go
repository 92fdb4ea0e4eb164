package worker_test

import (
	"context"
	"errors"
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

// With window.stale near W + grace (valid: W = 1 s, grace 20 ms, stale
// 1.6 s; claim_idle takes its default, halfway between), a dead replica's
// windows are claimable 290 ms before they go stale. The claimer must look
// often enough to take them in that time: scanning every claim_idle / 2
// (655 ms) it found about half of them stale, dropped windows that could
// have been published.
func TestClaimerTakesOverBeforeStale(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	win := conf.Window{Size: time.Second, Grace: 20 * time.Millisecond, Dedupe: time.Minute, Stale: 1600 * time.Millisecond}
	r := repo.New(rdb, repo.Settings{Window: win.Size, Grace: win.Grace, Dedupe: win.Dedupe,
		Stale: win.Stale, Timeout: time.Second, Shards: 1, StreamMaxLen: 100000})
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	// "dead" reads each window as it opens, then dies; their openings
	// spread over more than one scan period of the claimer. The live
	// replica starts after, so its reader finds none of them new.
	const n = 8
	for i := range n {
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(int64(i+1), int64(100+i))}); err != nil {
			t.Fatal(err)
		}
		if ws, _, _, err := r.Read(ctx, 0, "dead", ">", 10, -1); err != nil || len(ws) != 1 {
			t.Fatalf("dead's read: %v %v", ws, err)
		}
		time.Sleep(85 * time.Millisecond)
	}
	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(r, worker.Config{Consumer: "live", ClaimIdle: conf.DefaultClaimIdle(win), Stale: win.Stale,
		Block: 50 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	flushed := func(status string) float64 { return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(status)) }
	waitFor(t, "every window flushed or dropped", func() bool {
		return flushed(metrics.FlushedPublished)+flushed(metrics.FlushedStale) == n
	})
	if s := flushed(metrics.FlushedStale); s != 0 {
		t.Fatalf("%v of %d windows of a dead replica dropped stale, though claimable %s before window.stale",
			s, n, win.Stale-conf.DefaultClaimIdle(win))
	}
}

// tightWindow is the README's tight but valid window: claim_idle (its
// default, 1.31 s) leaves 290 ms before window.stale to take a dead
// replica's window over and publish it.
var tightWindow = conf.Window{Size: time.Second, Grace: 20 * time.Millisecond, Dedupe: time.Minute, Stale: 1600 * time.Millisecond}

// deadReplicasWindow starts a redis-server with shards shards, opens one
// window on shard (activity picked for it) and has consumer "dead" read
// it: a replica that died holding it.
func deadReplicasWindow(t *testing.T, shards, shard int) *repo.Repo {
	t.Helper()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	r := repo.New(rdb, repo.Settings{Window: tightWindow.Size, Grace: tightWindow.Grace, Dedupe: tightWindow.Dedupe,
		Stale: tightWindow.Stale, Timeout: time.Second, Shards: shards, StreamMaxLen: 100000})
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	var c *combo.Contribution
	for a := int64(1); ; a++ {
		if c = contribution(1, a); r.Keys().Shard(c.ActivityId, c.UserId, c.ItemType) == shard {
			break
		}
	}
	if _, err := r.Report(ctx, []*combo.Contribution{c}); err != nil {
		t.Fatal(err)
	}
	if ws, _, _, err := r.Read(ctx, shard, "dead", ">", 10, -1); err != nil || len(ws) != 1 {
		t.Fatalf("dead's read: %v %v", ws, err)
	}
	return r
}

// takeOver runs a live replica on store until the dead replica's window
// is published or dropped stale, and fails the test if it was dropped.
func takeOver(t *testing.T, store worker.Store, shards int, nodePerShard bool) {
	t.Helper()
	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(store, worker.Config{Consumer: "live", Shards: shards, ClaimIdle: conf.DefaultClaimIdle(tightWindow),
		Stale: tightWindow.Stale, Block: 50 * time.Millisecond, NodePerShard: nodePerShard}, zaptest.NewLogger(t), m)
	wk.Start()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_ = wk.Shutdown(ctx)
	}()
	flushed := func(s string) float64 { return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(s)) }
	waitFor(t, "the dead replica's window published or dropped", func() bool {
		return flushed(metrics.FlushedPublished)+flushed(metrics.FlushedStale) == 1
	})
	if flushed(metrics.FlushedStale) != 0 {
		t.Fatal("the dead replica's window was dropped stale, not taken over in time")
	}
}

// unansweringShard0 is the real store but for shard 0, whose every call waits
// out its deadline: a Redis Cluster master that stopped answering.
type unansweringShard0 struct{ *repo.Repo }

func (s unansweringShard0) Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) ([]repo.Window, []repo.BadEntry, []string, string, error) {
	if shard == 0 {
		<-ctx.Done()
		return nil, nil, nil, "", ctx.Err()
	}
	return s.Repo.Claim(ctx, shard, consumer, minIdle, start, count)
}

func (s unansweringShard0) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	if shard == 0 {
		<-ctx.Done()
		return nil, nil, nil, ctx.Err()
	}
	return s.Repo.Read(ctx, shard, consumer, start, count, block)
}

func (s unansweringShard0) StreamStats(ctx context.Context, shard int) (repo.StreamStats, error) {
	if shard == 0 {
		<-ctx.Done()
		return repo.StreamStats{}, ctx.Err()
	}
	return s.Repo.StreamStats(ctx, shard)
}

// On a Redis Cluster a master that stops answering holds up no other
// shard's claims. Scanned one after another, every round waited out the
// op timeout (2 s) on the hung shard 0 first, and a dead replica's window
// on shard 1 went stale unpublished.
func TestAHungShardDelaysNoOtherShardsClaims(t *testing.T) {
	r := deadReplicasWindow(t, 2, 1)
	takeOver(t, unansweringShard0{r}, 2, true)
}

// lostClaimReply is the real store whose first claim that takes windows
// loses its reply, as after a timeout or a reset once Redis had run it:
// the entries are this consumer's now, and it does not hold them.
type lostClaimReply struct {
	*repo.Repo
	lost atomic.Bool
}

func (s *lostClaimReply) Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) ([]repo.Window, []repo.BadEntry, []string, string, error) {
	ws, bad, del, next, err := s.Repo.Claim(ctx, shard, consumer, minIdle, start, count)
	if err == nil && len(ws) > 0 && s.lost.CompareAndSwap(false, true) {
		return nil, nil, nil, "", errors.New("read tcp: i/o timeout")
	}
	return ws, bad, del, next, err
}

// A claim whose reply is lost is followed by a read of this consumer's own
// pending entries, as a failed read is. The window it took once waited for
// this replica's own claimer to take it again a claim_idle later, and was
// dropped stale.
func TestALostClaimReplyLosesNoWindow(t *testing.T) {
	store := &lostClaimReply{Repo: deadReplicasWindow(t, 1, 0)}
	takeOver(t, store, 1, false)
	if !store.lost.Load() {
		t.Fatal("no claim reply was lost: the test proves nothing")
	}
}

package worker_test

import (
	"context"
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
	t.Cleanup(func() { wk.Shutdown(context.Background()) })
	flushed := func(status string) float64 { return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(status)) }
	waitFor(t, "every window flushed or dropped", func() bool {
		return flushed(metrics.FlushedPublished)+flushed(metrics.FlushedStale) == n
	})
	if s := flushed(metrics.FlushedStale); s != 0 {
		t.Fatalf("%v of %d windows of a dead replica dropped stale, though claimable %s before window.stale",
			s, n, win.Stale-conf.DefaultClaimIdle(win))
	}
}

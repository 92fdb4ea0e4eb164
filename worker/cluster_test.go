package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/worker"
)

// On a Redis Cluster, a master that stops answering holds up the flushes
// of its own shards only: windows on the live masters still go out on
// time. (A flush pipeline spanning a dead node fails whole, after the
// worker's op timeout: one shared flusher would hold every shard's windows
// behind it.)
func TestDeadMasterDelaysOnlyItsShards(t *testing.T) {
	ctx := context.Background()
	const shards = 6
	const win = 300 * time.Millisecond
	cluster := testredis.StartCluster(t, 3)
	cc := cluster.Client(t)
	r, sub := prepare(t, cc, win, shards)
	keys := r.Keys()
	deadAddr := cluster.MasterAddr(t, cc, keys.Stream(0))
	var deadShards, liveShards []int
	for s := range shards {
		if cluster.MasterAddr(t, cc, keys.Stream(s)) == deadAddr {
			deadShards = append(deadShards, s)
		} else {
			liveShards = append(liveShards, s)
		}
	}
	if len(liveShards) == 0 {
		t.Fatal("every shard on one master")
	}
	var id int64
	report := func(shard int) {
		t.Helper()
		id++
		for i := 0; ; i++ {
			if it := fmt.Sprint("t", i); keys.Shard(7, id, it) == shard {
				c := &combo.Contribution{Id: id, ActivityId: 7, UserId: id, ItemId: 1, ItemType: it, Quantity: 1,
					CreatedAt: time.Now().UnixMilli()}
				if _, err := r.Report(ctx, []*combo.Contribution{c}); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
	}
	wk := worker.New(r, worker.Config{Consumer: "c1", Shards: shards, ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_ = wk.Shutdown(sctx) // the dead master's windows stay pending
	})

	// Windows on the master about to die, held by the worker.
	for _, s := range deadShards {
		report(s)
	}
	waitFor(t, "the worker to hold them", func() bool { return wk.Held() == len(deadShards) })
	cluster.KillMaster(t, cc, deadAddr)

	// Windows on the live masters, due while the dead master's are being
	// flushed in vain.
	start := time.Now()
	for _, s := range liveShards {
		report(s)
	}
	deadline := time.After(win + time.Second) // due after W + grace; a flush stuck on the dead node takes 2 s
	for got := 0; got < len(liveShards); got++ {
		select {
		case <-sub.Channel():
		case <-deadline:
			t.Fatalf("%d of %d live shards' windows published %s after their reports",
				got, len(liveShards), time.Since(start).Round(time.Millisecond))
		}
	}
}

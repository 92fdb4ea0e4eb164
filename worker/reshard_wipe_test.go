package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/worker"
)

// A stream deleted on its master (DEL, FLUSHALL, an eviction) while its
// slot is MIGRATING, before MIGRATE moved it, is lost: nothing holds it on
// the new master but the empty one EnsureGroup made there. Yet the old
// master answers every command on a missing key of a migrating slot with
// ASK, so a check by redirect (slotMoved, added in 53b3644 and reverted
// in b5f3d59) took the loss for a move and counted nothing; the group's
// consumer decides again (repo's moved), and this pins that it does.
func TestWipeOfAStreamWhoseSlotIsMigratingIsCountedLost(t *testing.T) {
	c := newClusterCase(t)
	ctx := context.Background()
	keys := c.r.Keys()
	from, to := c.shard0Move()
	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(c.r, worker.Config{Consumer: "c1", Shards: clusterShards, ClaimIdle: time.Hour, Block: 2 * time.Second},
		zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = wk.Shutdown(sctx)
	})
	old := redis.NewClient(&redis.Options{Addr: from})
	t.Cleanup(func() { old.Close() })

	c.report(0)
	waitFor(t, "the window held", func() bool { return wk.Held() == 1 })
	waitFor(t, "reads blocked on the old master", func() bool { return blockedReads(ctx, old) == len(c.deadShards) })
	mig := c.cluster.BeginMigration(t, keys.Stream(0), from, to)
	t.Cleanup(mig.Finish)                                      // before the worker's Shutdown (cleanups run last first)
	if err := old.Del(ctx, keys.Stream(0)).Err(); err != nil { // the wipe, not a MIGRATE
		t.Fatal(err)
	}
	waitFor(t, "the lost group counted", func() bool { return testutil.ToFloat64(m.GroupsRecreated) >= 1 })
}

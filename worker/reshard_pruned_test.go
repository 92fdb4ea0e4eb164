package worker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/repo"
)

// As TestReshardUnderABlockedReadCountsNoGroupLoss, for a replica that was
// handed no window on the shard for worker.consumer_idle_delete: another
// replica's housekeeping removed its consumer from the group
// (PruneConsumers; README: "harmless ... the group adds it back when it is
// next handed one"). Its reader goes on blocking on the shard's stream
// without adding it back. A reshard then moves the stream from under that
// blocked read: nothing is lost, the group is on the new master, yet the
// replica counted a group loss and logged "Redis lost the stream", which
// pages ComboStreamGroupLost (critical).
func TestReshardUnderABlockedReadOfAPrunedConsumerCountsNoGroupLoss(t *testing.T) {
	c := newClusterCase(t)
	ctx := context.Background()
	keys := c.r.Keys()
	_, m, old := c.startReshardWorker(t)

	hasC1 := func() bool {
		cs, err := c.cc.XInfoConsumers(ctx, keys.Stream(0), repo.Group).Result()
		return err == nil && slices.ContainsFunc(cs, func(x redis.XInfoConsumer) bool { return x.Name == "c1" })
	}
	waitFor(t, "c1 in shard 0's group", hasC1)
	// Another replica (c2) prunes c1, idle with nothing pending, as its
	// housekeeping does after worker.consumer_idle_delete.
	waitFor(t, "c1 pruned by another replica", func() bool {
		removed, err := c.r.PruneConsumers(ctx, 0, "c2", 100*time.Millisecond)
		return err == nil && slices.Contains(removed, "c1")
	})
	waitFor(t, "reads blocked on the old master", func() bool { return blockedReads(ctx, old) == len(c.deadShards) })
	if hasC1() { // Redis 7.0 adds a consumer only when a read hands it an entry
		t.Fatal("c1 is in shard 0's group again before the move: nothing left to test")
	}
	c.moveShard0(t)
	c.report(0) // read from the new master
	waitPushes(t, c.sub, 1)
	if n := testutil.ToFloat64(m.GroupsRecreated); n != 0 {
		t.Errorf("groups recreated %v after a reshard that lost nothing, want 0", n)
	}
}

package worker_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// A live replica whose consumer was removed from a group while it ran (by
// a replica older than e7b0bba, which took any idle consumer for dead,
// during a rolling update; by hand; or after its settings key lapsed while
// shard 0 was away) is put back by its own housekeeping. On a quiet shard
// nothing else puts it back in Redis 7.0: its blocked reads handed nothing
// do not add it, and the reader re-reads from 0 only at start or after an
// error. Missing, a reshard of the shard is counted, logged and alerted on
// as a loss of its stream (Read's moved check).
func TestHousekeepingPutsBackItsOwnRemovedConsumer(t *testing.T) {
	r, rdb, _, m := setup(t)
	ctx := context.Background()
	const idle = time.Second
	wk := worker.New(r, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 200 * time.Millisecond,
		ConsumerIdleDelete: idle, SampleEvery: 20 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	waitFor(t, "c1 in the group (its first read, from 0)", func() bool { _, ok := consumers(t, rdb, r)["c1"]; return ok })
	if err := rdb.XGroupDelConsumer(ctx, r.Keys().Stream(0), repo.Group, "c1").Err(); err != nil {
		t.Fatal(err)
	}
	// Removal rounds run every idle/10.
	waitFor(t, "c1 back in the group, its replica live and the shard quiet", func() bool {
		_, ok := consumers(t, rdb, r)["c1"]
		return ok
	})
}

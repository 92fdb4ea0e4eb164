package repo_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/repo"
)

// The consumer of a live replica (its settings key not expired) is kept
// however idle: on a quiet shard it is handed nothing, so Redis 7.0 finds
// it idle for as long as the shard stays quiet, and removed, a reshard of
// the shard would be counted as a loss. Once the replica's key is gone
// (stopped, or dead for three settings intervals) it is removed.
func TestPruneConsumersKeepsLiveReplicas(t *testing.T) {
	ctx := context.Background()
	r := consumersOneBusy(t, "live", "dead", "me")
	if _, err := r.ShareSettings(ctx, "live", "s", time.Minute); err != nil {
		t.Fatal(err)
	}
	removed, err := r.PruneConsumers(ctx, 0, "me", 10*time.Millisecond)
	if err != nil || !slices.Equal(removed, []string{"dead"}) {
		t.Fatalf("removed %v, %v; want [dead]: live is a live replica's", removed, err)
	}
	if _, err := r.ForgetSettings(ctx, "live", "live's process"); err != nil {
		t.Fatal(err)
	}
	removed, err = r.PruneConsumers(ctx, 0, "me", 10*time.Millisecond)
	if err != nil || !slices.Equal(removed, []string{"live"}) {
		t.Fatalf("removed %v, %v after live stopped; want [live]", removed, err)
	}
}

// Putting self back in the group re-delivers nothing: between the listing
// that found self missing and the rejoin, its reader may have been handed
// an entry (which put it back already). A re-read of that entry would
// reset its idle time, which another replica's claimer reads, and count
// one more delivery.
func TestRejoinRedeliversNothing(t *testing.T) {
	ctx := context.Background()
	r := consumersOneBusy(t)
	rdb := repo.Client(r)
	stream := r.Keys().Stream(0)
	before, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: repo.Group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(before) != 1 {
		t.Fatalf("pending %v, %v; want busy's one entry", before, err)
	}
	if err := repo.Rejoin(ctx, r, 0, "busy"); err != nil {
		t.Fatal(err)
	}
	after, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: repo.Group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(after) != 1 {
		t.Fatalf("pending %v, %v; want busy's one entry", after, err)
	}
	if after[0].RetryCount != before[0].RetryCount || after[0].Idle < before[0].Idle {
		t.Errorf("rejoin re-delivered busy's entry: delivered %d times (was %d), idle %s (was %s)",
			after[0].RetryCount, before[0].RetryCount, after[0].Idle, before[0].Idle)
	}
	if err := repo.Rejoin(ctx, r, 0, "back"); err != nil {
		t.Fatal(err)
	}
	cs, err := rdb.XInfoConsumers(ctx, stream, repo.Group).Result()
	if err != nil || !slices.ContainsFunc(cs, func(c redis.XInfoConsumer) bool { return c.Name == "back" }) {
		t.Fatalf("consumers %v, %v after rejoin; want back among them", cs, err)
	}
}

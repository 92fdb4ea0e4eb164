package repo_test

import (
	"context"
	"slices"
	"testing"
	"time"
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
	if err := r.ForgetSettings(ctx, "live"); err != nil {
		t.Fatal(err)
	}
	removed, err = r.PruneConsumers(ctx, 0, "me", 10*time.Millisecond)
	if err != nil || !slices.Equal(removed, []string{"live"}) {
		t.Fatalf("removed %v, %v after live stopped; want [live]", removed, err)
	}
}

package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/worker"
)

// Each shard's stream numbers its own entries, so windows opened on two
// shards in the same millisecond both get the entry id "<ms>-0". They are
// two windows: each must be published on time by the replica that read
// it, not one of them only when the claimer takes it over.
func TestSameEntryIDOnTwoShardsAreTwoWindows(t *testing.T) {
	ctx := context.Background()
	r, rdb, sub, m := setupShards(t, 2)
	keys := r.Keys()
	// One call reports a window on each shard: both XADDs run in one
	// pipeline, nearly always in the same millisecond. Retry on fresh combo
	// keys until they collide.
	var opened int
	for attempt := 0; ; attempt++ {
		if attempt == 200 {
			t.Fatal("no two windows got the same entry id in 200 tries")
		}
		user := int64(100 + attempt)
		var cs []*combo.Contribution
		for s := range 2 {
			var it string
			for i := 0; it == ""; i++ {
				if c := fmt.Sprint("t", i); keys.Shard(9, user, c) == s {
					it = c
				}
			}
			cs = append(cs, &combo.Contribution{Id: int64(2*attempt + s + 1), ActivityId: 9, UserId: user, ItemId: 1,
				ItemType: it, Quantity: 1, CreatedAt: time.Now().UnixMilli()})
		}
		if _, err := r.Report(ctx, cs); err != nil {
			t.Fatal(err)
		}
		opened += 2
		a := rdb.XRevRangeN(ctx, keys.Stream(0), "+", "-", 1).Val()
		b := rdb.XRevRangeN(ctx, keys.Stream(1), "+", "-", 1).Val()
		if a[0].ID == b[0].ID {
			break
		}
	}
	// The claimer would rescue a lost window only after ClaimIdle: make
	// that far longer than the wait below.
	start := time.Now()
	wk := worker.New(r, worker.Config{Consumer: "c1", Shards: 2, ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	deadline := time.After(w + 3*time.Second) // due within W + grace; generous margin
	for got := 0; got < opened; got++ {
		select {
		case <-sub.Channel():
		case <-deadline:
			t.Fatalf("%d of %d windows published after %s; the rest wait for the claimer",
				got, opened, time.Since(start).Round(time.Millisecond))
		}
	}
}

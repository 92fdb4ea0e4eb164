package repo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
)

// A BADWINDOW reply names its window's key, and so the caller's item_type:
// one that holds a Cluster refusal's words (Valkey 9's "' while the
// cluster is down" among them) must leave it the window's own error, not
// fail the whole flush batch as Redis unavailable (the batch's other
// windows, published, then answered as failed).
func TestBadWindowNamingARefusalIsNotUnavailable(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, _ := subscribedRepo(t, rdb)
		if err := r.EnsureGroups(ctx); err != nil {
			t.Fatal(err)
		}
		for _, itemType := range []string{"rose' while the cluster is down", "Script attempted to access a non local key"} {
			if _, err := r.Report(ctx, []*combo.Contribution{contribution(int64(len(itemType)), itemType, time.Now().UnixMilli())}); err != nil {
				t.Fatal(err)
			}
			ws, _, _, err := r.Read(ctx, 0, "c1", ">", 10, -1)
			if err != nil || len(ws) != 1 {
				t.Fatalf("read %d windows, %v", len(ws), err)
			}
			key := r.Keys().Current(0, 7, 42, itemType)
			v, err := rdb.Get(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			fields := strings.Split(v, push.FragmentSep)
			if err := rdb.SetArgs(ctx, key, strings.Join(fields[:8], push.FragmentSep), redis.SetArgs{KeepTTL: true}).Err(); err != nil {
				t.Fatal(err)
			}
			untilDue(t, r, ws)
			res, err := r.Flush(ctx, ws)
			if err != nil {
				t.Fatalf("item_type %q: flush of an unparsable window failed whole: %v, want its own BADWINDOW error", itemType, err)
			}
			if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "BADWINDOW") {
				t.Fatalf("item_type %q: %+v, want a BADWINDOW error", itemType, res[0])
			}
		}
	})
}

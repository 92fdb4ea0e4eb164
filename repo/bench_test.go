package repo_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// realistic is a report with display strings of typical length.
func realistic(id int64, user int64) *combo.Contribution {
	u := strconv.FormatInt(user, 10)
	return &combo.Contribution{Id: id, ActivityId: 1001, UserId: user, StarId: 12, ItemId: 8, ItemType: "firework",
		ItemName: "烟花", ItemIcon: "https://cdn.example.com/items/gift.png", Nickname: "fan" + u,
		AvatarUrl: "https://cdn.example.com/avatars/" + u + ".jpg", Quantity: 1, CreatedAt: time.Now().UnixMilli()}
}

func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	info := rdb.InfoMap(context.Background(), "memory").Val()["Memory"]["used_memory"]
	n, err := strconv.ParseInt(strings.TrimSpace(info), 10, 64)
	if err != nil {
		b.Fatalf("used_memory %q: %v", info, err)
	}
	return n
}

// BenchmarkOpenWindowMemory opens b.N windows (one report each, with its
// dedupe id, stream entry and pending entry, as a worker holds them)
// and reports Redis's used_memory growth per open window:
//
//	go test -run x -bench OpenWindowMemory -benchtime 100000x ./repo/
func BenchmarkOpenWindowMemory(b *testing.B) {
	srv := testredis.Start(b, testredis.Options{})
	rdb := srv.Client()
	ctx := context.Background()
	r := repo.New(rdb, repo.Settings{Window: time.Hour, Grace: 0, Dedupe: time.Minute, Stale: 2 * time.Hour,
		Timeout: 10 * time.Second, Shards: 1, StreamMaxLen: 10_000_000})
	if err := r.EnsureGroups(ctx); err != nil {
		b.Fatal(err)
	}
	before := usedMemory(b, rdb)
	b.ResetTimer()
	batch := make([]*combo.Contribution, 0, 500)
	for i := range b.N {
		// Ids and users of realistic width (a DB row id of 10 digits).
		batch = append(batch, realistic(1_000_000_000+int64(i), 1_000_000+int64(i)))
		if len(batch) == cap(batch) || i == b.N-1 {
			if _, err := r.Report(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	// Read them into the pending list, as a worker does.
	for {
		ws, _, err := r.Read(ctx, 0, "bench", ">", 10000, -1)
		if err != nil {
			b.Fatal(err)
		}
		if len(ws) == 0 {
			break
		}
	}
	b.StopTimer()
	after := usedMemory(b, rdb)
	b.ReportMetric(float64(after-before)/float64(b.N), "B/window")
	if b.N >= 10000 {
		key := r.Keys().Current(0, 1001, 1_000_000, "firework")
		b.Logf("MEMORY USAGE window %d B; used_memory %d -> %d", rdb.MemoryUsage(ctx, key).Val(), before, after)
	}
}

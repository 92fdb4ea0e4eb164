package repo_test

import (
	"context"
	"os"
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

// benchRepo is a repo on a fresh redis-server whose windows stay open for
// the whole benchmark (W of an hour), its consumer group created. With
// COMBO_BENCH_REDIS_ADDR set, it uses that Redis instead, and FLUSHALLs it
// first: cmd/combo-bench/callgrind.sh points it at a redis-server run
// under valgrind, to count Redis's instructions per report.
func benchRepo(b *testing.B) (*redis.Client, *repo.Repo) {
	var rdb *redis.Client
	if addr := os.Getenv("COMBO_BENCH_REDIS_ADDR"); addr != "" {
		// Under valgrind a call takes tens of times as long.
		rdb = redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
		b.Cleanup(func() { _ = rdb.Close() })
		if err := rdb.FlushAll(context.Background()).Err(); err != nil {
			b.Fatalf("COMBO_BENCH_REDIS_ADDR=%s: %v", addr, err)
		}
	} else {
		rdb = testredis.Start(b, testredis.Options{}).Client()
	}
	// Dedupe buckets of an hour: a run that crossed into a new bucket
	// would make every dedupe set again (each with its EXPIREAT), and a
	// count of Redis's instructions per report would then depend on the
	// minute the run started.
	r := repo.New(rdb, repo.Settings{Window: time.Hour, Grace: 0, Dedupe: time.Hour, Stale: 2 * time.Hour,
		Timeout: 10 * time.Second, Shards: 1, StreamMaxLen: 10_000_000})
	if err := r.EnsureGroups(context.Background()); err != nil {
		b.Fatal(err)
	}
	return rdb, r
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
	rdb, r := benchRepo(b)
	ctx := context.Background()
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
		ws, _, _, err := r.Read(ctx, 0, "bench", ">", 10000, -1)
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

// redisCPU is Redis's own CPU time so far (user + sys), from INFO cpu.
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	m := rdb.InfoMap(context.Background(), "cpu").Val()["CPU"]
	var total float64
	for _, k := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := strconv.ParseFloat(strings.TrimSpace(m[k]), 64)
		if err != nil {
			b.Fatalf("INFO cpu %s = %q: %v", k, m[k], err)
		}
		total += v
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkReportRedisCPU measures what one report costs Redis: its CPU
// time (INFO cpu, so the Go side and the machine's other load do not count)
// per report, on the steady-state path where most reports join an open
// window of one of 1024 combo keys, in calls of 1, 8 and 50 reports (one
// script call each):
//
//	go test -run x -bench ReportRedisCPU -benchtime 200000x ./repo/
func BenchmarkReportRedisCPU(b *testing.B) {
	for _, size := range []int{1, 8, 50} {
		b.Run("reports="+strconv.Itoa(size), func(b *testing.B) {
			rdb, r := benchRepo(b)
			ctx := context.Background()
			batch := make([]*combo.Contribution, 0, size)
			before := redisCPU(b, rdb)
			b.ReportAllocs() // the service's own side of a report, per report
			b.ResetTimer()
			for i := range b.N {
				batch = append(batch, realistic(1_000_000_000+int64(i), 1_000_000+int64(i%1024)))
				if len(batch) == size || i == b.N-1 {
					if _, err := r.Report(ctx, batch); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(redisCPU(b, rdb)-before)/float64(time.Microsecond)/float64(b.N), "redis-µs/report")
		})
	}
}

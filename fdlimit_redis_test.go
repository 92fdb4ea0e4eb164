package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/worker"
)

// openFileShortfall's Redis connections are at least what run's two
// clients open on one Redis when every caller is busy: each client's pool
// and, beside it, go-redis's own pipeline pool (DefaultPipelinePoolSize),
// which the repo's pipelines take first. Counted by the Redis itself.
func TestOpenFileShortfallCountsTheConnectionsRedisSees(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	cfg := conf.Default()
	cfg.Redis.Addr, cfg.Redis.PoolSize, cfg.Redis.Shards, cfg.Redis.Timeout = srv.Addr, 2, 1, 2*time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	_, newClient, closeAll, err := openRedis(cfg, zap.NewNop(), prometheus.NewRegistry(), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	clients := []redis.UniversalClient{newClient(0), newClient(worker.Conns(cfg.Redis.Shards, false))}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()

	// Every caller blocks on its connection for a second: plain calls
	// fill each client's pool, pipelines its pipeline pool.
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 30 {
			wg.Go(func() { c.BLPop(context.Background(), time.Second, "fdlimit:none") })
			wg.Go(func() {
				p := c.Pipeline()
				p.BLPop(context.Background(), time.Second, "fdlimit:none")
				_, _ = p.Exec(context.Background())
			})
		}
	}
	most := 0
	for end := time.Now().Add(800 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		list, err := admin.ClientList(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, strings.Count(list, "\n")-1) // not admin's own
	}
	wg.Wait()
	if counted, _, _ := openFileShortfall(cfg, 1, 1<<20); most > counted {
		t.Errorf("run's two clients held %d connections to Redis at once; openFileShortfall counts %d", most, counted)
	}
}

package main

import (
	"math"
	"runtime"
	"testing"

	"github.com/combo-service/combo-service/conf"
)

// openFileShortfall counts run's Redis connections as openRedis's clients
// can hold them (pool sizes, per node, both ends on the embedded Redis)
// and warns only below the sum.
func TestOpenFileShortfallCountsWhatTheConfigurationHolds(t *testing.T) {
	type setup struct {
		pool, shards int
		addr         string   // redis.addr
		addrs        []string // redis.addrs: a Cluster
		sentinels    []string
	}
	for _, tc := range []struct {
		name      string
		setup     setup
		maxConns  int
		nodes     int
		limit     uint64
		wantRedis int
		wantNeed  uint64
		wantShort bool
	}{
		// The report path's 20 and the worker's 20 (its 5 fit in the
		// pool), and each client's pipeline pool of 10.
		{"one Redis, at the limit", setup{pool: 20, shards: 1, addr: "r:6379"}, 10_000, 1, 10_124, 60, 10_124, false},
		{"one Redis, one below", setup{pool: 20, shards: 1, addr: "r:6379"}, 10_000, 1, 10_123, 60, 10_124, true},
		{"a container's 1024 and the default 10000", setup{pool: 20, shards: 1, addr: "r:6379"}, 10_000, 1, 1024, 60, 10_124, true},
		{"lowered to fit 1024", setup{pool: 20, shards: 1, addr: "r:6379"}, 900, 1, 1024, 60, 1024, false},
		// Both ends of each connection are this process's.
		{"embedded", setup{pool: 20, shards: 1}, 10_000, 1, 10_183, 120, 10_184, true},
		// The worker's pool grows to 3 x 8 + 2.
		{"worker above the pool", setup{pool: 4, shards: 8, addr: "r:6379"}, 100, 1, 1 << 20, 50, 214, false},
		// Per node: (10 + 4 x 8 + 1 + 2 x 10) on each of 3 masters.
		{"cluster", setup{pool: 10, shards: 8, addrs: []string{"a:7000", "b:7000", "c:7000"}}, 1000, 3, 1 << 20, 189, 1253, false},
		{"cluster, slot map unread", setup{pool: 10, shards: 8, addrs: []string{"a:7000"}}, 1000, 0, 1 << 20, 63, 1127, false},
		// The watch subscribes to each Sentinel, and each client's
		// failover holds two to one of them.
		{"sentinel", setup{pool: 10, shards: 1, sentinels: []string{"s1:26379", "s2:26379", "s3:26379"}}, 1000, 1, 1 << 20, 47, 1111, false},
		{"go-redis's default pool", setup{shards: 1, addr: "r:6379"}, 10, 1, 1 << 20, 20 + 20*runtime.GOMAXPROCS(0), uint64(94 + 20*runtime.GOMAXPROCS(0)), false},
		{"unlimited", setup{pool: 20, shards: 1, addr: "r:6379"}, math.MaxInt32, 1, math.MaxUint64, 60, math.MaxInt32 + 124, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := conf.Default()
			cfg.Server.MaxConnections = tc.maxConns
			cfg.Redis.PoolSize, cfg.Redis.Shards = tc.setup.pool, tc.setup.shards
			cfg.Redis.Addr, cfg.Redis.Addrs = tc.setup.addr, tc.setup.addrs
			if cfg.Redis.SentinelAddrs = tc.setup.sentinels; len(tc.setup.sentinels) > 0 {
				cfg.Redis.SentinelMaster = "mymaster"
			}
			redisConns, need, short := openFileShortfall(cfg, tc.nodes, tc.limit)
			if redisConns != tc.wantRedis || need != tc.wantNeed || short != tc.wantShort {
				t.Errorf("openFileShortfall(limit %d) = %d Redis connections, %d needed, short %v; want %d, %d, %v",
					tc.limit, redisConns, need, short, tc.wantRedis, tc.wantNeed, tc.wantShort)
			}
		})
	}
}

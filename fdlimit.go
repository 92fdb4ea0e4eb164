package main

import (
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/worker"
)

// fdHeadroom is the descriptors counted besides the RPC and Redis
// connections: the listeners, the metrics server's connections (scrapes,
// probes), netpoll's pollers, the redis.tls_* files read at each dial,
// stdin, stdout and stderr.
const fdHeadroom = 64

// runClients is the Redis clients run makes (newClient): the report
// path's and the worker's.
const runClients = 2

// openFileLimitWarning is logged at start when the open-file limit cannot
// hold what the configuration may open: server.max_connections bounds RPC
// connections so that they leave the Redis connections their descriptors,
// and only a limit above both does that.
const openFileLimitWarning = "open-file limit (RLIMIT_NOFILE) is below server.max_connections + the Redis connections + 64: " +
	"before server.max_connections is reached, accepts and Redis dials fail (too many open files) and reports fail UNAVAILABLE; " +
	"lower server.max_connections, or raise the limit (ulimit -n; docker run --ulimit nofile=N:N; systemd LimitNOFILE=; " +
	"on Kubernetes, the container runtime's)"

// openFileShortfall counts what cfg can hold open at once: the Redis
// connections (redisConns), and with them server.max_connections and
// fdHeadroom (need); short is whether limit, the open-file limit, is
// below need. nodes is the Redis nodes serving the shards (more than one
// only on a Redis Cluster, whose pools are per node).
func openFileShortfall(cfg conf.Config, nodes int, limit uint64) (redisConns int, need uint64, short bool) {
	// run's two clients: the report path's pool and the worker's, which
	// is at least worker.Conns (newClient's minConns); beside each pool,
	// per node, go-redis's own pipeline pool, which the repo's pipelines
	// take first (spilling into the pool when it is busy).
	pool := conf.EffectivePoolSize(cfg.Redis.PoolSize)
	redisConns = (pool + max(pool, worker.Conns(cfg.Redis.Shards, len(cfg.Redis.Addrs) > 0)) +
		runClients*redis.DefaultPipelinePoolSize) * max(nodes, 1)
	if cfg.Embedded() {
		redisConns *= 2 // both ends of each connection are this process's
	}
	if cfg.Redis.Sentinel() {
		// The Sentinel watch's subscription to each; and each client's
		// go-redis failover keeps two to the Sentinel it found the master
		// through: one it asks, one subscribed to its failovers.
		redisConns += len(cfg.Redis.SentinelAddrs) + runClients*2
	}
	need = uint64(cfg.Server.MaxConnections) + uint64(redisConns) + fdHeadroom
	return redisConns, need, limit < need
}

// warnOpenFileLimit logs openFileLimitWarning, once at start, when the
// process's open-file limit is below what cfg can hold open
// (openFileShortfall); where there is no limit to read (openFileLimit),
// it checks nothing.
func warnOpenFileLimit(cfg conf.Config, nodes int, log *zap.Logger) {
	limit, ok := openFileLimit()
	if !ok {
		return
	}
	redisConns, need, short := openFileShortfall(cfg, nodes, limit)
	if !short {
		return
	}
	log.Warn(openFileLimitWarning,
		zap.Int("server_max_connections", cfg.Server.MaxConnections), zap.Int("redis_connections", redisConns),
		zap.Uint64("open_file_limit", limit), zap.Uint64("open_files_needed", need))
}

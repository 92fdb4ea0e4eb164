package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// warnNotAppendOnly logs, once at start, each Redis node that keeps no
// append-only file (one Redis; on a Cluster every node, replicas too; with
// Sentinel, the master the Sentinels name and the replicas they list, as
// the eviction check asks). Restarted, such a node comes back from an
// older snapshot or empty: a window pushed since the snapshot is pushed
// again and one acknowledged since is lost, and from the inside that looks
// like a window another replica published, so nothing else tells. A
// Sentinel replica without AOF does no harm as a replica (restarted, it
// copies its master again) but keeps none once a failover makes it the
// master. README requires AOF; a platform's default (RDB only, or
// nothing) is easy to miss. The embedded Redis keeps nothing on disk by
// design and is not asked. A node not read is named in a warning of its
// own: the eviction check's may have read it (a Sentinel that answered in
// time for one check and not the other). It returns the nodes found
// without AOF (node -> "0"), for the append-only watch to go on from.
func warnNotAppendOnly(ctx context.Context, cfg conf.Config, store *repo.Repo, log *zap.Logger) map[string]string {
	if cfg.Embedded() {
		return nil
	}
	master, nodes, err := notAppendOnly(ctx, cfg, store)
	if err != nil {
		log.Warn("could not read every Redis node's aof_enabled; each must keep an append-only file "+
			"(appendonly yes, README: Redis settings)", zap.Error(err))
	}
	found := map[string]string{}
	for _, node := range nodes {
		found[node] = "0"
		msg := "Redis keeps no append-only file (appendonly no): restarted, it comes back from an older " +
			"snapshot or empty, and windows acknowledged since are lost or pushed twice; " +
			"set appendonly yes (README: Redis settings)"
		switch {
		case len(cfg.Redis.Addrs) > 0: // a Cluster node, master or replica: a failover swaps them
			msg = appendOnlyRule.warn
		case master != "" && node != master:
			msg = "a Redis replica keeps no append-only file (appendonly no): once a failover makes it the master, " +
				"a restart brings it back from an older snapshot or empty, and windows acknowledged since " +
				"are lost or pushed twice; set appendonly yes on every node (README: Redis settings)"
		}
		log.Warn(msg, zap.String("node", node), zap.String("aof_enabled", "0"))
	}
	return found
}

// notAppendOnly returns the nodes without AOF that warnNotAppendOnly
// names and, found through Sentinels, the master's address ("" otherwise).
func notAppendOnly(ctx context.Context, cfg conf.Config, store *repo.Repo) (master string, nodes []string, err error) {
	if cfg.Redis.Sentinel() {
		if tlsConfig, err := cfg.Redis.TLSConfig(); err == nil { // read and checked by Validate already
			// A Sentinel refusing the login is said by the eviction check.
			master, enabled, err := sentinelRead(ctx, cfg.Redis, tlsConfig, repo.AOFEnabled)
			return master, repo.AppendOnlyOff(enabled), nodesUnread(err)
		}
	}
	nodes, err = store.NotAppendOnly(ctx)
	return "", nodes, err
}

// appendOnlyRule is what the append-only watch watches: a node's aof_enabled,
// unsafe at "0".
var appendOnlyRule = nodeRule{
	name:    "append-only watch",
	setting: "aof_enabled",
	field:   "aof_enabled",
	unsafe:  func(enabled string) bool { return enabled == "0" },
	// A replica without AOF does no harm until a failover promotes it
	// (restarted, it copies its master again); the watch does not tell
	// replicas from masters, which a failover swaps.
	warn: "a Redis node keeps no append-only file (appendonly no): restarted as the master (a replica once " +
		"a failover promotes it), it comes back from an older snapshot or empty, and windows acknowledged " +
		"since are lost or pushed twice; set appendonly yes on every node (README: Redis settings)",
	safe:      "Redis node keeps an append-only file now (appendonly yes)",
	forgotten: "Redis node found without an append-only file is no longer among the nodes; forgotten",
	gauge:     func(m *metrics.Metrics) prometheus.Gauge { return m.RedisNodesNotAppendOnly },
	loop:      metrics.LoopAppendOnlyWatch,
	// The eviction watch reads the same nodes and says a refused login.
	sayRefused: false,
}

// newAppendOnlyWatch is the nodeWatch of every Redis node's aof_enabled
// (read as the start check does: appendOnlyReader), exported in
// combo_redis_nodes_not_appendonly, which the ComboRedisNotAppendOnly
// alert reads. The check at start alone missed a node turned to
// appendonly no later (CONFIG SET, a restart with another file), added to
// a Cluster later, or found by Sentinel after the start. It starts from
// the nodes the start check found (warnNotAppendOnly, already logged).
func newAppendOnlyWatch(read func(context.Context) (map[string]string, error), every, timeout time.Duration,
	known map[string]string, log *zap.Logger, m *metrics.Metrics) *nodeWatch {
	return newNodeWatch(read, appendOnlyRule, every, timeout, known, log, m)
}

// appendOnlyReader is how the append-only watch reads aof_enabled, as the start
// check does (notAppendOnly), and the time a reading may take.
func appendOnlyReader(cfg conf.Redis, store *repo.Repo) (func(context.Context) (map[string]string, error), time.Duration) {
	return nodeReader(cfg, store.AppendOnly, repo.AOFEnabled)
}

package main

import (
	"context"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
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
// time for one check and not the other).
func warnNotAppendOnly(ctx context.Context, cfg conf.Config, store *repo.Repo, log *zap.Logger) {
	if cfg.Embedded() {
		return
	}
	master, nodes, err := notAppendOnly(ctx, cfg, store)
	if err != nil {
		log.Warn("could not read every Redis node's aof_enabled; each must keep an append-only file "+
			"(appendonly yes, README: Redis settings)", zap.Error(err))
	}
	for _, node := range nodes {
		msg := "Redis keeps no append-only file (appendonly no): restarted, it comes back from an older " +
			"snapshot or empty, and windows acknowledged since are lost or pushed twice; " +
			"set appendonly yes (README: Redis settings)"
		if master != "" && node != master {
			msg = "a Redis replica keeps no append-only file (appendonly no): once a failover makes it the master, " +
				"a restart brings it back from an older snapshot or empty, and windows acknowledged since " +
				"are lost or pushed twice; set appendonly yes on every node (README: Redis settings)"
		}
		log.Warn(msg, zap.String("node", node), zap.String("aof_enabled", "0"))
	}
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

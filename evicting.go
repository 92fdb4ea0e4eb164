package main

import (
	"context"
	"crypto/tls"
	"maps"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/repo"
)

// sentinelPolicies returns the maxmemory-policy of the master the
// Sentinels name for r's master and of the replicas they list, each by its
// address (address -> policy), and the master's address. The replicas are
// asked too: a failover makes one of them the master with its own
// configuration, and the check of the master alone would have passed.
// Naming the master by its address too, a node promoted by a failover is
// one node before and after it. See sentinelRead for the nodes not read
// and the time a reading takes.
func sentinelPolicies(ctx context.Context, r conf.Redis, tlsConfig *tls.Config) (master string, policies map[string]string, err error) {
	return sentinelRead(ctx, r, tlsConfig, repo.MaxmemoryPolicy)
}

// warnEvictingFoundBySentinel is warnEvicting's check of the master the
// Sentinels name and of the replicas they list.
func warnEvictingFoundBySentinel(ctx context.Context, r conf.Redis, tlsConfig *tls.Config, log *zap.Logger) map[string]string {
	master, policies, err := sentinelPolicies(ctx, r, tlsConfig)
	if err != nil { // of some nodes: the others' policies are still named
		log.Warn("could not read every Redis node's maxmemory-policy; it must be noeviction on each: "+
			"a failover makes a replica the master with its own"+refusingUser(err), zap.Error(err))
	}
	nodes := evictingOnly(policies)
	for addr, policy := range nodes {
		msg := "a Redis replica may evict this service's keys once a failover makes it the master: " +
			"maxmemory-policy must be noeviction on every node"
		if addr == master {
			msg = "Redis may evict this service's keys: maxmemory-policy must be noeviction, " +
				"or windows, dedupe ids and the stream can be lost under memory pressure"
		}
		log.Warn(msg, zap.String("node", addr), zap.String("maxmemory_policy", policy))
	}
	return nodes
}

// refusingUser ends the warning of a start check (or the eviction watch)
// that could not read some nodes when a login was refused (WRONGPASS, or
// NOAUTH): a replica made without the service's ACL user is found only
// so, and it fails every command once a failover makes it the master; a
// Sentinel that refuses redis.sentinel_username (one restarted before it
// wrote the user to its configuration) leaves the service unable to find
// the master. A node that only denies INFO, or did not answer, gets
// nothing added. err is one error or a join of them (sentinelRead's,
// where a Sentinel's is named "sentinel <addr>: ...").
func refusingUser(err error) string {
	nodes, sentinels := refusedLogins(err)
	var said string
	if nodes > 0 {
		said += "; a node refuses this service's login: when every node refuses it, check redis.username and " +
			"redis.password (COMBO_REDIS_USERNAME, COMBO_REDIS_PASSWORD); when some do, as the master (a replica, " +
			"once a failover promotes it) each refuses every report: make the user on every node, replicas included " +
			"(README: Redis settings)"
	}
	if sentinels > 0 {
		said += "; a Sentinel refuses the login of redis.sentinel_username and redis.sentinel_password: " +
			"make that user on every Sentinel, or set the password a Sentinel asks for, and keep it (README: Redis Sentinel)"
	}
	return said
}

// refusedLogins counts the nodes and the Sentinels whose refusal of the
// login err holds: err is one error or a join of them, each perhaps
// wrapped by its operation (repo's eachNode joins one per node under its
// op; sentinelRead joins the Sentinels', named "sentinel <addr>: ...",
// and the nodes'). Each error below the last join counts once.
func refusedLogins(err error) (nodes, sentinels int) {
	for _, e := range errorLeaves(err) {
		switch {
		case !loginRefused(e):
		case strings.HasPrefix(e.Error(), "sentinel "):
			sentinels++
		default:
			nodes++
		}
	}
	return nodes, sentinels
}

// loginRefused reports whether err says Redis or a Sentinel refused the
// login: the user or its password is not there (WRONGPASS), no login was
// sent where one is asked for (NOAUTH), or the password changed under a
// connection (go-redis's own classification of its replies).
func loginRefused(err error) bool { return redis.IsAuthError(err) }

// evictingOnly drops the nodes on noeviction from policies.
func evictingOnly(policies map[string]string) map[string]string {
	maps.DeleteFunc(policies, func(_, policy string) bool { return policy == "noeviction" })
	return policies
}

// nodeOptions are the options of a one-off client of one node (a Sentinel,
// a replica) that a start-up check asks: redis.timeout, no retries.
func nodeOptions(r conf.Redis, tlsConfig *tls.Config, addr, username, password string) *redis.Options {
	return &redis.Options{
		Addr: addr, Username: username, Password: password, TLSConfig: tlsConfig,
		DialTimeout: r.Timeout, ReadTimeout: r.Timeout, WriteTimeout: r.Timeout, MaxRetries: -1, DialerRetries: 1,
		// as openRedis's clients: no CLIENT SETINFO, no CLIENT MAINT_NOTIFICATIONS
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// policyReader is how the eviction watch reads the policies, as the start check
// does (warnEvicting), and the time a reading may take: repo.Policies of
// every node store asks (one Redis; a Cluster's masters and replicas) or,
// with Sentinel, sentinelPolicies.
func policyReader(cfg conf.Redis, store *repo.Repo) (func(context.Context) (map[string]string, error), time.Duration) {
	return nodeReader(cfg, store.Policies, repo.MaxmemoryPolicy)
}

// warnEvicting logs, once at start, each Redis node whose maxmemory-policy
// may evict the service's keys: an evicted window, dedupe set or stream
// loses gifts silently or counts them twice, and a policy set by a
// platform's default is easy to miss. The embedded Redis has no policy.
// Found through Sentinels, the master they name and the replicas they
// list are asked, each by its address. It returns the nodes found evicting
// (on a Cluster, replicas included), node by node, for the eviction watch to go
// on from: it reads the same nodes (policyReader).
func warnEvicting(ctx context.Context, cfg conf.Config, store *repo.Repo, log *zap.Logger) map[string]string {
	if cfg.Embedded() {
		return nil
	}
	if cfg.Redis.Sentinel() {
		if tlsConfig, err := cfg.Redis.TLSConfig(); err == nil { // read and checked by Validate already
			return warnEvictingFoundBySentinel(ctx, cfg.Redis, tlsConfig, log)
		}
	}
	nodes, err := store.Evicting(ctx)
	if err != nil { // of some nodes: the others' policies are still named
		log.Warn("could not read Redis's maxmemory-policy; it must be noeviction"+refusingUser(err), zap.Error(err))
	}
	for addr, policy := range nodes {
		log.Warn(nodeMayEvict, zap.String("node", addr), zap.String("maxmemory_policy", policy))
	}
	return nodes
}

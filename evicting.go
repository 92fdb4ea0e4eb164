package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
// one node before and after it. A node not read (it did not answer, or
// the Sentinels see it as down, when it is left unasked) is named in the
// error and missing from the map, so that evictionWatch keeps what it was
// last read as; so is a replica the Sentinels still list once it is gone
// for good, until they are told to forget it (SENTINEL RESET, as removing a
// replica asks anyway). The nodes are asked at once, after the Sentinels
// in turn until one answers: the whole reading takes at most about twice
// redis.timeout for each Sentinel asked (two commands), and one more.
func sentinelPolicies(ctx context.Context, r conf.Redis, tlsConfig *tls.Config) (master string, policies map[string]string, err error) {
	node := func(addr, username, password string) *redis.Options {
		return nodeOptions(r, tlsConfig, addr, username, password)
	}
	var replicas []map[string]string
	var errs []error
	for _, addr := range r.SentinelAddrs { // the first that answers
		sc := redis.NewSentinelClient(node(addr, r.SentinelUsername, r.SentinelPassword))
		m, err := sc.GetMasterAddrByName(ctx, r.SentinelMaster).Result()
		var rs []map[string]string
		if err == nil {
			rs, err = sc.Replicas(ctx, r.SentinelMaster).Result()
		}
		_ = sc.Close()
		if err == nil && len(m) == 2 {
			master, replicas, errs = net.JoinHostPort(m[0], m[1]), rs, nil
			break
		}
		if err == nil {
			err = fmt.Errorf("its master's address reads %q", m)
		}
		errs = append(errs, fmt.Errorf("sentinel %s: %w", addr, err))
	}
	var nodes []string
	if master != "" {
		nodes = append(nodes, master)
	}
	for _, rep := range replicas {
		addr := net.JoinHostPort(rep["ip"], rep["port"])
		if flags := rep["flags"]; strings.Contains(flags, "s_down") || strings.Contains(flags, "disconnected") {
			errs = append(errs, fmt.Errorf("replica %s: not asked, down as the Sentinels see it (flags %s)", addr, flags))
			continue
		}
		nodes = append(nodes, addr)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	policies = map[string]string{}
	for _, addr := range nodes {
		wg.Go(func() {
			c := redis.NewClient(node(addr, r.Username, r.Password))
			policy, err := repo.MaxmemoryPolicy(ctx, c)
			_ = c.Close()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			} else {
				policies[addr] = policy
			}
		})
	}
	wg.Wait()
	return master, policies, errors.Join(errs...)
}

// warnEvictingFoundBySentinel is warnEvicting's check of the master the
// Sentinels name and of the replicas they list.
func warnEvictingFoundBySentinel(ctx context.Context, r conf.Redis, tlsConfig *tls.Config, log *zap.Logger) map[string]string {
	master, policies, err := sentinelPolicies(ctx, r, tlsConfig)
	if err != nil { // of some nodes: the others' policies are still named
		log.Warn("could not read every Redis node's maxmemory-policy; it must be noeviction on each: "+
			"a failover makes a replica the master with its own", zap.Error(err))
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
		DisableIdentity: true, // as openRedis's clients: no CLIENT SETINFO
	}
}

// policyReader is how evictionWatch reads the policies, as the start check
// does (warnEvicting), and the time a reading may take: repo.Policies of
// every node store asks (one Redis; a Cluster's masters and replicas) or,
// with Sentinel, sentinelPolicies.
func policyReader(cfg conf.Redis, store *repo.Repo) (func(context.Context) (map[string]string, error), time.Duration) {
	tlsConfig, err := cfg.TLSConfig() // read and checked by Validate already
	if !cfg.Sentinel() || err != nil {
		return store.Policies, cfg.Timeout
	}
	read := func(ctx context.Context) (map[string]string, error) {
		_, policies, err := sentinelPolicies(ctx, cfg, tlsConfig)
		return policies, err
	}
	return read, time.Duration(2*len(cfg.SentinelAddrs)+1) * cfg.Timeout
}

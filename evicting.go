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

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/repo"
)

// replicaPolicies returns the maxmemory-policy of the replicas the
// Sentinels list for r's master (address -> policy). A failover makes one
// of them the master with its own configuration, and the check of the
// master alone would have passed. A replica the Sentinels see as down is
// skipped (it cannot be promoted); one that does not answer is named in the
// error, and missing from the map. The replicas are asked at once, after
// the Sentinels in turn until one answers: the whole reading takes at most
// about redis.timeout per Sentinel asked, and one more.
func replicaPolicies(ctx context.Context, r conf.Redis, tlsConfig *tls.Config) (map[string]string, error) {
	node := func(addr, username, password string) *redis.Options {
		return nodeOptions(r, tlsConfig, addr, username, password)
	}
	var replicas []map[string]string
	var errs []error
	for _, addr := range r.SentinelAddrs { // the first that answers
		sc := redis.NewSentinelClient(node(addr, r.SentinelUsername, r.SentinelPassword))
		rs, err := sc.Replicas(ctx, r.SentinelMaster).Result()
		_ = sc.Close()
		if err == nil {
			replicas, errs = rs, nil
			break
		}
		errs = append(errs, fmt.Errorf("sentinel %s: %w", addr, err))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]string{}
	for _, rep := range replicas {
		if strings.Contains(rep["flags"], "s_down") || strings.Contains(rep["flags"], "disconnected") {
			continue
		}
		addr := net.JoinHostPort(rep["ip"], rep["port"])
		wg.Go(func() {
			c := redis.NewClient(node(addr, r.Username, r.Password))
			policy, err := repo.MaxmemoryPolicy(ctx, c)
			_ = c.Close()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("replica %s: %w", addr, err))
			} else {
				out[addr] = policy
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
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

// policyReader is how evictionWatch reads the policies: of every node store
// asks (repo.Policies: one Redis; a Cluster's masters and replicas; the
// master found by Sentinel) and, with Sentinel, of the replicas the
// Sentinels list, as the start check asks them, and the time a reading
// may take. After a failover the Sentinels list the old master among the
// replicas, and the promoted one is the master found by Sentinel.
func policyReader(cfg conf.Redis, store *repo.Repo) (func(context.Context) (map[string]string, error), time.Duration) {
	tlsConfig, err := cfg.TLSConfig() // read and checked by Validate already
	if !cfg.Sentinel() || err != nil {
		return store.Policies, cfg.Timeout
	}
	read := func(ctx context.Context) (map[string]string, error) {
		var replicas map[string]string
		var replicasErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			replicas, replicasErr = replicaPolicies(ctx, cfg, tlsConfig)
		}()
		nodes, err := store.Policies(ctx)
		<-done
		if nodes == nil {
			nodes = map[string]string{}
		}
		maps.Copy(nodes, replicas)
		return nodes, errors.Join(err, replicasErr)
	}
	return read, time.Duration(len(cfg.SentinelAddrs)+1) * cfg.Timeout
}

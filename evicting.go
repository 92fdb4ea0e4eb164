package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/repo"
)

// evictingReplicas returns the replicas (address -> maxmemory-policy) that
// the Sentinels list for r's master and whose policy is not noeviction. A
// failover makes one of them the master with its own configuration, and
// the check of the master alone would have passed. A replica the Sentinels
// see as down is skipped; one that does not answer is named in the error.
func evictingReplicas(ctx context.Context, r conf.Redis, tlsConfig *tls.Config) (map[string]string, error) {
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
	out := map[string]string{}
	for _, rep := range replicas {
		if strings.Contains(rep["flags"], "s_down") || strings.Contains(rep["flags"], "disconnected") {
			continue
		}
		addr := net.JoinHostPort(rep["ip"], rep["port"])
		c := redis.NewClient(node(addr, r.Username, r.Password))
		policy, err := repo.MaxmemoryPolicy(ctx, c)
		_ = c.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("replica %s: %w", addr, err))
		} else if policy != "noeviction" {
			out[addr] = policy
		}
	}
	return out, errors.Join(errs...)
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

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/repo"
)

// sentinelRead runs read on the master the Sentinels name for r's master
// and on each replica they list, and returns what each gave by its
// address (address -> value) and the master's address. The start checks
// ask the replicas too: a failover makes one of them the master, with its
// own configuration. A node not read (it did not answer, or the Sentinels
// see it as down, when it is left unasked) is named in the error and
// missing from the map, so that a nodeWatch keeps what it was last read
// as; so is a replica the Sentinels still list once it is gone for good,
// until they are told to forget it (SENTINEL RESET, as removing a replica
// asks anyway). The nodes are asked at once, after the Sentinels in turn
// until one answers: the whole reading takes at most about twice
// redis.timeout for each Sentinel asked (two commands), and one more.
// Another Sentinel's failure is no news once one answers, except a login
// it refused (WRONGPASS, NOAUTH: one restarted before it wrote
// redis.sentinel_username's user to its configuration comes back
// without it), which the go-redis client and the failover watch meet only
// when they need it: those are kept in the error, and the Sentinels after
// the one that answered are each logged in to (PING), with the nodes.
func sentinelRead(ctx context.Context, r conf.Redis, tlsConfig *tls.Config,
	read func(context.Context, *redis.Client) (string, error)) (master string, values map[string]string, err error) {
	node := func(addr, username, password string) *redis.Options {
		return nodeOptions(r, tlsConfig, addr, username, password)
	}
	var replicas []map[string]string
	var errs []error
	var unasked []string                   // the Sentinels after the one that answered
	for i, addr := range r.SentinelAddrs { // the first that answers
		sc := redis.NewSentinelClient(node(addr, r.SentinelUsername, r.SentinelPassword))
		m, err := sc.GetMasterAddrByName(ctx, r.SentinelMaster).Result()
		var rs []map[string]string
		if err == nil {
			rs, err = sc.Replicas(ctx, r.SentinelMaster).Result()
		}
		_ = sc.Close()
		if err == nil && len(m) == 2 {
			master, replicas = net.JoinHostPort(m[0], m[1]), rs
			errs = slices.DeleteFunc(errs, func(err error) bool { return !loginRefused(err) })
			for j, err := range errs {
				errs[j] = sentinelRefused{err}
			}
			unasked = r.SentinelAddrs[i+1:]
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
	for _, addr := range unasked {
		wg.Go(func() {
			sc := redis.NewSentinelClient(node(addr, r.SentinelUsername, r.SentinelPassword))
			err := sc.Ping(ctx).Err()
			_ = sc.Close()
			if err != nil && loginRefused(err) {
				mu.Lock()
				defer mu.Unlock()
				errs = append(errs, sentinelRefused{fmt.Errorf("sentinel %s: %w", addr, err)})
			}
		})
	}
	values = map[string]string{}
	for _, addr := range nodes {
		wg.Go(func() {
			c := redis.NewClient(node(addr, r.Username, r.Password))
			value, err := read(ctx, c)
			_ = c.Close()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			} else {
				values[addr] = value
			}
		})
	}
	wg.Wait()
	return master, values, errors.Join(errs...)
}

// sentinelRefused is a Sentinel's refusal of the login that sentinelRead
// keeps once another Sentinel has answered: news of the Sentinels, not a
// node left unread (nodesUnread).
type sentinelRefused struct{ error }

func (e sentinelRefused) Unwrap() error { return e.error }

// nodesUnread is err (a reading's, sentinelRead's or repo's) without the
// Sentinels' refusals of the login kept beside nodes that were read and
// without the Cluster's failed nodes (kept by name: failedNodes): nil
// when every other node was read.
func nodesUnread(err error) error {
	var left []error
	for _, e := range errorLeaves(err) {
		var refused sentinelRefused
		var failed repo.FailedNode
		if !errors.As(e, &refused) && !errors.As(e, &failed) {
			left = append(left, e)
		}
	}
	return errors.Join(left...)
}

// failedNodes are the addresses of the Cluster's failed nodes err names
// (repo.FailedNode): not read, and kept as last read.
func failedNodes(err error) map[string]bool {
	nodes := map[string]bool{}
	for _, e := range errorLeaves(err) {
		if failed, ok := errors.AsType[repo.FailedNode](e); ok {
			nodes[failed.Addr] = true
			if failed.HostAddr != "" {
				nodes[failed.HostAddr] = true
			}
		}
	}
	return nodes
}

// errorLeaves are the errors err joins, each as joined (its own wrapping
// kept), below every join and every operation wrapping one: repo's
// eachNode joins one per node under its op, sentinelRead the Sentinels'
// and the nodes'. An error that joins nothing is its own one leaf.
func errorLeaves(err error) []error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if joined, ok := e.(interface{ Unwrap() []error }); ok {
			var leaves []error
			for _, part := range joined.Unwrap() {
				leaves = append(leaves, errorLeaves(part)...)
			}
			return leaves
		}
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

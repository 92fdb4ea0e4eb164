package repo

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// failoverClientAddr is the Addr go-redis gives a client that finds its
// master through Sentinels (NewFailoverClient): it names no node.
const failoverClientAddr = "FailoverClient"

// Evicting returns the nodes (address -> maxmemory-policy) whose policy is
// not noeviction: under memory pressure they may evict an open window, a
// dedupe set or the stream itself, and those gifts are never pushed (or
// counted twice), which README requires noeviction to prevent. On a Redis
// Cluster every node is asked, replicas too: a failover makes one the
// master, with its own policy. It reads INFO memory, which managed Redis
// services allow where they refuse CONFIG GET. A node that does not
// answer (down at start, or its user denied INFO) is named in the error,
// and the nodes that did answer are returned all the same: one master
// down must not hide the policy of the others.
func (r *Repo) Evicting(ctx context.Context) (map[string]string, error) {
	policies, err := r.Policies(ctx)
	for node, policy := range policies {
		if policy == "noeviction" {
			delete(policies, node)
		}
	}
	return policies, err
}

// Policies returns the maxmemory-policy of every node Evicting asks that
// answered (address -> policy), and an error naming each that did not: a
// node missing from the map was not read, unlike one read as noeviction.
func (r *Repo) Policies(ctx context.Context) (map[string]string, error) {
	var mu sync.Mutex // ForEachShard asks the nodes at once
	out := map[string]string{}
	var errs []error // of every node, where ForEachShard returns one
	ask := func(ctx context.Context, c *redis.Client) error {
		policy, err := MaxmemoryPolicy(ctx, c)
		node := c.Options().Addr
		if node == failoverClientAddr {
			node = "the master found by Sentinel"
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", node, err))
		} else {
			out[node] = policy
		}
		return nil
	}
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		// An error here is the cluster's state, before any node was asked.
		if err := c.ForEachShard(ctx, ask); err != nil {
			errs = append(errs, err)
		}
	case *redis.Client:
		_ = ask(ctx, c)
	default:
		return nil, fmt.Errorf("repo.Policies: a %T cannot be asked node by node", r.rdb)
	}
	return out, wrap("repo.Policies", errors.Join(errs...))
}

// MaxmemoryPolicy reads c's node's maxmemory-policy from INFO memory.
//
// A reply go-redis cannot parse is an error, not a panic: its INFO parser
// panics on a line before any "# Section" header (a proxy, a server that
// only speaks Redis's protocol), and the nodes are asked on goroutines of
// their own (ForEachShard, main's sentinelPolicies) that no loop's recover
// reaches, so one such node would end the process instead of being named
// as not read. go-redis drops the connection the panic left.
func MaxmemoryPolicy(ctx context.Context, c *redis.Client) (policy string, err error) {
	defer func() {
		if p := recover(); p != nil {
			policy, err = "", fmt.Errorf("repo.MaxmemoryPolicy: unreadable INFO reply: %v", p)
		}
	}()
	info := c.InfoMap(ctx, "memory")
	if err := info.Err(); err != nil {
		return "", fmt.Errorf("repo.MaxmemoryPolicy: %w", err)
	}
	if p := info.Item("Memory", "maxmemory_policy"); p != "" {
		return p, nil
	}
	return "", errors.New("repo.MaxmemoryPolicy: INFO memory names no maxmemory_policy")
}

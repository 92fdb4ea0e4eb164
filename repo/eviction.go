package repo

import (
	"context"
	"fmt"

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
	return r.eachNode(ctx, "repo.Policies", MaxmemoryPolicy)
}

// MaxmemoryPolicy reads c's node's maxmemory-policy from INFO memory.
func MaxmemoryPolicy(ctx context.Context, c *redis.Client) (string, error) {
	p, err := infoField(ctx, c, "Memory", "maxmemory_policy")
	if err != nil {
		return "", fmt.Errorf("repo.MaxmemoryPolicy: %w", err)
	}
	return p, nil
}

package repo

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Evicting returns the nodes (address -> maxmemory-policy) whose policy is
// not noeviction: under memory pressure they may evict an open window, a
// dedupe set or the stream itself, and those gifts are never pushed (or
// counted twice), which README requires noeviction to prevent. On a Redis
// Cluster every master is asked. It reads INFO memory, which managed Redis
// services allow where they refuse CONFIG GET.
func (r *Repo) Evicting(ctx context.Context) (map[string]string, error) {
	var mu sync.Mutex // ForEachMaster asks the masters at once
	out := map[string]string{}
	ask := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return fmt.Errorf("%s: %w", c.Options().Addr, err)
		}
		policy := infoField(info, "maxmemory_policy")
		if policy == "" {
			return fmt.Errorf("%s: INFO memory names no maxmemory_policy", c.Options().Addr)
		}
		if policy != "noeviction" {
			mu.Lock()
			out[c.Options().Addr] = policy
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, ask)
	case *redis.Client:
		err = ask(ctx, c)
	default:
		return nil, fmt.Errorf("repo.Evicting: a %T cannot be asked node by node", r.rdb)
	}
	if err != nil {
		return nil, wrap("repo.Evicting", err)
	}
	return out, nil
}

// infoField is the value of name in an INFO reply ("name:value" lines).
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

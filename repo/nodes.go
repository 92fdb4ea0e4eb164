package repo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// eachNode runs read on every node the start checks ask (one Redis, the
// master found by Sentinel, or every node of a Cluster, replicas too: a
// failover makes one the master, with its own configuration) and returns
// what each that answered gave (address -> value), and an error, named by
// op, naming each that did not: one node down must not hide the others.
func (r *Repo) eachNode(ctx context.Context, op string,
	read func(context.Context, *redis.Client) (string, error)) (map[string]string, error) {
	var mu sync.Mutex // ForEachShard asks the nodes at once
	out := map[string]string{}
	var errs []error // of every node, where ForEachShard returns one
	ask := func(ctx context.Context, c *redis.Client) error {
		value, err := read(ctx, c)
		node := c.Options().Addr
		if node == failoverClientAddr {
			node = "the master found by Sentinel"
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", node, err))
		} else {
			out[node] = value
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
		return nil, fmt.Errorf("%s: a %T cannot be asked node by node", op, r.rdb)
	}
	return out, wrap(op, errors.Join(errs...))
}

// infoField reads one field of one section of c's node's INFO (which
// managed Redis services allow where they refuse CONFIG GET).
//
// A reply go-redis cannot parse is an error, not a panic: its INFO parser
// panics on a line before any "# Section" header (a proxy, a server that
// only speaks Redis's protocol), and the nodes are asked on goroutines of
// their own (ForEachShard, main's sentinelPolicies) that no loop's recover
// reaches, so one such node would end the process instead of being named
// as not read. go-redis drops the connection the panic left.
func infoField(ctx context.Context, c *redis.Client, section, field string) (value string, err error) {
	defer func() {
		if p := recover(); p != nil {
			value, err = "", fmt.Errorf("unreadable INFO reply: %v", p)
		}
	}()
	info := c.InfoMap(ctx, strings.ToLower(section))
	if err := info.Err(); err != nil {
		return "", err
	}
	if v := info.Item(section, field); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("INFO %s names no %s", strings.ToLower(section), field)
}

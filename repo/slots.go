package repo

import (
	"context"
	"fmt"
	"runtime"
	"slices"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/semaphore"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// This file bounds the report calls that run pipelines of their own
// (coalescer.alone): how many at once on each Redis node, and which node
// serves each shard.

// aloneSlots is how many pipelines of their own (calls of bigCall
// reports or more, calls spanning shards) may run at once on one node:
// what the client's pool holds (per node), less a connection for each of
// the node's shards' shared pipelines (shardsOnNode) and one for the rest
// (the readiness probe, a degraded publish). Unbounded, a flood of batches
// all started at once and queued for a pooled connection on
// redis.timeout's clock: one that got its connection late was sent with
// little of that time left, counted by Redis, then answered UNAVAILABLE;
// its caller's retry came back a duplicate, and Redis's time, scarce just
// then, went on an answer the service dropped. Waiting here, a call is
// unsent until it has a slot, and a slot finds a connection free.
func aloneSlots(rdb redis.UniversalClient, shardsOnNode int) int {
	pool := 10 * runtime.GOMAXPROCS(0) // go-redis's default for one node
	switch c := rdb.(type) {
	case *redis.Client: // a Sentinel's failover client too
		pool = c.Options().PoolSize
	case *redis.ClusterClient:
		pool = c.Options().PoolSize
	}
	return max(pool-max(shardsOnNode, 1)-1, 1)
}

// ShardNodes numbers, for Settings.ShardNodes, the Redis node that serves
// each of keys' shards: all 0 on one Redis; on a Redis Cluster, by its
// slot map now (go-redis's copy of it, which it reloads when a node
// answers MOVED and when it is older than its reload interval). On a
// Cluster the pool is per node and a node serves only its own shards'
// shared pipelines, so the slots for pipelines of their own are counted
// per node: counted over all shards, 24 shards on 6 masters with a pool
// of 20 left one slot for the whole service. And a master that stops
// answering holds only its own node's slots, so batches on the other
// masters go on, as their single reports do, and so do the parts on them
// of batches spanning it (reportSpanning). Nodes are numbered in the
// order shard 0, 1, … first meets them, so a failover, which keeps a
// node's shards together under a new address, numbers them as before.
func ShardNodes(ctx context.Context, rdb redis.UniversalClient, keys Keys) ([]int, error) {
	nodes := make([]int, keys.Shards())
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return nodes, nil
	}
	index := map[string]int{}
	for shard := range nodes {
		m, err := cc.MasterForKey(ctx, keys.Stream(shard))
		if err != nil {
			return nil, wrap("repo.ShardNodes", err)
		}
		addr := m.Options().Addr
		n, seen := index[addr]
		if !seen {
			n = len(index)
			index[addr] = n
		}
		nodes[shard] = n
	}
	return nodes, nil
}

// RefreshShardNodes reads again which node serves each shard (see
// ShardNodes) and, if that changed, sizes the slots anew, so a reshard
// that moved shards between nodes, or a start that could not read the
// slot map and counted every shard on one node, is not kept until the
// next start. Calls already holding slots give them back to the table
// they took them from: for as long as they run, a node may carry up to
// twice its bound. On one Redis it changes nothing and asks Redis nothing.
func (r *Repo) RefreshShardNodes(ctx context.Context) (changed bool, err error) {
	nodes, err := ShardNodes(ctx, r.rdb, r.keys)
	if err != nil {
		return false, err
	}
	if slices.Equal(nodes, r.slots.Load().shardNode) {
		return false, nil
	}
	r.slots.Store(newSlotTable(r.rdb, r.set.Shards, nodes))
	return true, nil
}

// slotTable bounds the pipelines of their own that run at once on each
// node: shardNode[shard] indexes nodes.
type slotTable struct {
	shardNode []int
	nodes     []nodeSlots
}

// nodeSlots bounds the pipelines of their own that run at once on one
// node (see aloneSlots).
type nodeSlots struct {
	sem *semaphore.Weighted
	n   int // its size
}

// newSlotTable numbers each of shards' nodes (shardNodes, or all 0 if it
// is not one valid number per shard) and sizes each node's slots by its
// own shards.
func newSlotTable(rdb redis.UniversalClient, shards int, shardNodes []int) *slotTable {
	t := &slotTable{shardNode: make([]int, max(shards, 1))}
	valid := len(shardNodes) == len(t.shardNode)
	for _, n := range shardNodes {
		valid = valid && n >= 0 && n < len(t.shardNode)
	}
	if valid {
		copy(t.shardNode, shardNodes)
	}
	onNode := make([]int, slices.Max(t.shardNode)+1)
	for _, n := range t.shardNode {
		onNode[n]++
	}
	for _, shards := range onNode {
		n := aloneSlots(rdb, shards)
		t.nodes = append(t.nodes, nodeSlots{sem: semaphore.NewWeighted(int64(n)), n: n})
	}
	return t
}

// takeAloneSlots waits, up to redis.timeout and while ctx lasts, for a
// slot on each node cs's shards are on, taken in the nodes' order so two
// calls never each hold one the other waits for. release gives them back,
// to the table they were taken from.
func (r *Repo) takeAloneSlots(ctx context.Context, cs []*combo.Contribution) (release func(), err error) {
	t := r.slots.Load()
	var nodes []int
	for _, c := range cs {
		n := t.shardNode[r.keys.Shard(c.ActivityId, c.UserId, c.ItemType)]
		if !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	wait, cancel := context.WithTimeout(ctx, r.set.Timeout)
	defer cancel()
	for i, n := range nodes {
		if t.nodes[n].sem.Acquire(wait, 1) == nil {
			continue
		}
		for _, held := range nodes[:i] {
			t.nodes[held].sem.Release(1)
		}
		if err := ctx.Err(); err != nil { // not Redis's fault
			return nil, fmt.Errorf("repo.Report: %w: %w", ErrCallerGone, err)
		}
		return nil, &opError{op: "repo.Report", unavailable: true,
			err: fmt.Errorf("waited %s (redis.timeout) for one of the %d pipelines to a Redis node that calls of their own may run at once, unsent",
				r.set.Timeout, t.nodes[n].n)}
	}
	return func() {
		for _, n := range nodes {
			t.nodes[n].sem.Release(1)
		}
	}, nil
}

package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// errNoSlotMap is a CLUSTER SLOTS answer with no slot, refused. It is
// seen only when no node answers a slot map (go-redis keeps the first
// error and asks the next node): a cluster not created yet, or every node
// reset.
var errNoSlotMap = errors.New("serves no slot (CLUSTER SLOTS answered none): the cluster is not created yet, " +
	"or this node was removed from it (del-node) and still runs; its answer is not taken as the slot map")

// newClusterNode is the Cluster client's client of one node, under
// noEmptySlotMap.
func newClusterNode(o *redis.Options) *redis.Client {
	c := redis.NewClient(o)
	c.AddHook(noEmptySlotMap{addr: o.Addr})
	return c
}

// noEmptySlotMap turns a CLUSTER SLOTS answer with no slot into an error.
// `redis-cli --cluster del-node` resets the node it removes (CLUSTER RESET
// SOFT) and leaves it running; go-redis keeps it among the nodes it asks
// for the slot map for about a minute (until its GC of unused nodes), and
// took its empty answer as the map: with no slot known, commands went to
// any node, and reports and flushes failed MOVED or CLUSTERDOWN on shards
// that never moved. A node of a cluster always serves some slot map, so
// an empty one is never the cluster's; refused, go-redis asks the next
// node (Jedis and ered do the same).
type noEmptySlotMap struct{ addr string }

func (noEmptySlotMap) DialHook(next redis.DialHook) redis.DialHook { return next }

func (noEmptySlotMap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h noEmptySlotMap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if slots, ok := cmd.(*redis.ClusterSlotsCmd); ok && err == nil && len(slots.Val()) == 0 {
			// The client sets it as the command's error too.
			return fmt.Errorf("%s %w", h.addr, errNoSlotMap)
		}
		return err
	}
}

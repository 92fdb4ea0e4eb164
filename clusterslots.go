package main

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// errNoSlotMap is a CLUSTER SLOTS answer with no slot, refused.
var errNoSlotMap = errors.New("CLUSTER SLOTS answered no slot: this node is in no cluster " +
	"(one removed with del-node and still running?); its answer is not taken as the slot map")

// newClusterNode is the Cluster client's client of one node, under
// noEmptySlotMap.
func newClusterNode(o *redis.Options) *redis.Client {
	c := redis.NewClient(o)
	c.AddHook(noEmptySlotMap{})
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
type noEmptySlotMap struct{}

func (noEmptySlotMap) DialHook(next redis.DialHook) redis.DialHook { return next }

func (noEmptySlotMap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (noEmptySlotMap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if slots, ok := cmd.(*redis.ClusterSlotsCmd); ok && err == nil && len(slots.Val()) == 0 {
			slots.SetErr(errNoSlotMap)
			return errNoSlotMap
		}
		return err
	}
}

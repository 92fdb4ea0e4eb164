package repo

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// PendingCalls is how many Report calls wait for a shared pipeline, over
// all shards.
func PendingCalls(r *Repo) int {
	n := 0
	for _, c := range r.reports {
		c.mu.Lock()
		n += len(c.pending)
		c.mu.Unlock()
	}
	return n
}

// WriteProbeLua is the readiness probe's script, whose ACL checks must
// name every command the service runs.
const WriteProbeLua = writeProbeLua

// AloneSlots is how many calls may run pipelines of their own at once on
// the node of each shard.
func AloneSlots(r *Repo) []int {
	t := r.slots.Load()
	out := make([]int, len(t.shardNode))
	for shard, n := range t.shardNode {
		out[shard] = t.nodes[n].n
	}
	return out
}

// IsDegradedPublish tells whether cmd publishes a degraded report
// (degrade.lua, by its hash or its body).
func IsDegradedPublish(cmd redis.Cmder) bool {
	a := cmd.Args()
	switch cmd.Name() {
	case "evalsha":
		return len(a) > 1 && a[1] == degradeScript.Hash()
	case "eval":
		return len(a) > 1 && a[1] == degradeLua
	}
	return false
}

// PublishSingles publishes cs each on its own, as for degraded reports,
// and returns the ids it did not publish: remembered already; and the
// first report's error, if one failed.
// No deadline: as for reports whose whole script call failed.
func PublishSingles(ctx context.Context, r *Repo, cs []*combo.Contribution) (map[int64]bool, error) {
	return firstError(r.publishSingles(ctx, cs, make([]redisClock, len(cs))))
}

func firstError(known map[int64]bool, errs []error) (map[int64]bool, error) {
	for _, err := range errs {
		if err != nil {
			return known, err
		}
	}
	return known, nil
}

// PublishSinglesAfter is PublishSingles for reports whose script failed
// when the node's clock read clockMs, read here just now: each call's
// deadline counts from there.
func PublishSinglesAfter(ctx context.Context, r *Repo, cs []*combo.Contribution, clockMs int64) (map[int64]bool, error) {
	clocks := make([]redisClock, len(cs))
	for i := range clocks {
		clocks[i] = redisClock{ms: clockMs, read: time.Now()}
	}
	return firstError(r.publishSingles(ctx, cs, clocks))
}

// DegradeHash is the SHA1 of degrade.lua, as EVALSHA names it.
func DegradeHash() string { return degradeScript.Hash() }

// PruneOne runs the prune script alone on shard's consumer name, as
// PruneConsumers does once its own reading let it through: 1 if it
// deleted it.
func PruneOne(ctx context.Context, r *Repo, shard int, name string, idle time.Duration) (int, error) {
	return r.pruneOne(ctx, r.keys.Stream(shard), name, idle)
}

// FailedNodeOf is failedNodeOf, for the tests of repo_test.
var FailedNodeOf = failedNodeOf

// Rejoin puts self back in shard's group, as PruneConsumers does when it
// finds it missing.
func Rejoin(ctx context.Context, r *Repo, shard int, self string) error {
	return r.rejoin(ctx, r.keys.Stream(shard), self)
}

// Client is r's Redis client.
func Client(r *Repo) redis.UniversalClient { return r.rdb }

// FailedClocks runs cs through the report script, without publishing any
// of them on its own, and answers for each the node's clock (Redis ms)
// its reply carried when the script failed for it (status 3), else 0.
func FailedClocks(ctx context.Context, r *Repo, cs []*combo.Contribution) ([]int64, error) {
	replies, err := r.execute(ctx, cs)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(replies))
	for i, rep := range replies {
		if rep.status == 3 {
			out[i] = rep.clock.ms
		}
	}
	return out, nil
}

package repo

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
)

//go:embed degrade.lua
var degradeLua string

var degradeScript = redis.NewScript(degradeLua)

// publishSingles publishes each contribution as a record of its own
// (degraded) and remembers its id, so that a retry of it answers duplicate:
// before, the report script had forgotten it and a retry whose answer had
// been lost was published a second time, on its own again or in a window.
// degrade.lua publishes an id at most once, also when go-redis sends its
// call again, unless Redis refuses writes (then it cannot remember it).
//
// All go in one pipeline, one script call each: one round trip however
// many a pipeline degrades, so a batch is not left half published when its
// time runs out. Each call names its shard's stream and probe keys, which
// on a Redis Cluster send it to the master of the report's shard, and keep
// it off the shard while its slot moves (TRYAGAIN: UNAVAILABLE, as for the
// report script). (A bare PUBLISH names no key; go-redis sent it to any
// master in turn, so a master that did not answer failed the degraded
// reports of live shards too, after redis.timeout.)
//
// It returns the ids the dedupe sets already held, which it did not
// publish: published by this same call, sent again by go-redis after its
// answer was lost, or counted meanwhile by another copy into a window,
// which pushes it. Either way the report is a duplicate now.
//
// A failed call (an error reply, or none) fails the whole batch: the
// reports whose call did publish are remembered (unless Redis refuses
// writes) and answer duplicate when the caller sends them again, the
// others are published then.
func (r *Repo) publishSingles(ctx context.Context, cs []*combo.Contribution) (map[int64]bool, error) {
	var known map[int64]bool
	todo := cs
	for attempt := 0; ; attempt++ {
		pipe := r.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(todo))
		for i, c := range todo {
			payload, err := push.Single(c)
			if err != nil {
				return nil, fmt.Errorf("repo.publishSingles: %w", err)
			}
			shard := r.keys.Shard(c.ActivityId, c.UserId, c.ItemType)
			run := degradeScript.EvalSha
			if attempt > 0 {
				run = degradeScript.Eval
			}
			cmds[i] = run(ctx, pipe, []string{r.keys.Stream(shard), r.keys.Probe(shard)}, push.Channel(c.ActivityId), payload,
				r.keys.SeenPrefix(shard), r.bucketSec, strconv.FormatInt(c.Id, 10), strconv.FormatInt(c.Id%dedupeSubsets, 10))
		}
		_, err := pipe.Exec(ctx)
		// A script cache flushed under us (restart, failover): run those
		// again with EVAL. NOSCRIPT means the call did not run, so nothing
		// is published twice.
		var retry []*combo.Contribution
		for i, cmd := range cmds {
			if e := cmd.Err(); e != nil {
				if attempt > 0 || !redis.HasErrorPrefix(e, "NOSCRIPT") {
					return nil, wrapWithin("repo.publishSingles", e, reportTimeout)
				}
				retry = append(retry, todo[i])
				continue
			}
			if v, _ := cmd.Int64(); v == degradeKnown {
				if known == nil {
					known = make(map[int64]bool)
				}
				known[todo[i].Id] = true
			}
		}
		if len(retry) == 0 {
			if err != nil {
				return nil, wrapWithin("repo.publishSingles", err, reportTimeout)
			}
			return known, nil
		}
		todo = retry
	}
}

// degradeKnown is degrade.lua's answer for an id already remembered.
const degradeKnown = 2

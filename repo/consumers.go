package repo

import (
	"context"
	_ "embed"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed prune.lua
var pruneLua string

var pruneScript = redis.NewScript(pruneLua)

// PruneConsumers removes from shard's group every consumer other than self
// that has no pending entries and has been idle at least idle, and returns
// their names. A consumer with pending entries is never removed: its
// entries are reclaimed first (XAUTOCLAIM), which empties its list.
func (r *Repo) PruneConsumers(ctx context.Context, shard int, self string, idle time.Duration) ([]string, error) {
	stream := r.keys.Stream(shard)
	consumers, err := r.rdb.XInfoConsumers(ctx, stream, Group).Result()
	if err != nil {
		// No group, or no stream yet ("ERR no such key"; HasErrorPrefix
		// drops "ERR "): a new Redis, before the shard's reader made them
		// (XGROUP CREATE MKSTREAM); nobody to remove.
		if redis.HasErrorPrefix(err, "NOGROUP") || redis.HasErrorPrefix(err, "no such key") {
			return nil, nil
		}
		return nil, wrap("repo.PruneConsumers", err)
	}
	var removed []string
	for _, c := range consumers {
		if c.Name == self || c.Pending > 0 || c.Idle < idle {
			continue
		}
		// Re-checked atomically in the script: it may have read meanwhile.
		n, err := r.pruneOne(ctx, stream, c.Name, idle)
		if err != nil {
			return removed, wrap("repo.PruneConsumers", err)
		}
		if n == 1 {
			removed = append(removed, c.Name)
		}
	}
	return removed, nil
}

// pruneOne runs prune.lua: it deletes consumer name from stream's group
// if it has no pending entries and has been idle at least idle, and says
// 1 if it did.
func (r *Repo) pruneOne(ctx context.Context, stream, name string, idle time.Duration) (int, error) {
	return pruneScript.Run(ctx, r.rdb, []string{stream}, Group, name, strconv.FormatInt(idle.Milliseconds(), 10)).Int()
}

// StreamStats is shard's stream length and pending-entries count.
func (r *Repo) StreamStats(ctx context.Context, shard int) (length, pending int64, err error) {
	stream := r.keys.Stream(shard)
	pipe := r.rdb.Pipeline()
	l := pipe.XLen(ctx, stream)
	p := pipe.XPending(ctx, stream, Group)
	if _, err := pipe.Exec(ctx); err != nil && !redis.HasErrorPrefix(err, "NOGROUP") {
		return 0, 0, wrap("repo.StreamStats", err)
	}
	if p.Err() == nil {
		pending = p.Val().Count
	}
	return l.Val(), pending, nil
}

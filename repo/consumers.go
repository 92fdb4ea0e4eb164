package repo

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed prune.lua
var pruneLua string

var pruneScript = redis.NewScript(pruneLua)

// PruneConsumers removes from shard's group every consumer other than self
// that has no pending entries, has been idle at least idle and names no
// live replica, and returns their names. A consumer with pending entries
// is never removed: its entries are reclaimed first (XAUTOCLAIM), which
// empties its list. A live replica is one whose settings key has not
// expired (ShareSettings, every 30 s). Its reader's blocked reads of new
// entries neither add nor refresh its consumer in Redis 7.0 (only a
// delivery, or its re-read of its own pending entries at start, does), so
// on a quiet shard it looks idle for as long as the shard stays quiet.
// Removed, it would not be in the group that a Redis Cluster reshard
// carries to the new master, and the reader, whose blocked read the move
// ends, would take the move for a loss (Read's moved check): counted,
// logged and alerted on as one.
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
	if !slices.ContainsFunc(consumers, func(c redis.XInfoConsumer) bool { return c.Name == self }) {
		if err := r.rejoin(ctx, stream, self); err != nil {
			return nil, wrap("repo.PruneConsumers", err)
		}
	}
	var idleOnes []string
	for _, c := range consumers {
		if c.Name != self && c.Pending == 0 && c.Idle >= idle {
			idleOnes = append(idleOnes, c.Name)
		}
	}
	// On a Redis Cluster the settings keys are on shard 0's master: with it
	// down, no shard's dead consumers are removed until it is back.
	live, err := r.liveReplicas(ctx, idleOnes)
	if err != nil {
		return nil, wrap("repo.PruneConsumers", fmt.Errorf("shard %d: reading which replicas live (their settings keys, on shard 0): %w", shard, err))
	}
	var removed []string
	for _, name := range idleOnes {
		if live[name] {
			continue
		}
		// Re-checked atomically in the script: it may have read meanwhile.
		n, err := r.pruneOne(ctx, stream, name, idle)
		if err != nil {
			return removed, wrap("repo.PruneConsumers", err)
		}
		if n == 1 {
			removed = append(removed, name)
		}
	}
	return removed, nil
}

// rejoin puts self back in stream's group, from which it was removed while
// its replica lives (by a replica that pruned idle consumers without
// asking whether they live, or by hand): Redis 7.0 adds a consumer on a
// read from 0, not on a blocked read handed nothing, so on a quiet shard
// it would stay out, and a reshard of the shard be taken for a loss
// (Read's moved check). A read of its own pending entries, as the reader
// makes at start, by the command the ACL user runs already (XGROUP
// CREATECONSUMER it is not granted), but after the largest id a stream
// entry can take but one (rejoinAfter): it returns nothing, so an entry
// the reader was handed since the listing is not delivered again (its
// idle time, which another replica's claimer reads, reset, its delivery
// count raised).
func (r *Repo) rejoin(ctx context.Context, stream, self string) error {
	err := r.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: Group, Consumer: self, Streams: []string{stream, rejoinAfter}, Count: 1, Block: -1,
	}).Err()
	if err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "NOGROUP") {
		return fmt.Errorf("putting %s back in the group: %w", self, err)
	}
	return nil
}

// rejoinAfter is the id after which rejoin reads its own pending entries:
// past every entry's, and not 18446744073709551615-18446744073709551615,
// which Redis parses as ">" (new entries, delivered to it).
const rejoinAfter = "18446744073709551615-0"

// liveReplicas says which of names have a settings key (ReplicaSettings)
// that has not expired, in one round trip. By GET, which ShareSettings
// needs already, not EXISTS, which README lets a user on one Redis go
// without.
func (r *Repo) liveReplicas(ctx context.Context, names []string) (map[string]bool, error) {
	if len(names) == 0 {
		return nil, nil
	}
	pipe := r.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(names))
	for i, name := range names {
		gets[i] = pipe.Get(ctx, r.keys.ReplicaSettings(name))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	live := map[string]bool{}
	for i, get := range gets {
		switch err := get.Err(); {
		case err == nil:
			live[names[i]] = true
		case !errors.Is(err, redis.Nil): // Exec names only the pipeline's first error, maybe a Nil
			return nil, err
		}
	}
	return live, nil
}

// pruneOne runs prune.lua: it deletes consumer name from stream's group
// if it has no pending entries and has been idle at least idle, and says
// 1 if it did.
func (r *Repo) pruneOne(ctx context.Context, stream, name string, idle time.Duration) (int, error) {
	return pruneScript.Run(ctx, r.rdb, []string{stream}, Group, name, strconv.FormatInt(idle.Milliseconds(), 10)).Int()
}

// StreamStats is a sample of one shard's stream, for the metrics.
type StreamStats struct {
	Length  int64 // entries: windows not yet flushed
	Pending int64 // entries read by a consumer and not yet flushed
	// OldestDue is when the stream's first entry comes due (Redis ms), 0
	// when the stream is empty. A flush deletes its window's entry, so the
	// first entry is the window that has waited longest, whoever holds it
	// or none: how far Redis's clock is past it tells a shard whose
	// windows stopped being published (a slot stuck half-moved, no replica
	// reading it) before they are dropped stale, where push lag, observed
	// only on a publish, tells nothing.
	OldestDue int64
	// NewestOpened is when the stream's last entry opened (Redis ms, its
	// id's ms part), 0 when the stream is empty. XADD keeps a stream's ids
	// increasing, so after Redis's clock steps back (an NTP step, a
	// failover to a node whose clock is behind) new windows take ids ahead
	// of it and come due that much late, by the clock that times them:
	// their push lag reads 0, and only this, ahead of the clock, shows it.
	NewestOpened int64
}

// StreamStats samples shard's stream: its length, its pending entries,
// when its oldest window comes due and when its newest opened, in one
// round trip.
func (r *Repo) StreamStats(ctx context.Context, shard int) (StreamStats, error) {
	stream := r.keys.Stream(shard)
	pipe := r.rdb.Pipeline()
	l := pipe.XLen(ctx, stream)
	p := pipe.XPending(ctx, stream, Group)
	first := pipe.XRangeN(ctx, stream, "-", "+", 1)
	last := pipe.XRevRangeN(ctx, stream, "+", "-", 1)
	if _, err := pipe.Exec(ctx); err != nil && !redis.HasErrorPrefix(err, "NOGROUP") {
		return StreamStats{}, wrap("repo.StreamStats", err)
	}
	st := StreamStats{Length: l.Val()}
	if p.Err() == nil {
		st.Pending = p.Val().Count
	}
	if msgs := first.Val(); len(msgs) > 0 {
		opened, err := openedAt(msgs[0].ID)
		if err != nil {
			return StreamStats{}, wrap("repo.StreamStats", err)
		}
		st.OldestDue = opened + r.delay.Milliseconds()
	}
	if msgs := last.Val(); len(msgs) > 0 {
		opened, err := openedAt(msgs[0].ID)
		if err != nil {
			return StreamStats{}, wrap("repo.StreamStats", err)
		}
		st.NewestOpened = opened
	}
	return st, nil
}

package repo

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// ShareSettings writes self's settings (a string that is equal between
// replicas exactly when their settings are) to its key for ttl, and
// returns those of the other replicas that keep theirs (consumer ->
// settings). The others are the consumers of shard 0's group, which every
// replica reads whatever its shard count; one whose key has expired (it
// stopped, or runs a version that keeps none) is left out.
//
// Replicas must agree on redis.shards and window.*: with different ones a
// combo key's reports land in two windows, or an id in two dedupe sets,
// and are pushed or counted twice. README says to change them by stopping
// every replica; a rolling update does not, and this is how a replica
// sees it. Only commands the README's ACL user already has are used.
func (r *Repo) ShareSettings(ctx context.Context, self, settings string, ttl time.Duration) (map[string]string, error) {
	stream := r.keys.Stream(0)
	pipe := r.rdb.Pipeline()
	set := pipe.Set(ctx, r.keys.ReplicaSettings(self), settings, ttl)
	consumers := pipe.XInfoConsumers(ctx, stream, Group)
	_, _ = pipe.Exec(ctx) // each command's error is its own
	if err := set.Err(); err != nil {
		return nil, wrap("repo.ShareSettings", err)
	}
	// No group or no stream yet: no other replica has read.
	if err := consumers.Err(); err != nil && !redis.HasErrorPrefix(err, "NOGROUP") && !redis.HasErrorPrefix(err, "no such key") {
		return nil, wrap("repo.ShareSettings", err)
	}
	var names []string
	for _, c := range consumers.Val() {
		if c.Name != self {
			names = append(names, c.Name)
		}
	}
	out := map[string]string{}
	if len(names) == 0 {
		return out, nil
	}
	pipe = r.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(names))
	for i, name := range names {
		gets[i] = pipe.Get(ctx, r.keys.ReplicaSettings(name))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap("repo.ShareSettings", err)
	}
	for i, get := range gets {
		if v, err := get.Result(); err == nil {
			out[names[i]] = v
		}
	}
	return out, nil
}

// ForgetSettings deletes self's settings key: a replica stopped cleanly is
// not compared with those started after it, with other settings, within
// the key's TTL.
func (r *Repo) ForgetSettings(ctx context.Context, self string) error {
	return wrap("repo.ForgetSettings", r.rdb.Del(ctx, r.keys.ReplicaSettings(self)).Err())
}

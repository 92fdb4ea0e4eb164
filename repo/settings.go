package repo

import (
	"context"
	_ "embed"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// replicasTTL bounds how long the set of replicas (Keys.Replicas) outlives
// the last replica that shared its settings: every key but the streams
// expires.
const replicasTTL = 24 * time.Hour

// ShareSettings writes self's settings (a string that is equal between
// replicas exactly when their settings are) to its key for ttl, names
// self in the set of replicas, and returns the settings of the other
// replicas named there whose key has not expired (consumer -> settings).
// A replica whose key has expired (killed, or stopped without
// ForgetSettings) is taken out of the set. Not atomically: one that comes
// back under the same name between the reading and the removal is taken
// out too, and names itself again at its next reading, 30 s on.
//
// Replicas must agree on redis.shards and window.*: with different ones a
// combo key's reports land in two windows, or an id in two dedupe sets,
// and are pushed or counted twice. README says to change them by stopping
// every replica; a rolling update does not, and this is how a replica
// sees it. The replicas are named in a set of their own, not found among
// the group's consumers: Redis 7.0 lists a consumer only once it has been
// delivered an entry, and drops one pruned while idle until it is again.
func (r *Repo) ShareSettings(ctx context.Context, self, settings string, ttl time.Duration) (map[string]string, error) {
	replicas := r.keys.Replicas()
	// The set's expiry is dated by Redis's clock: a host clock a day
	// behind would date it in the past, and Redis would delete it.
	now, err := r.Time(ctx, 0)
	if err != nil {
		return nil, wrap("repo.ShareSettings", err)
	}
	pipe := r.rdb.Pipeline()
	pipe.Set(ctx, r.keys.ReplicaSettings(self), settings, ttl)
	pipe.SAdd(ctx, replicas, self)
	pipe.ExpireAt(ctx, replicas, now.Add(replicasTTL))
	members := pipe.SMembers(ctx, replicas)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, wrap("repo.ShareSettings", err)
	}
	var names []string
	for _, name := range members.Val() {
		if name != self {
			names = append(names, name)
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
	var gone []any
	for i, get := range gets {
		switch v, err := get.Result(); {
		case err == nil:
			out[names[i]] = v
		case errors.Is(err, redis.Nil):
			gone = append(gone, names[i])
		default: // Exec names only the pipeline's first error, maybe a Nil
			return nil, wrap("repo.ShareSettings", err)
		}
	}
	if len(gone) > 0 {
		if err := r.rdb.SRem(ctx, replicas, gone...).Err(); err != nil {
			return nil, wrap("repo.ShareSettings", err)
		}
	}
	return out, nil
}

// ClaimConsumer names instance (a string only this process writes) as the
// process running as consumer self, for ttl, and returns the instance the
// key named before, "" when none did or it was instance itself. Two
// processes given one worker.consumer (README says each must have its
// own) find each other so: each finds the other's name at its next claim.
// They push each window once all the same (the flush script decides), but
// share one consumer's pending entries and one settings key, so a
// difference in their settings goes unseen. A process restarted after a
// crash finds its predecessor's name at its first claim, which the caller
// must discount.
func (r *Repo) ClaimConsumer(ctx context.Context, self, instance string, ttl time.Duration) (string, error) {
	was, err := r.rdb.SetArgs(ctx, r.keys.ConsumerInstance(self), instance, redis.SetArgs{Get: true, TTL: ttl}).Result()
	switch {
	case errors.Is(err, redis.Nil), err == nil && was == instance:
		return "", nil
	case err != nil:
		return "", wrap("repo.ClaimConsumer", err)
	}
	return was, nil
}

//go:embed forget.lua
var forgetLua string

var forgetScript = redis.NewScript(forgetLua)

// ForgetSettings deletes self's settings and takes it out of the set of
// replicas: a replica stopped cleanly is not compared with those started
// after it, with other settings, within its key's TTL. It deletes self's
// claim too (ClaimConsumer), so the process started next under that name
// finds none. All of it only while the claim is instance's, or nobody's
// (forget.lua): when another process given the same consumer claimed it
// since, that one still runs, its settings are the key's, and nothing is
// deleted. It reports whether it deleted.
func (r *Repo) ForgetSettings(ctx context.Context, self, instance string) (bool, error) {
	keys := []string{r.keys.ConsumerInstance(self), r.keys.ReplicaSettings(self), r.keys.Replicas()}
	n, err := forgetScript.Run(ctx, r.rdb, keys, instance, self).Int()
	if err != nil {
		return false, wrap("repo.ForgetSettings", err)
	}
	return n == 1, nil
}

package repo_test

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/repo"
)

// Each replica sees the settings of the others that share theirs,
// whatever its own shard count; one stopped cleanly, or whose key expired
// (killed), is left out, and taken out of the set of replicas.
func TestShareSettingsSeesTheOtherReplicas(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	one := repo.New(rdb, repo.Settings{Shards: 1})
	four := repo.New(rdb, repo.Settings{Shards: 4})
	keys := repo.NewKeys(1)

	if got, err := one.ShareSettings(ctx, "a", "shards=1", time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("alone: %v %v, want none", got, err)
	}
	// "killed" was named once, and its key has expired since.
	if err := rdb.SAdd(ctx, keys.Replicas(), "killed").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := four.ShareSettings(ctx, "b", "shards=4", time.Minute); err != nil || !maps.Equal(got, map[string]string{"a": "shards=1"}) {
		t.Fatalf("b sees %v %v, want a's", got, err)
	}
	if rdb.SIsMember(ctx, keys.Replicas(), "killed").Val() {
		t.Fatal("a replica whose settings expired is still named among the replicas")
	}
	if got, err := one.ShareSettings(ctx, "a", "shards=1", time.Minute); err != nil || !maps.Equal(got, map[string]string{"b": "shards=4"}) {
		t.Fatalf("a sees %v %v, want b's", got, err)
	}
	if ttl := rdb.PTTL(ctx, keys.ReplicaSettings("a")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("a's settings have TTL %s, want up to the 1m given", ttl)
	}
	// The set outlives every replica's refresh by far, and still expires.
	if ttl := rdb.PTTL(ctx, keys.Replicas()).Val(); ttl < 23*time.Hour || ttl > 24*time.Hour {
		t.Fatalf("the set of replicas has TTL %s, want about 24h", ttl)
	}
	if forgot, err := four.ForgetSettings(ctx, "b", "b's process"); err != nil || !forgot {
		t.Fatalf("b, never claimed, forgot its settings: %v %v, want true", forgot, err)
	}
	if got, err := one.ShareSettings(ctx, "a", "shards=1", time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("after b forgot its settings a sees %v %v, want none", got, err)
	}
	if rdb.SIsMember(ctx, keys.Replicas(), "b").Val() {
		t.Fatal("b, stopped cleanly, is still named among the replicas")
	}
}

// A Redis that refuses writes (reads still answered) fails the sharing,
// naming the operation: settings not written would leave this replica
// unseen by the others.
func TestShareSettingsFailsWhenWritesAreRefused(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := repo.New(rdb, repo.Settings{Shards: 1}).ShareSettings(ctx, "a", "x", time.Minute)
	if err == nil || !strings.HasPrefix(err.Error(), "repo.ShareSettings:") || !strings.Contains(err.Error(), "NOREPLICAS") {
		t.Fatalf("with writes refused: %v, want an error naming repo.ShareSettings and NOREPLICAS", err)
	}
}

// With Redis down the error names the operation.
func TestShareSettingsFailsNamingItself(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	srv.Kill()
	_, err := repo.New(rdb, repo.Settings{Shards: 1}).ShareSettings(context.Background(), "a", "x", time.Minute)
	if err == nil || !strings.HasPrefix(err.Error(), "repo.ShareSettings:") {
		t.Fatalf("with Redis down: %v, want an error naming repo.ShareSettings", err)
	}
}

// A GET of another replica's settings that fails with other than Nil fails
// the reading, even when an earlier GET's Nil is what Exec returns.
func TestShareSettingsFailsOnAWrongTypeSettingsKey(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	keys := repo.NewKeys(1)
	rdb.SAdd(ctx, keys.Replicas(), "me", "gone1", "gone2", "gone3", "gone4")
	// A replica whose settings key is of another type, named after at least
	// one that is gone in SMEMBERS's order (a hash order: names are tried
	// until one lands there), so that Exec's first error is a Nil.
	for i := 0; ; i++ {
		bad := "bad" + strconv.Itoa(i)
		rdb.SAdd(ctx, keys.Replicas(), bad)
		if m := rdb.SMembers(ctx, keys.Replicas()).Val(); m[0] != bad && !(m[0] == "me" && m[1] == bad) {
			rdb.SAdd(ctx, keys.ReplicaSettings(bad), "not a string")
			break
		}
		rdb.SRem(ctx, keys.Replicas(), bad)
	}
	_, err := repo.New(rdb, repo.Settings{Shards: 1}).ShareSettings(ctx, "me", "x", time.Minute)
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("ShareSettings = %v, want WRONGTYPE", err)
	}
}

// skewHook moves the seconds of every script's TIME answer by skew: Redis's
// clock as a host far from it would see it.
type skewHook struct{ skew time.Duration }

func (skewHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (skewHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h skewHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.Cmd); ok && err == nil && strings.HasPrefix(strings.ToLower(cmd.Name()), "eval") {
			if v, ok := c.Val().([]any); ok && len(v) == 2 {
				if s, ok := v[0].(string); ok {
					n, _ := strconv.ParseInt(s, 10, 64)
					c.SetVal([]any{strconv.FormatInt(n+int64(h.skew/time.Second), 10), v[1]})
				}
			}
		}
		return err
	}
}

// The set's EXPIREAT is dated by Redis's TIME, not the host's clock: from a
// host a day behind, an expiry dated by its own clock would be in the past,
// and Redis would delete the set at every reading.
func TestShareSettingsDatesTheSetByRedisTime(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	skewed := redis.NewClient(&redis.Options{Addr: srv.Addr})
	skewed.AddHook(skewHook{skew: 48 * time.Hour}) // Redis's clock seen 2 days ahead
	t.Cleanup(func() { skewed.Close() })
	if _, err := repo.New(skewed, repo.Settings{Shards: 1}).ShareSettings(ctx, "a", "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, repo.NewKeys(1).Replicas()).Val(); ttl < 71*time.Hour {
		t.Fatalf("set TTL %v, want ~72h (dated by the TIME script's answer)", ttl)
	}
}

// Two processes claiming one consumer find each other: each claim returns
// the process that claimed before it, if another; a process's own claim
// again, or none, returns ""; the claim expires, and ForgetSettings
// deletes it, on one Redis and in a Cluster slot with the consumer's
// settings (one DEL of both).
func TestClaimConsumerFindsAnotherProcess(t *testing.T) {
	ctx := context.Background()
	for name, rdb := range map[string]redis.UniversalClient{
		"one Redis": testredis.Start(t, testredis.Options{}).Client(),
		"Cluster":   testredis.StartCluster(t, 3).Client(t),
	} {
		r := repo.New(rdb, repo.Settings{Shards: 1})
		key := repo.NewKeys(1).ConsumerInstance("x")
		for i, step := range []struct{ instance, want string }{
			{"p1", ""}, {"p1", ""}, {"p2", "p1"}, {"p1", "p2"}, {"p1", ""},
		} {
			if got, err := r.ClaimConsumer(ctx, "x", step.instance, time.Minute); err != nil || got != step.want {
				t.Fatalf("%s: claim %d by %s found %q %v, want %q", name, i, step.instance, got, err, step.want)
			}
		}
		if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
			t.Fatalf("%s: the claim has TTL %s, want up to the 1m given", name, ttl)
		}
		if got, err := r.ClaimConsumer(ctx, "y", "p2", time.Minute); err != nil || got != "" {
			t.Fatalf("%s: another consumer's claim found %q %v, want nothing", name, got, err)
		}
		if forgot, err := r.ForgetSettings(ctx, "x", "p1"); err != nil || !forgot {
			t.Fatalf("%s: p1, holding the claim, forgot: %v %v, want true", name, forgot, err)
		}
		if n := rdb.Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("%s: the claim is still there after ForgetSettings", name)
		}
		if got, err := r.ClaimConsumer(ctx, "x", "p3", time.Minute); err != nil || got != "" {
			t.Fatalf("%s: a claim after ForgetSettings found %q %v, want nothing", name, got, err)
		}
	}
}

// A process stopping while another given the same consumer holds the
// claim (it claimed since) deletes nothing: the one still running wrote
// the settings key, and must stay compared with the other replicas and
// named among them, and its claim must stay for its twin check. Once the
// holder itself stops, all of it goes. On one Redis and in a Cluster
// slot (one script over the three keys).
func TestForgetSettingsKeepsWhatAnotherProcessHolds(t *testing.T) {
	ctx := context.Background()
	for name, rdb := range map[string]redis.UniversalClient{
		"one Redis": testredis.Start(t, testredis.Options{}).Client(),
		"Cluster":   testredis.StartCluster(t, 3).Client(t),
	} {
		r := repo.New(rdb, repo.Settings{Shards: 1})
		keys := repo.NewKeys(1)
		for _, p := range []string{"p1", "p2"} { // p2 claims last: it holds the claim
			if _, err := r.ClaimConsumer(ctx, "x", p, time.Minute); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if _, err := r.ShareSettings(ctx, "x", "s", time.Minute); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if forgot, err := r.ForgetSettings(ctx, "x", "p1"); err != nil || forgot {
			t.Fatalf("%s: p1 stopping while p2 holds the claim forgot: %v %v, want false", name, forgot, err)
		}
		if got := rdb.Get(ctx, keys.ConsumerInstance("x")).Val(); got != "p2" {
			t.Fatalf("%s: after p1 stopped the claim is %q, want p2's", name, got)
		}
		if rdb.Exists(ctx, keys.ReplicaSettings("x")).Val() != 1 || !rdb.SIsMember(ctx, keys.Replicas(), "x").Val() {
			t.Fatalf("%s: after p1 stopped, p2's settings or its name among the replicas are gone", name)
		}
		if forgot, err := r.ForgetSettings(ctx, "x", "p2"); err != nil || !forgot {
			t.Fatalf("%s: p2, holding the claim, forgot: %v %v, want true", name, forgot, err)
		}
		if n := rdb.Exists(ctx, keys.ConsumerInstance("x"), keys.ReplicaSettings("x")).Val(); n != 0 ||
			rdb.SIsMember(ctx, keys.Replicas(), "x").Val() {
			t.Fatalf("%s: after p2 stopped, %d of its claim and settings remain, or its name", name, n)
		}
	}
}

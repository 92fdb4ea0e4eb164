package repo_test

import (
	"context"
	"maps"
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
	if err := four.ForgetSettings(ctx, "b"); err != nil {
		t.Fatal(err)
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

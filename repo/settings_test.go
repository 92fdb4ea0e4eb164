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

// Each replica sees the settings of the others that read shard 0's group
// and keep theirs, whatever its own shard count; one stopped cleanly, or
// never keeping any, is left out.
func TestShareSettingsSeesTheOtherReplicas(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	one := repo.New(rdb, repo.Settings{Shards: 1})
	four := repo.New(rdb, repo.Settings{Shards: 4})

	// Before any group exists: nobody else.
	if got, err := one.ShareSettings(ctx, "a", "shards=1", time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("on a new Redis: %v %v, want none", got, err)
	}
	stream := repo.NewKeys(1).Stream(0)
	if err := rdb.XGroupCreateMkStream(ctx, stream, repo.Group, "$").Err(); err != nil {
		t.Fatal(err)
	}
	// Each joins the group as a worker does, reading its own pending
	// entries first (Redis 7.0 adds no consumer for a ">" read that
	// delivers nothing).
	for _, c := range []string{"a", "b", "old"} { // "old" keeps no settings
		err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: repo.Group, Consumer: c, Streams: []string{stream, "0"}, Count: 1, Block: -1}).Err()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
	}
	if got, err := four.ShareSettings(ctx, "b", "shards=4", time.Minute); err != nil || !maps.Equal(got, map[string]string{"a": "shards=1"}) {
		t.Fatalf("b sees %v %v, want a's", got, err)
	}
	if got, err := one.ShareSettings(ctx, "a", "shards=1", time.Minute); err != nil || !maps.Equal(got, map[string]string{"b": "shards=4"}) {
		t.Fatalf("a sees %v %v, want b's", got, err)
	}
	if ttl := rdb.PTTL(ctx, repo.NewKeys(1).ReplicaSettings("a")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("a's settings key has TTL %s, want up to 1m", ttl)
	}
	if err := four.ForgetSettings(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if got, err := one.ShareSettings(ctx, "a", "shards=1", time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("after b forgot its settings a sees %v %v, want none", got, err)
	}
}

// With Redis down the error names the operation, fast.
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

package main

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/repo"
)

// A memory run waits for earlier runs' dedupe sets and windows, on every
// shard, to expire, and for nothing else (the streams stay); one still
// there past the limit is named.
func TestWaitCleanWaitsForDedupeSetsAndWindowsOnly(t *testing.T) {
	ctx := context.Background()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	keys := repo.NewKeys(2)
	set, window := keys.SeenPrefix(1)+"7:1", keys.Current(0, 7, 42, "rose")
	if err := rdb.SAdd(ctx, set, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, window, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream(0), Values: []any{"k", "v"}}).Err(); err != nil {
		t.Fatal(err)
	}

	if left, err := waitClean(ctx, rdb, keys, 100*time.Millisecond); err != nil || left != set && left != window {
		t.Fatalf("waitClean with both there = %q, %v; want one of them named", left, err)
	}
	rdb.PExpire(ctx, set, 300*time.Millisecond)
	rdb.PExpire(ctx, window, 600*time.Millisecond)
	start := time.Now()
	if left, err := waitClean(ctx, rdb, keys, 20*time.Second); err != nil || left != "" {
		t.Fatalf("waitClean once both expire = %q, %v; want clean", left, err)
	}
	if time.Since(start) < 600*time.Millisecond {
		t.Errorf("waitClean returned after %v, before the window key expired", time.Since(start))
	}
}

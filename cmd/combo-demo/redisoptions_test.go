package main

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
)

// The tool's Redis client connects without a command Redis refuses
// (go-redis's CLIENT SETINFO and CLIENT MAINT_NOTIFICATIONS, by default),
// which would show in INFO errorstats as the service's clients do not.
func TestRedisClientConnectsWithoutRefusedCommands(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	admin := srv.Client()
	errorstats := func() string { return admin.Info(ctx, "errorstats").Val() }
	before := errorstats()
	c := redis.NewClient(redisOptions(srv.Addr, ""))
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if after := errorstats(); after != before {
		t.Fatalf("the client sent commands Redis refused on connecting:\n%s\nwhere before it connected:\n%s", after, before)
	}
}

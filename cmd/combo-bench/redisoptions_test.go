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
	refused := srv.RefusedWhile(func() {
		c := redis.NewClient(redisOptions(srv.Addr, 8))
		defer c.Close()
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if refused != "" {
		t.Fatalf("the client sent commands Redis refused on connecting: %s", refused)
	}
}

package main

import (
	"context"
	"os"
	"testing"

	"github.com/combo-service/combo-service/internal/testredis"
)

// Redis's CPU is read from /proc by the pid INFO reports, which is only
// right when that pid is a redis-server here (not a container's pid 1).
func TestRedisPIDIsARedisServerHere(t *testing.T) {
	ctx := context.Background()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	pid := redisPID(ctx, rdb, 0)
	if !isRedisServer(pid) {
		t.Fatalf("redisPID = %d, not this test's redis-server", pid)
	}
	if isRedisServer(os.Getpid()) || isRedisServer(0) {
		t.Fatal("isRedisServer takes another process for Redis")
	}
	if got := redisPID(ctx, rdb, 4242); got != 4242 {
		t.Fatalf("-redis-pid 4242 gave %d", got)
	}
}

// A Redis whose pid is unknown here is reported as not measured, never as
// a CPU of 0.
func TestUnmeasuredRedisCPUIsNotZero(t *testing.T) {
	u := newCPUSampler(0, 0).since(1000)
	if !u.RedisUnmeasured || u.redisMsPer1k() != "n/a" || u.redisCores() != "n/a" {
		t.Fatalf("%+v prints %s ms/1k, %s cores", u, u.redisMsPer1k(), u.redisCores())
	}
	if u := newCPUSampler(0, os.Getpid()).since(1000); u.RedisUnmeasured || u.redisMsPer1k() == "n/a" {
		t.Fatalf("a known pid is reported unmeasured: %+v", u)
	}
}

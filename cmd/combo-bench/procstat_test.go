package main

import (
	"context"
	"os"
	"strings"
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

// A service whose pid was not given (-service-pid) is not measured: its
// CPU prints as n/a, in the runs' table as in the curve's, never as 0.
func TestUnmeasuredServiceCPUIsNotZero(t *testing.T) {
	u := newCPUSampler(0, os.Getpid()).since(1000)
	var b strings.Builder
	runs{{Mode: "single", CPU: u}}.print(&b)
	curveResult{Points: []curvePoint{{Level: 1000, CPU: u}}}.print(&b)
	out := b.String()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "cpu ms/1k svc") && !strings.HasSuffix(strings.TrimSpace(line), "n/a") {
			t.Errorf("unmeasured service CPU printed as %q", line)
		}
		if strings.HasPrefix(strings.TrimSpace(line), "cores svc/redis/bench") && !strings.Contains(line, "n/a/") {
			t.Errorf("unmeasured service cores printed as %q", line)
		}
		if strings.HasPrefix(strings.TrimSpace(line), "1000 ") && !strings.Contains(line, "n/a") {
			t.Errorf("curve row with unmeasured service CPU: %q", line)
		}
	}
	if u := newCPUSampler(os.Getpid(), 0).since(1000); u.serviceMsPer1k() == "n/a" {
		t.Fatalf("a known service pid is reported unmeasured: %+v", u)
	}
}

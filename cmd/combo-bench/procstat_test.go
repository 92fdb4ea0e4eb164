package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

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

// A service (or Redis) that exits during the run (a restart gives it a
// new pid, and the old one is gone) is not measured: its CPU printed as a
// negative figure before, its readings' difference to 0. A pid reused by
// another process is told apart by its start time.
func TestServiceExitedDuringTheRunIsUnmeasured(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := newCPUSampler(cmd.Process.Pid, cmd.Process.Pid) // as the service and as Redis
	if !s.start[0].ok || !s.start[1].ok {
		t.Fatalf("the running process was not read: %+v", s.start)
	}
	// Field 22, the start time in ticks since boot: never 0 for a process
	// started after boot (field 21, next to it, always is).
	if self := readProcCPU(os.Getpid()); !self.ok || self.started <= 0 || s.start[0].started < self.started {
		t.Fatalf("start times: this process %+v, its child %+v", self, s.start[0])
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if u := s.since(1000); !u.ServiceUnmeasured || u.serviceMsPer1k() != "n/a" || u.ServiceCores != 0 ||
		!u.RedisUnmeasured || u.redisMsPer1k() != "n/a" {
		t.Fatalf("after the service and Redis exited: %+v, prints %s and %s ms/1k", u, u.serviceMsPer1k(), u.redisMsPer1k())
	}

	first := procCPU{cpu: 5 * time.Second, started: 100, ok: true}
	if _, ok := spentSince(first, procCPU{cpu: time.Second, started: 900, ok: true}); ok {
		t.Fatal("a reading of another process under the same pid was taken for the first one's")
	}
	if d, ok := spentSince(first, procCPU{cpu: 7 * time.Second, started: 100, ok: true}); !ok || d != 2*time.Second {
		t.Fatalf("spentSince = %v, %v; want 2s", d, ok)
	}
}

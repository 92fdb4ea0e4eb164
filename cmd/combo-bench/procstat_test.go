package main

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
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

// Valkey started under its own name is its server too: its CPU was not
// measured, with a note suggesting a container.
func TestValkeyServerIsARedisServerHere(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program")
	}
	named := t.TempDir() + "/valkey-server"
	if err := os.Symlink(sleep, named); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(named, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if !isRedisServer(cmd.Process.Pid) {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm")
		t.Fatalf("a process named %q is not taken for the server", strings.TrimSpace(string(comm)))
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
	for line := range strings.SplitSeq(out, "\n") {
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

// burnCPU spends about d of CPU, part of it in the kernel (reading
// /dev/zero has the kernel clear the buffer), until getrusage says so.
func burnCPU(t *testing.T, d time.Duration) {
	t.Helper()
	f, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	start := rusageCPU(t)
	for x := 0; rusageCPU(t)-start < d; {
		if _, err := f.Read(buf); err != nil {
			t.Fatal(err)
		}
		for i := range 200_000 {
			x += i * i
		}
		buf[0] = byte(x)
	}
}

// rusageCPU is this process's user and system time, as getrusage counts it.
func rusageCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A process's CPU is its user plus system time, /proc/<pid>/stat's fields
// 14 and 15 in ticks of 1/100 s, as getrusage counts it; a run's figures
// are that over the acknowledged reports (ms per 1000) and over the wall
// time (cores), each in its own process's figure.
func TestCPUIsUserPlusSystemPer1kReportsAndPerSecond(t *testing.T) {
	const tick = 10 * time.Millisecond
	wall0, cpu0 := time.Now(), rusageCPU(t)
	s := newCPUSampler(0, 0)
	burnCPU(t, 400*time.Millisecond)
	u := s.since(2000)
	cpu, wall := rusageCPU(t)-cpu0, time.Since(wall0)

	self := readProcCPU(os.Getpid())
	if now := rusageCPU(t); !self.ok || self.cpu < now-3*tick || self.cpu > now+3*tick {
		t.Errorf("/proc/self/stat CPU %v, getrusage %v: want them within a few ticks", self.cpu, now)
	}
	// 2000 reports: ms per 1000 is half the ms spent.
	if want := float64(cpu.Milliseconds()) / 2; u.BenchMsPer1k < want-3*10/2 || u.BenchMsPer1k > want+3*10/2 {
		t.Errorf("bench CPU %.1f ms per 1000 of 2000 reports, want %.1f (%v spent)", u.BenchMsPer1k, want, cpu)
	}
	if want := cpu.Seconds() / wall.Seconds(); u.BenchCores < want*0.8 || u.BenchCores > want*1.25+0.05 {
		t.Errorf("bench cores %.2f, want %.2f (%v of CPU in %v)", u.BenchCores, want, cpu, wall)
	}
	if !u.RedisUnmeasured || u.RedisMsPer1k != 0 || u.RedisCores != 0 {
		t.Errorf("Redis, not measured, has %.1f ms per 1000 and %.2f cores", u.RedisMsPer1k, u.RedisCores)
	}
}

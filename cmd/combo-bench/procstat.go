package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// On a 2-core machine the service, Redis and the bench share the CPU, so
// each run also reports how much CPU each of the three spent per 1000
// reports: the figure that says who the bottleneck is. The counters come
// from /proc/<pid>/stat (Linux); the Redis pid from INFO server.

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// procCPU is one reading of a process's CPU time (utime+stime) and its
// start time (in clock ticks since boot), which tells a process restarted
// under the same pid, or a pid reused, from the one first read.
type procCPU struct {
	cpu     time.Duration
	started int64
	ok      bool // false: no pid, or /proc/<pid>/stat unreadable (it exited)
}

// readProcCPU reads pid's /proc/<pid>/stat.
func readProcCPU(pid int) procCPU {
	if pid <= 0 {
		return procCPU{}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procCPU{}
	}
	// Fields after the ")" that closes the command name: state is field 3,
	// utime and stime are fields 14 and 15, starttime field 22.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procCPU{}
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return procCPU{}
	}
	u, errU := strconv.ParseInt(f[11], 10, 64)
	st, errS := strconv.ParseInt(f[12], 10, 64)
	started, errT := strconv.ParseInt(f[19], 10, 64)
	if errU != nil || errS != nil || errT != nil {
		return procCPU{}
	}
	return procCPU{cpu: time.Duration(u+st) * time.Second / clockTicks, started: started, ok: true}
}

// spentSince is the CPU the process read at start spent until end, and
// false when either reading failed or they are of different processes (it
// exited, or restarted, during the run: its CPU is then not measured,
// rather than taken for a negative or partial figure).
func spentSince(start, end procCPU) (time.Duration, bool) {
	if !start.ok || !end.ok || start.started != end.started {
		return 0, false
	}
	return end.cpu - start.cpu, true
}

// machineCPU is one reading of /proc/stat's first line: the CPU time of
// every CPU of the machine, in clock ticks. Steal is time the hypervisor
// gave this VM's vCPUs to someone else while they had work: a run that
// lost much to it measured the host's other tenants as well as this code,
// and /proc/<pid>/stat does not show it (a process waiting on a stolen
// vCPU is not charged), but every figure of the run is slower for it.
type machineCPU struct {
	steal, total int64
	ok           bool // false: /proc/stat unreadable or not as Linux writes it
}

func readMachineCPU() machineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseMachineCPU(line)
}

// parseMachineCPU reads "cpu  user nice system idle iowait irq softirq
// steal [guest guest_nice]". The total is the first eight: guest time is
// counted in user already (proc(5)).
func parseMachineCPU(line string) machineCPU {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}
	}
	var m machineCPU
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return machineCPU{}
		}
		m.total += n
		if i == 7 {
			m.steal = n
		}
	}
	m.ok = true
	return m
}

// stealShare is the share of the machine's CPU time between two readings
// that was stolen, and false when either reading failed or no time passed.
func stealShare(start, end machineCPU) (float64, bool) {
	if !start.ok || !end.ok || end.total <= start.total || end.steal < start.steal {
		return 0, false
	}
	return float64(end.steal-start.steal) / float64(end.total-start.total), true
}

// cpuUse is CPU spent per 1000 acked reports, in ms, by each process.
type cpuUse struct {
	ServiceMsPer1k float64 `json:"service_cpu_ms_per_1k,omitempty"`
	RedisMsPer1k   float64 `json:"redis_cpu_ms_per_1k"`
	BenchMsPer1k   float64 `json:"bench_cpu_ms_per_1k"`
	ServiceCores   float64 `json:"service_cores,omitempty"` // average cores busy during the run
	RedisCores     float64 `json:"redis_cores"`
	BenchCores     float64 `json:"bench_cores"`
	// RedisUnmeasured: Redis's pid here is unknown (see redisPID), or
	// Redis exited or restarted during the run, so its figures above are
	// 0 for no measurement, and print as n/a.
	RedisUnmeasured bool `json:"redis_cpu_unmeasured,omitempty"`
	// ServiceUnmeasured: no -service-pid (or -floor-pid) was given, or the
	// service exited or restarted during the run: the service's figures
	// are absent from the JSON and print as n/a.
	ServiceUnmeasured bool `json:"service_cpu_unmeasured,omitempty"`
	// MachineStealShare is the share of all the machine's CPU time during
	// the run that the hypervisor gave to others (steal, in /proc/stat),
	// 0 to 1; absent where /proc/stat cannot be read. A run through the
	// service counts the wait for its pushes too: its push lag is
	// measured then.
	MachineStealShare *float64 `json:"machine_steal_share,omitempty"`
}

// serviceMsPer1k, serviceCores, redisMsPer1k and redisCores print a
// figure, or n/a when that process was not measured.
func (u cpuUse) serviceMsPer1k() string { return orNA(u.ServiceUnmeasured, "%.1f", u.ServiceMsPer1k) }
func (u cpuUse) serviceCores() string   { return orNA(u.ServiceUnmeasured, "%.2f", u.ServiceCores) }
func (u cpuUse) redisMsPer1k() string   { return orNA(u.RedisUnmeasured, "%.1f", u.RedisMsPer1k) }
func (u cpuUse) redisCores() string     { return orNA(u.RedisUnmeasured, "%.2f", u.RedisCores) }

// stealPercent prints the steal share as a percentage, or n/a.
func (u cpuUse) stealPercent() string {
	if u.MachineStealShare == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", 100*(*u.MachineStealShare))
}

func orNA(unmeasured bool, format string, v float64) string {
	if unmeasured {
		return "n/a"
	}
	return fmt.Sprintf(format, v)
}

type cpuSampler struct {
	pids    [3]int // service, redis, bench
	start   [3]procCPU
	at      time.Time
	machine func() machineCPU // readMachineCPU; a test's readings
	mstart  machineCPU
}

// newCPUSampler samples the service (servicePID) and Redis (redisPid, from
// redisPID), each not measured when 0, and this process.
func newCPUSampler(servicePID, redisPid int) *cpuSampler {
	s := &cpuSampler{pids: [3]int{servicePID, redisPid, os.Getpid()}, machine: readMachineCPU}
	s.reset()
	return s
}

func (s *cpuSampler) reset() {
	for i, p := range s.pids {
		s.start[i] = readProcCPU(p)
	}
	s.mstart = s.machine()
	s.at = time.Now()
}

// since returns the use since the last reset, for acked reports.
func (s *cpuSampler) since(acked int64) cpuUse {
	var d [3]time.Duration
	var measured [3]bool
	for i, p := range s.pids {
		d[i], measured[i] = spentSince(s.start[i], readProcCPU(p))
	}
	wall := time.Since(s.at).Seconds()
	per1k := func(x time.Duration) float64 {
		if acked == 0 {
			return 0
		}
		return ms(x) * 1000 / float64(acked)
	}
	cores := func(x time.Duration) float64 { return x.Seconds() / wall }
	u := cpuUse{
		RedisMsPer1k: per1k(d[1]), BenchMsPer1k: per1k(d[2]),
		RedisCores: cores(d[1]), BenchCores: cores(d[2]),
		RedisUnmeasured:   !measured[1],
		ServiceUnmeasured: !measured[0],
	}
	if measured[0] {
		u.ServiceMsPer1k, u.ServiceCores = per1k(d[0]), cores(d[0])
	}
	u.MachineStealShare = s.stealSinceReset()
	return u
}

// stealSinceReset is the steal share since the last reset, nil when it
// cannot be told.
func (s *cpuSampler) stealSinceReset() *float64 {
	if share, ok := stealShare(s.mstart, s.machine()); ok {
		return &share
	}
	return nil
}

// redisPID is the pid of rdb's redis-server as this host numbers it: given
// when set (-redis-pid), else INFO's process_id, but only when that pid
// here is a redis-server. A Redis in a container, or on another host,
// reports a pid of its own namespace (often 1), and reading that pid's
// CPU here would silently measure some other process: Redis's CPU is then
// not reported (0), and a note says so.
func redisPID(ctx context.Context, rdb *redis.Client, given int) int {
	if given > 0 {
		return given
	}
	m := rdb.InfoMap(ctx, "server")
	if m.Err() != nil {
		return 0
	}
	reported := m.Item("Server", "process_id")
	pid, _ := strconv.Atoi(reported)
	if !isRedisServer(pid) {
		fmt.Fprintf(os.Stderr, "combo-bench: Redis reports process_id %s, which is no redis-server or valkey-server on this host (a container?): "+
			"Redis CPU is not measured; pass -redis-pid\n", reported)
		return 0
	}
	return pid
}

// isRedisServer tells whether pid is a redis-server process here, or a
// Valkey started under its own name (valkey-server).
func isRedisServer(pid int) bool {
	if pid <= 0 {
		return false
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && (strings.HasPrefix(string(comm), "redis-server") || strings.HasPrefix(string(comm), "valkey-server"))
}

func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	m := rdb.InfoMap(ctx, "memory")
	if err := m.Err(); err != nil {
		return 0, err
	}
	return strconv.ParseInt(m.Item("Memory", "used_memory"), 10, 64)
}

// scriptStats is INFO commandstats' evalsha line: calls and total µs.
func scriptStats(ctx context.Context, rdb *redis.Client) (calls, usec int64, err error) {
	m := rdb.InfoMap(ctx, "commandstats")
	if err := m.Err(); err != nil {
		return 0, 0, err
	}
	for f := range strings.SplitSeq(m.Item("Commandstats", "cmdstat_evalsha"), ",") {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "calls":
			calls, _ = strconv.ParseInt(v, 10, 64)
		case "usec":
			usec, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return calls, usec, nil
}

package main

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// /proc/stat's first line, as Linux writes it: the total is user through
// steal (guest is inside user), steal the eighth number.
func TestParseMachineCPU(t *testing.T) {
	for _, tc := range []struct {
		line         string
		steal, total int64
		ok           bool
	}{
		{"cpu  86363 6405 24009 282700 864 0 7496 15787 0 0", 15787, 86363 + 6405 + 24009 + 282700 + 864 + 0 + 7496 + 15787, true},
		{"cpu  10 0 10 70 0 0 0 10 500 500", 10, 100, true}, // guest not added again
		{"cpu  10 0 10 70 0 0 0 10", 10, 100, true},         // kernels before guest
		{"cpu  10 0 10 70 0 0 0", 0, 0, false},              // no steal column
		{"cpu0 10 0 10 70 0 0 0 10 0 0", 0, 0, false},       // one CPU's line, not the machine's
		{"cpu  10 0 x 70 0 0 0 10 0 0", 0, 0, false},
		{"cpu  10 0 -1 70 0 0 0 10 0 0", 0, 0, false},
		{"", 0, 0, false},
	} {
		m := parseMachineCPU(tc.line)
		if m.ok != tc.ok || m.steal != tc.steal || m.total != tc.total {
			t.Errorf("parseMachineCPU(%q) = %+v, want steal %d total %d ok %v", tc.line, m, tc.steal, tc.total, tc.ok)
		}
	}
}

// A run's steal share is the stolen part of all the machine's CPU time
// between its two readings, and absent (never 0) when it cannot be told.
func TestStealShareOfTheRun(t *testing.T) {
	readings := []machineCPU{{steal: 100, total: 1000, ok: true}, {steal: 150, total: 2000, ok: true}}
	s := newCPUSampler(0, 0)
	s.machine = func() machineCPU { m := readings[0]; readings = readings[1:]; return m }
	s.reset()
	u := s.since(1000)
	if u.MachineStealShare == nil || *u.MachineStealShare != 0.05 || u.stealPercent() != "5.0" {
		t.Fatalf("steal share %v (%s%%), want 0.05 (5.0%%)", u.MachineStealShare, u.stealPercent())
	}
	b, _ := json.Marshal(u)
	if !strings.Contains(string(b), `"machine_steal_share":0.05`) {
		t.Fatalf("JSON %s lacks machine_steal_share", b)
	}
	var out strings.Builder
	runs{{Mode: "single", CPU: u}}.print(&out)
	if !strings.Contains(out.String(), "machine cpu stolen %") || !strings.Contains(out.String(), "5.0") {
		t.Fatalf("the runs' table does not show the steal:\n%s", out.String())
	}

	for _, tc := range []struct {
		name       string
		start, end machineCPU
	}{
		{"start unread", machineCPU{}, machineCPU{steal: 1, total: 10, ok: true}},
		{"end unread", machineCPU{steal: 1, total: 10, ok: true}, machineCPU{}},
		{"no time passed", machineCPU{steal: 1, total: 10, ok: true}, machineCPU{steal: 1, total: 10, ok: true}},
		{"counters went back", machineCPU{steal: 5, total: 10, ok: true}, machineCPU{steal: 1, total: 20, ok: true}},
	} {
		readings = []machineCPU{tc.start, tc.end}
		s.reset()
		u := s.since(1000)
		if u.MachineStealShare != nil || u.stealPercent() != "n/a" {
			t.Errorf("%s: steal share %s%%, want absent", tc.name, u.stealPercent())
		}
		if b, _ := json.Marshal(u); strings.Contains(string(b), "machine_steal_share") {
			t.Errorf("%s: JSON %s carries a steal share", tc.name, b)
		}
	}
}

// On this Linux the real /proc/stat is read, and a run's share is a share.
func TestMachineCPUReadsProcStat(t *testing.T) {
	m := readMachineCPU()
	if !m.ok || m.total <= 0 || m.steal < 0 || m.steal > m.total {
		t.Fatalf("readMachineCPU() = %+v", m)
	}
	s := newCPUSampler(0, 0)
	burnCPU(t, 50*time.Millisecond) // so some clock ticks pass
	u := s.since(1000)
	if u.MachineStealShare == nil || *u.MachineStealShare < 0 || *u.MachineStealShare > 1 {
		t.Fatalf("steal share %v over a run here", u.MachineStealShare)
	}
}

// A run through the service counts the steal while its pushes are awaited
// too, where a rate run's push lag is measured (mutant: the share read as
// the load ends, a steal burst in the pushes' wait never named).
func TestStealShareCoversTheWaitForPushes(t *testing.T) {
	const window = 400 * time.Millisecond
	cfg := config{Concurrency: 1, Reports: 20, Keys: 4, Window: window, Settle: 20 * time.Millisecond}
	b := inProcessBench(t, cfg)
	var mu sync.Mutex
	var last time.Time
	n := int64(0)
	b.cpu.machine = func() machineCPU {
		mu.Lock()
		defer mu.Unlock()
		n++
		last = time.Now()
		return machineCPU{steal: n, total: 100 * n, ok: true}
	}
	start := time.Now()
	res, err := b.run("single", cfg)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if res.CPU.MachineStealShare == nil {
		t.Fatal("no steal share")
	}
	// The load of 20 in-process reports takes milliseconds; the pushes are
	// awaited until a window past its end.
	if after := last.Sub(start); after < window {
		t.Fatalf("the steal share's last reading came %v after the run began, want after the pushes' wait (at least %v)", after, window)
	}
}

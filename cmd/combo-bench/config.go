package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// config is every flag of combo-bench. W and grace must match the service's
// window.size and window.grace: the bench cannot read them from the service,
// and push lag is measured against W + grace.
type config struct {
	Addr  string
	Redis string
	Mode  string

	Concurrency int
	Duration    time.Duration
	Reports     int64 // N: stop after this many reports (0 = run for Duration)
	Batch       int
	Rate        float64
	Keys        int // distinct combo keys of a closed-loop run

	ReporterConcurrency int
	ReporterLinger      time.Duration

	Window time.Duration
	Grace  time.Duration
	Settle time.Duration // past W + grace, stop waiting for pushes after this long without one
	// LateHorizon: after the last run, how long to keep listening for
	// pushes of runs already checked (a window pushed again, as by a
	// claimer after worker.claim_idle); each run is checked again with them.
	LateHorizon time.Duration
	Shards      int // the service's redis.shards, to name its keys
	ServicePID  int // optional: report the service's CPU per report
	RedisPID    int // optional: Redis's pid here, when INFO's is of another namespace
	// ServiceMetrics: the service's metrics address; optional, to report
	// how its report pipelines were shared (pipelines.go).
	ServiceMetrics string
	// Floor: a running combo-floor (the service's RPC layer with handlers
	// that do no work); compare mode also drives it with single reports.
	Floor    string
	FloorPID int

	Memory      bool
	Windows     int
	WaitClean   time.Duration // memory mode: wait this long at most for earlier runs' keys to expire
	Curve       bool
	CurveLevels []int
	ProbeN      int
	ProbeHook   string // shell command run right before and right after each curve probe

	JSON       bool
	Label      string
	CPUProfile string
}

// maxConcurrency, maxRate and maxItems bound -c, -rate and the counts of
// windows and keys: each caller is a goroutine, each second of -rate a
// queued report, each window or key held in memory, so a mistyped value
// ran the bench out of memory instead of failing.
const (
	maxConcurrency = 10000
	maxRate        = 1000000
	maxItems       = 10_000_000
)

var modes = []string{"single", "batch", "reporter", "rate", "naive", "floor", "compare"}

func parseFlags(args []string) (config, error) {
	return parseFlagsOn(flag.NewFlagSet("combo-bench", flag.ContinueOnError), args)
}

// parseFlagsOn defines the flags on fs and parses args.
func parseFlagsOn(fs *flag.FlagSet, args []string) (config, error) {
	var c config
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8888", "combo-service Kitex RPC address (loopback only)")
	fs.StringVar(&c.Redis, "redis", "127.0.0.1:6379", "the Redis the service uses (pushes are read from it; naive mode writes to it)")
	fs.StringVar(&c.Mode, "mode", "single", "load: "+strings.Join(modes, "|"))
	fs.IntVar(&c.Concurrency, "c", 8, "concurrent callers")
	fs.DurationVar(&c.Duration, "d", 10*time.Second, "load duration")
	fs.Int64Var(&c.Reports, "n", 0, "stop after N reports (0: run for -d)")
	fs.IntVar(&c.Batch, "b", 50, "batch size (batch and reporter modes; memory/curve fill)")
	fs.Float64Var(&c.Rate, "rate", 2000, "rate mode: new windows per second")
	fs.IntVar(&c.Keys, "keys", 1024, "distinct combo keys of single/batch/reporter/naive runs")
	fs.IntVar(&c.ReporterConcurrency, "reporter-conc", 4, "reporter mode: batches in flight (ReporterOptions.Concurrency)")
	fs.DurationVar(&c.ReporterLinger, "reporter-linger", 20*time.Millisecond, "reporter mode: ReporterOptions.Linger")
	fs.DurationVar(&c.Window, "window", 3*time.Second, "the service's window.size (W)")
	fs.DurationVar(&c.Grace, "grace", 200*time.Millisecond, "the service's window.grace")
	fs.DurationVar(&c.Settle, "settle", 2*time.Second, "past W+grace after the last report, stop waiting for pushes after this long without one")
	var lateHorizon derivedDuration
	fs.Var(&lateHorizon, "late-horizon", "after the last run, listen this long for pushes of runs already checked, and check those runs again with them: a window pushed again makes its run not conserved (default: -window + -grace + 3s, past the service's default worker.claim_idle of W + grace + 2s; 0: do not wait)")
	fs.IntVar(&c.Shards, "shards", 1, "the service's redis.shards (memory mode names its keys)")
	fs.IntVar(&c.ServicePID, "service-pid", 0, "pid of the combo-service process, to report its CPU per 1000 reports")
	fs.IntVar(&c.RedisPID, "redis-pid", 0, "pid of the redis-server as this host numbers it (default: INFO's process_id, used only when that is a redis-server here; a Redis in a container reports its own namespace's)")
	fs.StringVar(&c.ServiceMetrics, "service-metrics", "", "the service's metrics address (host:port), to report how its Redis report pipelines were shared during each load")
	fs.StringVar(&c.Floor, "floor", "", "compare mode: a running combo-floor's RPC address, to also measure single reports against the RPC layer alone (what any implementation could reach)")
	fs.IntVar(&c.FloorPID, "floor-pid", 0, "pid of that combo-floor, to report its CPU per 1000 reports")
	fs.BoolVar(&c.Memory, "memory", false, "open -windows windows, then print Redis bytes per open window (run the service with a long W)")
	fs.IntVar(&c.Windows, "windows", 100000, "memory mode: windows to open")
	fs.DurationVar(&c.WaitClean, "wait-clean", 0, "memory mode: first wait, up to this long, until no dedupe set or window key of earlier runs is left (their expiry during the fill would be subtracted from the figure); 0: do not wait")
	fs.BoolVar(&c.Curve, "curve", false, "measure cost per report as open windows grow (run the service with a long W)")
	levels := fs.String("levels", "1000,10000,50000,100000", "curve mode: open-window levels")
	fs.IntVar(&c.ProbeN, "probe", 3000, "curve mode: single reports per level")
	fs.StringVar(&c.ProbeHook, "probe-hook", "", "curve mode: shell command run right before and right after each probe, e.g. 'callgrind_control -d PID' to count Redis's instructions per probe")
	fs.BoolVar(&c.JSON, "json", false, "print one JSON document instead of the table")
	fs.StringVar(&c.Label, "label", "", "free text copied into the output (e.g. run number)")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write the bench process's own CPU profile to this file (to see what the client side costs)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.LateHorizon = lateHorizon.d
	if !lateHorizon.set {
		c.LateHorizon = c.lagBase() + 3*time.Second
	}
	var err error
	if c.CurveLevels, err = parseInts(*levels); err != nil {
		return c, fmt.Errorf("-levels: %w", err)
	}
	return c, c.validate()
}

func (c *config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !c.Memory && !c.Curve && !contains(modes, c.Mode) {
		bad("-mode must be one of %s, got %q", strings.Join(modes, "|"), c.Mode)
	}
	if c.Mode == "floor" && c.Floor == "" {
		bad("-mode floor needs -floor (a running combo-floor's address)")
	}
	if c.Concurrency < 1 || c.Concurrency > maxConcurrency {
		bad("-c must be 1..%d", maxConcurrency)
	}
	if c.Batch < 1 || c.Batch > 1000 {
		bad("-b must be 1..1000 (ReportContributions limit)")
	}
	// NaN passes every comparison but == : refused by the range check.
	if !(c.Rate > 0 && c.Rate <= maxRate) {
		bad("-rate must be > 0 and at most %d, got %v", maxRate, c.Rate)
	}
	switch {
	case c.Duration < 0:
		bad("-d must not be negative")
	case c.Reports < 0:
		bad("-n must not be negative")
	case c.Duration == 0 && c.Reports == 0:
		bad("one of -d or -n must be > 0")
	case c.Mode == "rate" && !c.Memory && !c.Curve && c.Reports == 0 && c.Rate*c.Duration.Seconds() < 1:
		bad("-mode rate: -rate × -d (%v/s × %s) comes to no report", c.Rate, c.Duration)
	}
	for _, d := range []struct {
		flag string
		d    time.Duration
	}{{"-grace", c.Grace}, {"-settle", c.Settle}, {"-reporter-linger", c.ReporterLinger}, {"-wait-clean", c.WaitClean}} {
		if d.d < 0 {
			bad("%s must not be negative", d.flag)
		}
	}
	if c.Window <= 0 {
		bad("-window must be > 0 (the service's window.size)")
	}
	for _, n := range []struct {
		flag    string
		n, most int
	}{
		{"-windows", c.Windows, maxItems}, {"-probe", c.ProbeN, maxItems},
		{"-shards", c.Shards, 1024}, // the service's bound on redis.shards
		{"-reporter-conc", c.ReporterConcurrency, maxConcurrency},
	} {
		if n.n < 1 || n.n > n.most {
			bad("%s must be 1..%d", n.flag, n.most)
		}
	}
	if c.Keys < 0 || c.Keys > maxItems {
		bad("-keys must be 0..%d", maxItems)
	}
	targets := []struct{ flag, addr string }{{"-addr", c.Addr}, {"-redis", c.Redis}}
	if c.Floor != "" {
		targets = append(targets, struct{ flag, addr string }{"-floor", c.Floor})
	}
	for _, a := range targets {
		if err := loopbackOnly(a.addr); err != nil {
			bad("%s: %v", a.flag, err)
		}
	}
	// Every caller needs keys of its own: ids then rise within each combo
	// key, which makes a window's first report the one whose id it carries.
	c.Keys = max(c.Keys, c.Concurrency)
	return errors.Join(errs...)
}

// lagBase is how long after a window's first report its push is due.
func (c *config) lagBase() time.Duration { return c.Window + c.Grace }

// loopbackOnly refuses any target but this machine: the bench is a load
// generator and must never be pointed at a shared host by mistake.
func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address; the bench only drives a local service", host)
	}
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad level %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	return slices.Contains(list, s)
}

// derivedDuration is a duration flag whose default is derived from other
// flags: unset, -h prints no default of its own (the usage text says how
// it is derived) instead of a marker value a user might copy.
type derivedDuration struct {
	d   time.Duration
	set bool
}

func (f *derivedDuration) String() string {
	if f == nil || !f.set {
		return ""
	}
	return f.d.String()
}

func (f *derivedDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if d < 0 {
		return fmt.Errorf("%s is negative", s)
	}
	f.d, f.set = d, true
	return nil
}

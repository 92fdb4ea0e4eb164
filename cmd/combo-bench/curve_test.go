package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// -probe-hook runs its command to completion (a callgrind dump must be
// written before the probe starts) and a failing hook stops the curve.
func TestRunHook(t *testing.T) {
	if err := runHook(""); err != nil {
		t.Fatalf("no hook: %v", err)
	}
	mark := filepath.Join(t.TempDir(), "mark")
	if err := runHook("sleep 0.1; echo dumped >> " + mark); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(mark); err != nil || string(b) != "dumped\n" {
		t.Fatalf("hook did not finish before runHook returned: %q, %v", b, err)
	}
	err := runHook("echo no such pid >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "-probe-hook") || !strings.Contains(err.Error(), "no such pid") {
		t.Fatalf("failing hook: got %v, want an error naming -probe-hook with its output", err)
	}
}

// runCurve runs the curve at levels with probes of probe reports, in
// process against a real redis-server, at 8 callers.
func runCurve(t *testing.T, levels []int, probe int) curveResult {
	t.Helper()
	b := inProcessBench(t, config{Concurrency: 8, Batch: 100, CurveLevels: levels, ProbeN: probe,
		Shards: 1, Settle: 50 * time.Millisecond})
	out, err := b.curve()
	if err != nil {
		t.Fatal(err)
	}
	return out.(curveResult)
}

// Each curve point says how many windows were open when its probe started
// and ended (the probe's own windows stay open), and its script time is
// per report, not per script call: the service counts several reports in
// one call.
func TestCurvePointsSayWhatWasMeasured(t *testing.T) {
	res := runCurve(t, []int{200, 1000}, 300)
	if len(res.Notes) != 0 {
		t.Fatalf("notes %q, want none: the probes fit between the levels", res.Notes)
	}
	for _, p := range res.Points {
		if p.OpenWindows != p.Level || p.OpenAfter != p.Level+300 {
			t.Errorf("level %d: probe measured from %d to %d open windows, want %d to %d",
				p.Level, p.OpenWindows, p.OpenAfter, p.Level, p.Level+300)
		}
		if p.ReportsPerCall < 1 || p.ScriptUsec <= 0 {
			t.Errorf("level %d: %.2f reports per script call, %.1f µs per report: want >= 1 and > 0", p.Level, p.ReportsPerCall, p.ScriptUsec)
		}
	}
}

// A probe larger than the gap to the next level leaves that level probed
// above its label: the result says so.
func TestCurveNotesAnOvershotLevel(t *testing.T) {
	res := runCurve(t, []int{100, 1000}, 2000)
	if p := res.Points[1]; p.OpenWindows != 2100 {
		t.Errorf("second probe started at %d open windows, want 2100", p.OpenWindows)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "level 1000 was probed at 2100") {
		t.Errorf("notes %q, want one saying level 1000 was probed at 2100 windows", res.Notes)
	}
}

// slowBatches takes delay over each batch: a fill slower than any probe.
type slowBatches struct {
	repoClient
	delay time.Duration
}

func (c slowBatches) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest, opts ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	time.Sleep(c.delay)
	return c.repoClient.ReportContributions(ctx, req, opts...)
}

// A point's script time is Redis's EVALSHA time over the probe's reports,
// not over its script calls (several reports share one), and its
// reports per call are the probe's over those calls.
func TestCurveScriptTimeIsPerProbeReport(t *testing.T) {
	const probe = 300
	// Level 0: no fill, so Redis's EVALSHAs during the curve are the probe's.
	b := inProcessBench(t, config{Concurrency: 8, Batch: 100, CurveLevels: []int{0}, ProbeN: probe, Shards: 1, Settle: 50 * time.Millisecond})
	ctx := context.Background()
	calls0, usec0, err := scriptStats(ctx, b.rdb)
	if err != nil {
		t.Fatal(err)
	}
	out, err := b.curve()
	if err != nil {
		t.Fatal(err)
	}
	calls1, usec1, err := scriptStats(ctx, b.rdb)
	if err != nil {
		t.Fatal(err)
	}
	p := out.(curveResult).Points[0]
	if p.Errors != 0 || calls1 == calls0 {
		t.Fatalf("probe errors %d, script calls %d: the test proves nothing", p.Errors, calls1-calls0)
	}
	if want := float64(usec1-usec0) / probe; p.ScriptUsec != want {
		t.Errorf("script µs per report %.2f, want %.2f (%d µs over %d reports, in %d calls)", p.ScriptUsec, want, usec1-usec0, probe, calls1-calls0)
	}
	if want := float64(probe) / float64(calls1-calls0); p.ReportsPerCall != want {
		t.Errorf("reports per script call %.2f, want %.2f", p.ReportsPerCall, want)
	}
}

// A point's latency is its probe's alone, not the fill's batches before it
// (here 300 ms each, far slower than a probe's single reports), and the
// pushes checked afterwards are of every window the curve opened, fills
// and probes.
func TestCurvePointIsItsProbesOwn(t *testing.T) {
	const delay = 300 * time.Millisecond
	b := inProcessBench(t, config{Concurrency: 8, Batch: 100, CurveLevels: []int{500}, ProbeN: 300, Shards: 1, Settle: 50 * time.Millisecond})
	b.cli = slowBatches{repoClient: b.cli.(repoClient), delay: delay}
	out, err := b.curve()
	if err != nil {
		t.Fatal(err)
	}
	res := out.(curveResult)
	if p := res.Points[0]; p.P99 >= float64(delay.Milliseconds()) {
		t.Errorf("probe p99 %.1f ms: the fill's %v batches counted in it", p.P99, delay)
	}
	if pc := res.Pushes; pc == nil || pc.WindowsExpected != 800 {
		t.Errorf("pushes checked %+v, want of the 800 windows the fill and the probe opened", pc)
	}
}

package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"text/tabwriter"

	"github.com/combo-service/combo-service/repo"
)

// curvePoint is the cost of a report at one level of open windows.
type curvePoint struct {
	Level int64 `json:"level"` // open windows this run filled up to before the probe
	// OpenWindows and OpenAfter are the stream's length (every run's open
	// windows) when the probe started and ended: the probe's own windows
	// stay open, so a probe measures the range between them.
	OpenWindows int64   `json:"open_windows"`
	OpenAfter   int64   `json:"open_windows_after"`
	Throughput  float64 `json:"reports_per_s"`
	P50         float64 `json:"p50_ms"`
	P99         float64 `json:"p99_ms"`
	// ScriptUsec is Redis's own time in EVALSHA (INFO commandstats) per
	// probe report: the cost that would grow if a script did work
	// proportional to the open windows. The service counts several
	// reports in one script call (ReportsPerCall), so it is not a call's.
	ScriptUsec     float64 `json:"script_usec_per_report"`
	ReportsPerCall float64 `json:"reports_per_script_call"`
	CPU            cpuUse  `json:"cpu"`
	Errors         int64   `json:"errors"`
}

type curveResult struct {
	Probe  int          `json:"probe_reports"`
	Points []curvePoint `json:"points"`
	Pushes *pushCheck   `json:"pushes"`
	Notes  []string     `json:"notes,omitempty"`
}

// curve fills open windows up to each level (batches of -b, fresh keys),
// then probes with -probe single reports, each opening one more window (the
// costliest report: it creates a hash and a stream entry), at -c callers.
// The service must keep every window open throughout: run it with a long
// window (COMBO_WINDOW_SIZE=50s) and pass the same -window.
func (b *bench) curve() (printable, error) {
	ctx := context.Background()
	cfg := b.cfg
	keys := repo.NewKeys(cfg.Shards)
	wl := newWorkload()
	b.col.track(wl.activity)
	all := newRecorder()
	var kc keyCounter
	out := curveResult{Probe: cfg.ProbeN}
	var last load
	for _, level := range cfg.CurveLevels {
		if opened := kc.next.Load(); opened > int64(level) {
			out.Notes = append(out.Notes, fmt.Sprintf("level %d was probed at %d windows this run opened: "+
				"earlier probes' windows are still open; use a -probe well below the gaps between -levels", level, opened))
		}
		if fill := int64(level) - kc.next.Load(); fill > 0 {
			l := runFresh(cfg.Concurrency, b.cli, wl, &kc, fill, cfg.Batch)
			all.merge(l.rec)
		}
		open, _, err := streamState(ctx, b.rdb, keys)
		if err != nil {
			return nil, err
		}
		calls0, usec0, err := scriptStats(ctx, b.rdb)
		if err != nil {
			return nil, err
		}
		if err := runHook(cfg.ProbeHook); err != nil {
			return nil, err
		}
		b.cpu.reset()
		l := runFresh(cfg.Concurrency, b.cli, wl, &kc, int64(cfg.ProbeN), 1)
		cpu := b.cpu.since(l.rec.acked)
		if err := runHook(cfg.ProbeHook); err != nil {
			return nil, err
		}
		calls1, usec1, err := scriptStats(ctx, b.rdb)
		if err != nil {
			return nil, err
		}
		openAfter, _, err := streamState(ctx, b.rdb, keys)
		if err != nil {
			return nil, err
		}
		all.merge(l.rec)
		last = l
		lat := summarize(l.rec.latencies)
		p := curvePoint{
			Level: int64(level), OpenWindows: open, OpenAfter: openAfter, P50: lat.P50, P99: lat.P99,
			Throughput: float64(l.rec.acked) / l.elapsed.Seconds(), CPU: cpu, Errors: l.rec.errors,
		}
		// The worker's flush scripts also count here; with a long window
		// none runs during the probe.
		if dc := calls1 - calls0; dc > 0 && l.rec.acked > 0 {
			p.ScriptUsec = float64(usec1-usec0) / float64(l.rec.acked)
			p.ReportsPerCall = float64(l.rec.acked) / float64(dc)
		}
		out.Points = append(out.Points, p)
	}
	last.rec = all
	out.Pushes = awaitPushes(cfg, b.col, wl, last)
	return out, nil
}

func (c curveResult) checks() []*pushCheck {
	if c.Pushes == nil {
		return nil
	}
	return []*pushCheck{c.Pushes}
}

func (c curveResult) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "level\topen windows\treports/s\tp50 ms\tp99 ms\tredis µs/report (script)\treports/script call\tredis cpu ms/1k\tsvc cpu ms/1k\terrors\t\n")
	for _, p := range c.Points {
		fmt.Fprintf(tw, "%d\t%d-%d\t%.0f\t%.2f\t%.2f\t%.1f\t%.1f\t%s\t%s\t%d\t\n",
			p.Level, p.OpenWindows, p.OpenAfter, p.Throughput, p.P50, p.P99, p.ScriptUsec, p.ReportsPerCall, p.CPU.redisMsPer1k(), p.CPU.serviceMsPer1k(), p.Errors)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "probe: %d single reports per level, each opening a window\n", c.Probe)
	if p := c.Pushes; p != nil {
		fmt.Fprintf(w, "afterwards: %d of %d windows pushed, lag p99 %.1f ms max %.1f ms, conserved %v\n",
			p.WindowsPushed, p.WindowsExpected, p.Lag.P99, p.Lag.Max, p.Conserved)
	}
	for _, n := range c.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

// runHook runs the -probe-hook command, if any, and waits for it: a
// callgrind dump taken there holds exactly one probe's (or one fill's)
// instructions.
func runHook(cmd string) error {
	if cmd == "" {
		return nil
	}
	out, err := exec.Command("sh", "-c", cmd).CombinedOutput()
	if err != nil {
		return fmt.Errorf("-probe-hook %q: %w: %s", cmd, err, out)
	}
	return nil
}

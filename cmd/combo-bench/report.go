package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// printable is anything a procedure returns: a human table by print, or
// JSON (-json) for benchplot and scripts.
type printable interface {
	print(w io.Writer)
	// checks are the output's push checks, for late pushes to amend.
	checks() []*pushCheck
}

func (rs runs) checks() []*pushCheck {
	var out []*pushCheck
	for _, r := range rs {
		if r.Pushes != nil {
			out = append(out, r.Pushes)
		}
	}
	return out
}

func (c comparison) checks() []*pushCheck { return c.Runs.checks() }

// amendLate checks each run of out again with the pushes col received for
// it after its check: a window pushed again is then pushed twice (not
// conserved), while a window's only push that came late (one opened by a
// report whose RPC failed, which the check does not wait for) is judged
// as it would have been in time.
func amendLate(out printable, col *collector) {
	for _, pc := range out.checks() {
		late := col.lateFor(pc.activity)
		if len(late) == 0 || pc.rec == nil {
			continue
		}
		*pc = runCheck(pc.activity, pc.rec, pc.taken, late, pc.window, pc.grace)
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// runs prints as one column per run, one row per figure.
type runs []result

// comparison is the compare mode's runs and their throughput ratios.
type comparison struct {
	Runs   runs               `json:"runs"`
	Ratios map[string]float64 `json:"ratios"`
}

func (c comparison) print(w io.Writer) {
	c.Runs.print(w)
	names := make([]string, 0, len(c.Ratios))
	for k := range c.Ratios {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "\nthroughput ratios (x_vs_y: x's reports/s over y's; naive's are purchases):")
	for _, k := range names {
		fmt.Fprintf(w, "  %-18s %6.2fx\n", k, c.Ratios[k])
	}
}

func (rs runs) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, cell func(r result) string) {
		cells := make([]string, len(rs))
		for i, r := range rs {
			cells[i] = cell(r)
		}
		fmt.Fprintf(tw, "%s\t%s\t\n", name, strings.Join(cells, "\t"))
	}
	pushRow := func(name string, cell func(p *pushCheck) string) {
		row(name, func(r result) string {
			if r.Pushes == nil {
				return "-"
			}
			return cell(r.Pushes)
		})
	}
	f1 := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	f2 := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	d := func(v int64) string { return fmt.Sprint(v) }

	row("mode", func(r result) string { return r.Mode })
	row("concurrency", func(r result) string { return fmt.Sprint(r.Concurrency) })
	row("batch", func(r result) string { return fmt.Sprint(max(r.Batch, 1)) })
	row("offered windows/s", func(r result) string {
		if r.OfferedRate == 0 {
			return "-"
		}
		return fmt.Sprint(r.OfferedRate)
	})
	row("seconds", func(r result) string { return f2(r.Seconds) })
	row("reports sent", func(r result) string { return d(r.Sent) })
	row("errors", func(r result) string { return d(r.Errors) })
	row("duplicate/degraded", func(r result) string { return fmt.Sprintf("%d/%d", r.Duplicates, r.Degraded) })
	row("reports/s", func(r result) string { return fmt.Sprintf("%.0f", r.Throughput) })
	row("rpc p50 ms", func(r result) string { return f2(r.Latency.P50) })
	row("rpc p99 ms", func(r result) string { return f2(r.Latency.P99) })
	row("rpc max ms", func(r result) string { return f2(r.Latency.Max) })
	row("send delay p99 ms", func(r result) string {
		if r.SendDelay == nil {
			return "-"
		}
		return f2(r.SendDelay.P99)
	})
	pushRow("windows expected", func(p *pushCheck) string { return d(p.WindowsExpected) })
	pushRow("windows pushed", func(p *pushCheck) string { return fmt.Sprint(p.WindowsPushed) })
	pushRow("missing/twice/unknown/early", func(p *pushCheck) string {
		return fmt.Sprintf("%d/%d/%d/%d", p.WindowsMissing, p.PushedTwice, p.UnknownPushes, p.EarlyPushes)
	})
	pushRow("windows miscounted", func(p *pushCheck) string { return fmt.Sprint(p.WindowsMiscounted) })
	pushRow("new reports answered duplicate", func(p *pushCheck) string { return fmt.Sprint(p.UnexpectedDuplicates) })
	// The lag figures are taken over the pushed windows whose opening report
	// was answered (a window opened by a failed RPC has no known start): a
	// count short of "windows pushed" says they describe part of the run.
	pushRow("push lag over windows", func(p *pushCheck) string { return d(int64(p.Lag.N)) })
	pushRow("push lag p50 ms", func(p *pushCheck) string { return f1(p.Lag.P50) })
	pushRow("push lag p99 ms", func(p *pushCheck) string { return f1(p.Lag.P99) })
	pushRow("push lag max ms", func(p *pushCheck) string { return f1(p.Lag.Max) })
	pushRow("qty reported/pushed", func(p *pushCheck) string { return fmt.Sprintf("%d/%d", p.QtyReported, p.QtyPushed) })
	pushRow("keys mismatched", func(p *pushCheck) string { return fmt.Sprintf("%d of %d", p.KeysMismatched, p.KeysChecked) })
	pushRow("conserved", func(p *pushCheck) string { return fmt.Sprint(p.Conserved) })
	pipeRow := func(name string, f func(p *pipelineUse) string) {
		row(name, func(r result) string {
			if r.Pipelines == nil {
				return "-"
			}
			return f(r.Pipelines)
		})
	}
	if slices.ContainsFunc(rs, func(r result) bool { return r.Pipelines != nil }) {
		pipeRow("report pipelines", func(p *pipelineUse) string { return fmt.Sprint(p.Pipelines) })
		pipeRow("reports/pipeline", func(p *pipelineUse) string { return f1(p.ReportsPerPipeline) })
		pipeRow("1-report pipelines %", func(p *pipelineUse) string { return f1(100 * p.OneReportShare) })
		pipeRow("pipeline rtt ms", func(p *pipelineUse) string { return f2(p.RoundTripMeanMs) })
		pipeRow("pipelines in flight", func(p *pipelineUse) string { return f2(p.InFlight) })
	}
	row("cpu ms/1k svc", func(r result) string { return r.CPU.serviceMsPer1k() })
	row("cpu ms/1k redis", func(r result) string { return r.CPU.redisMsPer1k() })
	row("cpu ms/1k bench", func(r result) string { return f1(r.CPU.BenchMsPer1k) })
	row("cores svc/redis/bench", func(r result) string {
		return fmt.Sprintf("%s/%s/%.2f", r.CPU.serviceCores(), r.CPU.redisCores(), r.CPU.BenchCores)
	})
	row("machine cpu stolen %", func(r result) string { return r.CPU.stealPercent() })
	_ = tw.Flush()
	for _, r := range rs {
		if r.FirstError != "" {
			fmt.Fprintf(w, "%s: first error: %s\n", r.Mode, r.FirstError)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(w, "%s: %s\n", r.Mode, n)
		}
	}
}

// Command benchplot draws push lag (p50, p99, max) and throughput against
// offered load from the -json outputs of a combo-bench rate sweep:
//
//	mkdir -p sweep
//	for r in 500 1000 2000 4000; do
//	  combo-bench -mode rate -rate $r -d 10s -json > sweep/rate-$r-run1.json
//	done
//	benchplot -o docs/bench/push-lag.png sweep/*.json
//
// Repeated runs at one offered rate are reduced to their median, the same
// way BENCHMARKS.md reports figures.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() { os.Exit(command(os.Args[1:], os.Stdout, os.Stderr)) }

// command is benchplot with its arguments and outputs, returning its exit
// status: 2 for a usage error, 1 for an input or output that failed (so
// bench.sh, under set -e, stops there), 0 once the PNG is written.
func command(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchplot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "push-lag.png", "PNG to write")
	title := fs.String("title", "combo-service: push lag and throughput vs offered new windows/s", "plot title")
	p99Target := fs.Float64("p99-target", 100, "push lag p99 target, ms (drawn as a line; 0 = none)")
	maxTarget := fs.Float64("max-target", 250, "push lag max target, ms (drawn as a line; 0 = none)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: benchplot [-o out.png] combo-bench-rate-run.json...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	runs, err := readRuns(fs.Args())
	if err != nil {
		fmt.Fprintln(stderr, "benchplot:", err)
		return 1
	}
	pts := medians(runs)
	if len(pts) == 0 {
		fmt.Fprintln(stderr, "benchplot: no rate-mode runs with pushes in the input")
		return 1
	}
	if err := render(*out, *title, pts, *p99Target, *maxTarget); err != nil {
		fmt.Fprintln(stderr, "benchplot:", err)
		return 1
	}
	for _, p := range pts {
		fmt.Fprintf(stdout, "offered %6.0f/s  runs %d  achieved %7.0f/s  lag p50 %6.1f  p99 %6.1f  max %6.1f ms  missing %d\n",
			p.Offered, p.Runs, p.Throughput, p.LagP50, p.LagP99, p.LagMax, p.Missing)
	}
	fmt.Fprintln(stdout, "wrote", *out)
	return 0
}

// Command benchplot draws push lag (p50, p99, max) and throughput against
// offered load from the -json outputs of a combo-bench rate sweep:
//
//	for r in 500 1000 2000 4000; do
//	  combo-bench -mode rate -rate $r -d 10s -json > sweep/rate-$r-run1.json
//	done
//	benchplot -o docs/bench/push-lag.png sweep/*.json
//
// Repeated runs at one offered rate are reduced to their median, the same
// way BENCHMARKS.md reports figures.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	out := flag.String("o", "push-lag.png", "PNG to write")
	title := flag.String("title", "combo-service: push lag and throughput vs offered new windows/s", "plot title")
	p99Target := flag.Float64("p99-target", 100, "push lag p99 target, ms (drawn as a line; 0 = none)")
	maxTarget := flag.Float64("max-target", 250, "push lag max target, ms (drawn as a line; 0 = none)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: benchplot [-o out.png] combo-bench-rate-run.json...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	runs, err := readRuns(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
	pts := medians(runs)
	if len(pts) == 0 {
		fmt.Fprintln(os.Stderr, "benchplot: no rate-mode runs with pushes in the input")
		os.Exit(1)
	}
	if err := render(*out, *title, pts, *p99Target, *maxTarget); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
	for _, p := range pts {
		fmt.Printf("offered %6.0f/s  runs %d  achieved %7.0f/s  lag p50 %6.1f  p99 %6.1f  max %6.1f ms  missing %d\n",
			p.Offered, p.Runs, p.Throughput, p.LagP50, p.LagP99, p.LagMax, p.Missing)
	}
	fmt.Println("wrote", *out)
}

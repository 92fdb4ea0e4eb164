package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The plot takes each figure from its own combo-bench JSON field, as the
// median over the runs at one offered rate, and the largest missing count
// of them (not their sum). The RPC latency and send delay fields, which look alike, are
// set to decoys: a plot of one for another would show them.
func TestMediansTakeEachFigureFromItsOwnField(t *testing.T) {
	run := func(p50, p99, max, throughput float64, missing int) string {
		return fmt.Sprintf(`[{"mode":"rate","offered_windows_per_s":2000,"reports_per_s":%g,`+
			`"rpc_latency":{"p50_ms":900,"p99_ms":901,"max_ms":902},"send_delay":{"p50_ms":800,"p99_ms":801,"max_ms":802},`+
			`"pushes":{"windows_missing":%d,"push_lag":{"p50_ms":%g,"p99_ms":%g,"max_ms":%g}}}]`, throughput, missing, p50, p99, max)
	}
	dir := t.TempDir()
	var files []string
	for i, doc := range []string{run(1, 5, 20, 1990, 1), run(2, 6, 30, 1995, 3), run(3, 7, 40, 2000, 0)} {
		path := filepath.Join(dir, fmt.Sprintf("rate-2000-%d.json", i))
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
	}
	runs, err := readRuns(files)
	if err != nil {
		t.Fatal(err)
	}
	pts := medians(runs)
	want := point{Offered: 2000, Runs: 3, Throughput: 1995, LagP50: 2, LagP99: 6, LagMax: 30, Missing: 3}
	if len(pts) != 1 || pts[0] != want {
		t.Fatalf("points %+v, want [%+v]", pts, want)
	}
}

// An even count's median is the mean of the middle two; none is 0.
func TestMedian(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{4, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.v); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.v, got, c.want)
		}
	}
}

// A file may hold several documents, each a list of runs or a compare
// object holding its runs; the points come out by offered rate, rising
// (the rates are read in an order no rotation of which is sorted).
func TestReadRunsTakesEveryDocumentAndSortsByRate(t *testing.T) {
	rate := func(offered, throughput float64) string {
		return fmt.Sprintf(`{"mode":"rate","offered_windows_per_s":%g,"reports_per_s":%g,"pushes":{"windows_missing":0,"push_lag":{"p50_ms":1,"p99_ms":2,"max_ms":3}}}`, offered, throughput)
	}
	doc := "[" + rate(4000, 3990) + "," + rate(1000, 1000) + "]\n" + `{"runs":[` + rate(500, 500) + `],"ratios":{}}` + "\n[" + rate(2000, 1999) + "]\n"
	path := filepath.Join(t.TempDir(), "runs.json")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, err := readRuns([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	pts := medians(runs)
	var got []float64
	for _, p := range pts {
		got = append(got, p.Offered, p.Throughput)
	}
	if want := []float64{500, 500, 1000, 1000, 2000, 1999, 4000, 3990}; !slices.Equal(got, want) {
		t.Fatalf("offered, throughput of the points: %v, want %v", got, want)
	}
}

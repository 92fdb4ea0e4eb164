package main

import (
	"regexp"
	"strings"
	"testing"
)

// Each row of the runs' table prints its own figure: the fields are set
// to values that differ, so a row printing a neighbour's (p50 for p99,
// max for p99, twice for missing) shows.
func TestTablePrintsEachFigureInItsRow(t *testing.T) {
	sd := durStats{P50: 0.5, P99: 4.44, Max: 9}
	r := result{Mode: "rate", Concurrency: 64, OfferedRate: 2000, Seconds: 10.25, Sent: 5000, Errors: 7, Duplicates: 3, Degraded: 4,
		Throughput: 1234, Latency: durStats{P50: 1.11, P99: 2.22, Max: 3.33}, SendDelay: &sd,
		Pushes: &pushCheck{WindowsExpected: 100, WindowsPushed: 98, WindowsMissing: 2, PushedTwice: 5, UnknownPushes: 6, EarlyPushes: 8,
			WindowsMiscounted: 9, UnexpectedDuplicates: 11, Lag: durStats{N: 97, P50: 12.3, P99: 45.6, Max: 78.9},
			QtyReported: 500, QtyPushed: 499, KeysMismatched: 0, KeysChecked: 300, Conserved: false}}
	var b strings.Builder
	runs{r}.print(&b)
	out := b.String()
	for _, row := range [][2]string{
		{"concurrency", "64"}, {"offered windows/s", "2000"}, {"seconds", "10.25"}, {"reports sent", "5000"}, {"errors", "7"},
		{"duplicate/degraded", "3/4"}, {"reports/s", "1234"},
		{"rpc p50 ms", "1.11"}, {"rpc p99 ms", "2.22"}, {"rpc max ms", "3.33"}, {"send delay p99 ms", "4.44"},
		{"windows expected", "100"}, {"windows pushed", "98"}, {"missing/twice/unknown/early", "2/5/6/8"},
		{"windows miscounted", "9"}, {"new reports answered duplicate", "11"}, {"push lag over windows", "97"},
		{"push lag p50 ms", "12.3"}, {"push lag p99 ms", "45.6"}, {"push lag max ms", "78.9"},
		{"qty reported/pushed", "500/499"}, {"keys mismatched", "0 of 300"}, {"conserved", "false"},
	} {
		if !regexp.MustCompile(`(?m)^ *` + regexp.QuoteMeta(row[0]) + ` +` + regexp.QuoteMeta(row[1]) + ` *$`).MatchString(out) {
			t.Errorf("row %q does not read %q:\n%s", row[0], row[1], out)
		}
	}
}

// A comparison prints each ratio as it is, x's throughput over y's.
func TestComparisonPrintsItsRatios(t *testing.T) {
	var b strings.Builder
	comparison{Runs: runs{{Mode: "naive"}}, Ratios: map[string]float64{"single_vs_naive": 4.5, "batch50_vs_naive": 12.25}}.print(&b)
	for _, want := range []string{"single_vs_naive      4.50x", "batch50_vs_naive    12.25x"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}

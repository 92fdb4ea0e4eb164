package main

import (
	"fmt"
	"slices"
	"testing"
)

// Each line of the plot draws its own figure against the offered rate,
// under its own legend name, and the values written beside the p99 and
// max points are those points': a p99 line drawing the max, an achieved
// line drawing the offered rate, or a target drawn at the other target's
// height, would publish a plot that lies, and draw without an error.
// Every figure of the points differs, so a line taking another's shows.
func TestEachLineDrawsItsOwnFigure(t *testing.T) {
	pts := []point{
		{Offered: 500, Runs: 3, Throughput: 480, LagP50: 1, LagP99: 5.5, LagMax: 300, Missing: 2},
		{Offered: 1000, Runs: 3, Throughput: 990, LagP50: 2, LagP99: 12, LagMax: 40, Missing: 1},
	}
	lines := func(ss []series) string {
		var out []string
		for _, s := range ss {
			out = append(out, fmt.Sprintf("%s %v", s.name, xys(pts, s.y)))
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct {
		panel string
		got   []series
		want  []string
	}{
		{"lag", lagSeries, []string{"p50 [{500 1} {1000 2}]", "p99 [{500 5.5} {1000 12}]", "max [{500 300} {1000 40}]"}},
		{"targets", targets(100, 250), []string{"p99 target 100 ms [{500 100} {1000 100}]", "max target 250 ms [{500 250} {1000 250}]"}},
		{"targets, p99's 0 (none)", targets(0, 250), []string{"max target 250 ms [{500 250} {1000 250}]"}},
		{"throughput", throughputSeries(pts), []string{"achieved (windows missing: 3) [{500 480} {1000 990}]", "offered (ideal) [{500 500} {1000 1000}]"}},
	} {
		if got, want := lines(c.got), fmt.Sprint(c.want); got != want {
			t.Errorf("%s panel draws %s, want %s", c.panel, got, want)
		}
	}

	var names, values []string
	for _, s := range labelled {
		names = append(names, s.name)
		values = append(values, valueLabels(pts, s.y).Labels...)
	}
	if want := []string{"p99", "max"}; !slices.Equal(names, want) {
		t.Errorf("values written beside the %v points, want %v", names, want)
	}
	if want := []string{"5.5", "12", "300", "40"}; !slices.Equal(values, want) {
		t.Errorf("values written %v, want %v (one decimal under 10)", values, want)
	}

	// Each panel's top clears its highest line, data or target, by its
	// headroom for the legend: a max lag above the targets must not run
	// off the plot, nor an achieved rate above the offered one.
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"lag, a max above the targets", lagTop(pts, 100, 250), 1.4 * 300},
		{"lag, a target above the data", lagTop(pts, 400, 250), 1.4 * 400},
		{"throughput, offered above achieved", throughputTop(pts), 1.15 * 1000},
		{"throughput, achieved above offered", throughputTop([]point{{Offered: 500, Throughput: 501}}), 1.15 * 501},
	} {
		if c.got != c.want {
			t.Errorf("%s: top %v, want %v", c.name, c.got, c.want)
		}
	}
}

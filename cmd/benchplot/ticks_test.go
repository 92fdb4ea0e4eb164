package main

import (
	"slices"
	"testing"
)

// Labelled ticks read as the values they mark, however small the axis:
// a lag panel with both targets off and a sub-millisecond max (or a
// throughput under 1.3/s) has a step of 0.1 or 0.2, whose multiples are
// not exact in float64 and were labelled "0.7000000000000001".
func TestTickLabelsAreTheShortestDecimal(t *testing.T) {
	for _, tc := range []struct {
		hi   float64
		want []string
	}{
		{0.9, []string{"0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9"}},
		{1.5, []string{"0", "0.2", "0.4", "0.6", "0.8", "1", "1.2", "1.4"}},
		{350, []string{"0", "50", "100", "150", "200", "250", "300", "350"}},
		{21000, []string{"0", "5000", "10000", "15000", "20000"}},
	} {
		var labels []string
		for _, tk := range (stepTicks{step: niceStep(tc.hi)}).Ticks(0, tc.hi) {
			if tk.Label != "" || tk.Value == 0 {
				labels = append(labels, tk.Label)
			}
		}
		if !slices.Equal(labels, tc.want) {
			t.Errorf("axis up to %v: labels %q, want %q", tc.hi, labels, tc.want)
		}
	}
}

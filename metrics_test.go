package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/combo-service/combo-service/conf"
)

// The /metrics endpoint counts RPCs (Kitex's tracer, on the base stats
// level) and reports by outcome, and tells the stream's bound.
func TestMetricsCountRPCsAndReports(t *testing.T) {
	s := startService(t, options{mutate: func(c *conf.Config) { c.Redis.StreamMaxLen = 250_000 }})
	a := newActivity()
	for range 3 {
		s.report(gift(a, 1, "firework", 1))
	}
	dup := gift(a, 1, "firework", 1)
	s.report(dup)
	s.report(dup)

	text := scrape(t, s)
	for _, want := range []string{
		`combo_reports_total{outcome="ok"} 4`,
		`combo_reports_total{outcome="duplicate"} 1`,
		// One call at a time: five pipelines of one report each.
		"combo_report_pipeline_reports_sum 5\n",
		"combo_report_pipeline_reports_count 5\n",
		"combo_report_pipeline_seconds_count 5\n",
		// deploy/alerts.yml's ComboStreamNearMaxLen compares the stream
		// with it.
		"combo_stream_max_length 250000\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Kitex's own metrics: 5 calls, and a latency observed for each.
	for _, re := range []string{
		`(?m)^kitex_server_throughput\{[^}]*method="ReportContribution"[^}]*status="succeed"[^}]*\} 5$`,
		`(?m)^kitex_server_latency_us_count\{[^}]*method="ReportContribution"[^}]*\} 5$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("/metrics does not match %s", re)
		}
	}
}

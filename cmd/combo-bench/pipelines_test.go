package main

import (
	"context"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/combo-service/combo-service/metrics"
)

// The bench reads the histograms the service registers (metrics.New), under
// the names it serves them, and reports the difference between two scrapes.
func TestScrapePipelinesReportsTheLoadsShare(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	observe := func(reports int, took time.Duration) {
		m.PipelineReports.Observe(float64(reports))
		m.PipelineSeconds.Observe(took.Seconds())
	}

	observe(5, time.Millisecond) // before the load: not counted
	before, err := scrapePipelines(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	observe(1, 100*time.Microsecond)
	observe(1, 100*time.Microsecond)
	observe(10, 300*time.Microsecond)
	observe(20, 500*time.Microsecond)
	after, err := scrapePipelines(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}

	u := after.since(before, 10*time.Millisecond)
	if u == nil {
		t.Fatal("since: nil, want the four pipelines of the load")
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if u.Pipelines != 4 || !near(u.ReportsPerPipeline, 8) || !near(u.OneReportShare, 0.5) ||
		!near(u.RoundTripMeanMs, 0.25) || !near(u.InFlight, 0.1) {
		t.Errorf("since = %+v, want 4 pipelines, 8 reports each, half of one report, 0.25 ms round trip, 0.1 in flight", *u)
	}
	if u := after.since(after, time.Second); u != nil {
		t.Errorf("no pipeline between two scrapes: since = %+v, want nil", *u)
	}
}

// A service that does not serve the histograms is named in the error.
func TestScrapePipelinesNamesTheMissingMetric(t *testing.T) {
	srv := httptest.NewServer(promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{}))
	defer srv.Close()
	_, err := scrapePipelines(context.Background(), strings.TrimPrefix(srv.URL, "http://"))
	if err == nil || !strings.Contains(err.Error(), metricPipelineReports) {
		t.Fatalf("err = %v, want one naming %s", err, metricPipelineReports)
	}
}

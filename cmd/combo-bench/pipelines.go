package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// With -service-metrics the bench reads the service's report-pipeline
// histograms (combo_report_pipeline_reports, combo_report_pipeline_seconds)
// before and after each load, to show how concurrent calls shared Redis
// round trips: a pipeline per call means no sharing, many reports per
// pipeline means one round trip served many RPCs.

const (
	metricPipelineReports = "combo_report_pipeline_reports"
	metricPipelineSeconds = "combo_report_pipeline_seconds"
)

// pipelineCounts is the cumulative state of the two histograms.
type pipelineCounts struct {
	pipelines uint64  // observations
	reports   float64 // sum of reports
	oneReport uint64  // pipelines of one report (bucket le=1)
	seconds   float64 // sum of round trips
}

// pipelineUse is what the service's report pipelines did during one load.
type pipelineUse struct {
	Pipelines          uint64  `json:"pipelines"`
	ReportsPerPipeline float64 `json:"reports_per_pipeline"`
	OneReportShare     float64 `json:"one_report_share"` // of the pipelines
	RoundTripMeanMs    float64 `json:"round_trip_mean_ms"`
	// InFlight is the mean number of pipelines in flight: their summed
	// round trips over the load's duration. Single reports share at most
	// one pipeline, so there it is the share of the time one was out;
	// batches of 20 or more each go on their own, so there it can pass 1.
	InFlight float64 `json:"pipelines_in_flight"`
}

// scrapePipelines reads the histograms from the service's /metrics.
func scrapePipelines(ctx context.Context, addr string) (pipelineCounts, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return pipelineCounts{}, fmt.Errorf("service metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return pipelineCounts{}, fmt.Errorf("service metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return pipelineCounts{}, fmt.Errorf("service metrics: GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return pipelineCounts{}, fmt.Errorf("service metrics: %w", err)
	}
	reports, err := histogramOf(families, metricPipelineReports)
	if err != nil {
		return pipelineCounts{}, err
	}
	seconds, err := histogramOf(families, metricPipelineSeconds)
	if err != nil {
		return pipelineCounts{}, err
	}
	c := pipelineCounts{pipelines: reports.GetSampleCount(), reports: reports.GetSampleSum(), seconds: seconds.GetSampleSum()}
	for _, b := range reports.GetBucket() {
		if b.GetUpperBound() == 1 {
			c.oneReport = b.GetCumulativeCount()
		}
	}
	return c, nil
}

// histogramOf is the one unlabelled histogram of the family name.
func histogramOf(families map[string]*dto.MetricFamily, name string) (*dto.Histogram, error) {
	f, ok := families[name]
	if !ok || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetHistogram() == nil {
		return nil, fmt.Errorf("service metrics: no histogram %s (a combo-service older than 9f0cb3a?)", name)
	}
	return f.GetMetric()[0].GetHistogram(), nil
}

// since is the use between before and c, over a load of elapsed; nil if no
// pipeline ran.
func (c pipelineCounts) since(before pipelineCounts, elapsed time.Duration) *pipelineUse {
	n := c.pipelines - before.pipelines
	if n == 0 || c.pipelines < before.pipelines {
		return nil
	}
	secs := c.seconds - before.seconds
	u := &pipelineUse{
		Pipelines:          n,
		ReportsPerPipeline: (c.reports - before.reports) / float64(n),
		OneReportShare:     float64(c.oneReport-before.oneReport) / float64(n),
		RoundTripMeanMs:    secs * 1000 / float64(n),
	}
	if elapsed > 0 {
		u.InFlight = secs / elapsed.Seconds()
	}
	return u
}

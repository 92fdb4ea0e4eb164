package metrics

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// deploy/alerts.yml's latency alerts compare a histogram_quantile with a
// threshold, and histogram_quantile interpolates inside the bucket the
// quantile falls in: a threshold that is no bucket's bound fires on the
// bucket's width, not on the latencies. Were 5 ms no bound of
// kitex_server_latency_us (2.5 ms, then 10 ms), reports all taking 3 ms
// would read as a p99 near 10 ms and page ComboReportsSlow; were 0.1 s none
// of combo_push_lag_seconds, pushes all 60 ms late would fire
// ComboPushLagHigh. So each threshold is a bound of its histogram.
func TestAlertQuantileThresholdsAreBucketBounds(t *testing.T) {
	rules, err := os.ReadFile("../deploy/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	New(reg)
	tr := NewRPCTracer(reg)
	tr.latency.WithLabelValues("caller", "callee", "method", "succeed", "0") // a series, so its buckets are gathered
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	bounds := map[string][]float64{}
	for _, f := range families {
		if f.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			bounds[f.GetName()] = append(bounds[f.GetName()], b.GetUpperBound())
		}
	}

	quantile := regexp.MustCompile(`histogram_quantile\([^,]+,[^>]*?\b([a-z_]+)_bucket\b[^>]*>\s*([0-9.]+)`)
	found := quantile.FindAllStringSubmatch(string(rules), -1)
	if len(found) == 0 {
		t.Fatal("deploy/alerts.yml: no alert on a histogram_quantile; this test reads them")
	}
	for _, m := range found {
		name := m[1]
		threshold, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("%s: threshold %q: %v", name, m[2], err)
		}
		b, ok := bounds[name]
		if !ok {
			t.Errorf("deploy/alerts.yml takes a quantile of %s, no histogram of this package", name)
			continue
		}
		if !slices.Contains(b, threshold) {
			t.Errorf("deploy/alerts.yml: the quantile of %s is compared with %v, no bound of its buckets %v", name, threshold, b)
		}
	}
}

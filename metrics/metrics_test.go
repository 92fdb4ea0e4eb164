package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The alerts take increase() and rate() of labelled counters
// (deploy/alerts.yml): each label value must be exported at 0 before its
// first increment, or Prometheus never sees that increment.
func TestLabelledCountersStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	if n := testutil.CollectAndCount(m.Reports, "combo_reports_total"); n != len(reportOutcomes) {
		t.Errorf("combo_reports_total: %d series before any report, want %d (one per outcome)", n, len(reportOutcomes))
	}
	if n := testutil.CollectAndCount(m.WindowsFlushed, "combo_windows_flushed_total"); n != len(flushedStatuses) {
		t.Errorf("combo_windows_flushed_total: %d series before any flush, want %d (one per status)", n, len(flushedStatuses))
	}
	for _, o := range []string{OutcomeUnavailable, OutcomeDegraded} {
		if v := testutil.ToFloat64(m.Reports.WithLabelValues(o)); v != 0 {
			t.Errorf("combo_reports_total{outcome=%q} = %v at start, want 0", o, v)
		}
	}
	if n := testutil.CollectAndCount(m.RedisErrors, "combo_redis_errors_total"); n != len(redisOps) {
		t.Errorf("combo_redis_errors_total: %d series before any failure, want %d (one per op)", n, len(redisOps))
	}
	if n := testutil.CollectAndCount(m.LoopPanics, "combo_loop_panics_total"); n != len(loops) {
		t.Errorf("combo_loop_panics_total: %d series before any panic, want %d (one per loop)", n, len(loops))
	}
	if v := testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(FlushedStale)); v != 0 {
		t.Errorf(`combo_windows_flushed_total{status="stale"} = %v at start, want 0`, v)
	}
}

// LogSuppressed counts by logger, the unnamed one as "main".
func TestLogSuppressedByLogger(t *testing.T) {
	m := New(prometheus.NewRegistry())
	m.LogSuppressed("worker", 0)
	m.LogSuppressed("worker", 3)
	m.LogSuppressed("", 2)
	if got := testutil.ToFloat64(m.LogLinesSuppressed.WithLabelValues("worker")); got != 3 {
		t.Errorf("worker: %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.LogLinesSuppressed.WithLabelValues("main")); got != 2 {
		t.Errorf("main: %v, want 2", got)
	}
}

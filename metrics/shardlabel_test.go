package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The per-shard gauges are labelled shard: deploy/alerts.yml aggregates
// them by (job, shard) and names the shard in each alert's summary
// ({{ $labels.shard }}). Under another label name an alert would take the
// worst of every shard and name none.
func TestStreamGaugesAreByShard(t *testing.T) {
	m := New(prometheus.NewRegistry())
	for name, g := range map[string]*prometheus.GaugeVec{
		"combo_stream_length":                 m.StreamLength,
		"combo_stream_pending":                m.StreamPending,
		"combo_stream_oldest_overdue_seconds": m.StreamOverdue,
		"combo_stream_ids_ahead_seconds":      m.StreamIDsAhead,
	} {
		if _, err := g.GetMetricWith(prometheus.Labels{"shard": "0"}); err != nil {
			t.Errorf("%s: %v, want it labelled shard alone", name, err)
		}
	}
}

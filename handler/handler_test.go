package handler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// degradingStore answers every report degraded, for cause.
type degradingStore struct{ cause error }

func (s degradingStore) Report(_ context.Context, cs []*combo.Contribution) ([]repo.ReportResult, error) {
	res := make([]repo.ReportResult, len(cs))
	for i, c := range cs {
		res[i] = repo.ReportResult{Outcome: repo.Degraded, WindowID: c.Id, WindowQuantity: c.Quantity, Cause: s.cause}
	}
	return res, nil
}

// The warning for degraded reports says why the aggregation failed, so an
// operator can tell a full stream from a Redis refusing writes.
func TestDegradedWarningNamesTheCause(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	cause := errors.New("report script: STREAMFULL the stream holds redis.stream_maxlen (10000) windows waiting to close")
	h := New(degradingStore{cause}, 3*time.Second, metrics.New(prometheus.NewRegistry()), zap.New(core))
	c := &combo.Contribution{Id: 1, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose", Quantity: 1, CreatedAt: 1732950000000}
	resp, err := h.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
	if err != nil || !resp.Degraded {
		t.Fatalf("report: %+v %v", resp, err)
	}
	entries := logs.FilterMessageSnippet("published on their own").All()
	if len(entries) != 1 {
		t.Fatalf("%d warnings, want 1", len(entries))
	}
	if got, ok := entries[0].ContextMap()["cause"]; !ok || got != cause.Error() {
		t.Fatalf("warning fields %v, want cause %q", entries[0].ContextMap(), cause)
	}
}

package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// stallingClient answers every report at once, as opening its window,
// except that every call between stallFrom and stallTo (after the first
// call) waits until stallTo: a service that stops for a while.
type stallingClient struct {
	once               sync.Once
	t0                 time.Time
	stallFrom, stallTo time.Duration
}

func (s *stallingClient) ReportContribution(_ context.Context, req *combo.ReportContributionRequest, _ ...callopt.Option) (*combo.ReportContributionResponse, error) {
	s.once.Do(func() { s.t0 = time.Now() })
	if since := time.Since(s.t0); since >= s.stallFrom && since < s.stallTo {
		time.Sleep(s.stallTo - since)
	}
	c := req.Contribution
	return &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity}, nil
}

func (s *stallingClient) ReportContributions(context.Context, *combo.ReportContributionsRequest, ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	return nil, errors.New("not used")
}

func (s *stallingClient) MergeLatest(context.Context, *combo.MergeLatestRequest, ...callopt.Option) (*combo.MergeLatestResponse, error) {
	return nil, errors.New("not used")
}

// Rate mode's latency counts from when a report was released, not from
// when a caller got to send it: a 200 ms stall that leaves reports queued
// for a free caller shows in their latency (no coordinated omission), so
// the latency's p99 is about the send delay's, not a few microseconds.
func TestRateLatencyCountsTheWaitForACaller(t *testing.T) {
	cli := &stallingClient{stallFrom: 300 * time.Millisecond, stallTo: 500 * time.Millisecond}
	cfg := config{Rate: 1000, Duration: time.Second, Concurrency: 8}
	l := runRate(cfg, cli, newWorkload())
	lat := summarize(l.rec.latencies)
	if l.sendDelay.P99 < 50 {
		t.Fatalf("send delay p99 %.1f ms: the stall queued nothing, the test proves nothing", l.sendDelay.P99)
	}
	// Each latency is its send delay less the tick's lateness (1 ms, more
	// on a busy machine): half is a wide margin.
	if lat.P99 < l.sendDelay.P99/2 {
		t.Fatalf("latency p99 %.1f ms below the send delay's %.1f ms: the wait for a caller is left out", lat.P99, l.sendDelay.P99)
	}
}

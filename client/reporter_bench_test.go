package client

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// ackSender acknowledges every batch at once, so a benchmark measures the
// Reporter's own cost.
type ackSender struct{}

func (ackSender) ReportContributions(_ context.Context, req *combo.ReportContributionsRequest, _ ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	res := make([]*combo.ReportContributionResponse, len(req.Contributions))
	for i, c := range req.Contributions {
		res[i] = &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity}
	}
	return &combo.ReportContributionsResponse{Results: res}, nil
}

// BenchmarkReporter is the client's CPU and allocations per report: Report
// from parallel callers, every batch acknowledged at once, over many combo
// keys (as in combo-bench's reporter mode) and over one (every batch
// waits for the one before: its key's order).
//
//	go test -run '^$' -bench Reporter -benchmem ./client/
func BenchmarkReporter(b *testing.B) {
	for _, keys := range []int64{1024, 1} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			r, err := NewReporter(ackSender{}, ReporterOptions{QueueSize: 100_000})
			if err != nil {
				b.Fatal(err)
			}
			var id atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := id.Add(1)
					// Users from 1: user_id 0 is refused, never queued.
					c := &combo.Contribution{Id: n, ActivityId: 7, UserId: n%keys + 1, ItemId: 3, ItemType: "rose",
						ItemName: "Rose", Quantity: 1, CreatedAt: 1_732_950_000_000 + n}
					for r.Report(context.Background(), c) == ErrQueueFull {
						runtime.Gosched()
					}
				}
			})
			if err := r.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
			if s := r.Stats(); s.Sent != s.Accepted || s.Invalid != 0 || s.Accepted == 0 {
				b.Fatalf("stats %+v: want every report accepted and sent", s)
			}
		})
	}
}

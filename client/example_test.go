package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// fakeComboService stands in for the comboservice.Client NewClient returns.
type fakeComboService struct{}

func (fakeComboService) ReportContributions(_ context.Context, req *combo.ReportContributionsRequest, _ ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	fmt.Printf("ReportContributions: %d contributions\n", len(req.Contributions))
	resp := &combo.ReportContributionsResponse{}
	for _, c := range req.Contributions {
		resp.Results = append(resp.Results, &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity})
	}
	return resp, nil
}

func ExampleReporter() {
	// In activityService: cli, err := client.NewClient([]string{"combo-service:8888"})
	reporter, err := client.NewReporter(fakeComboService{}, client.ReporterOptions{
		Linger: time.Minute, // so that, in this example, only Close sends
		OnDrop: func(batch []*combo.Contribution, err error) {
			fmt.Printf("dropped %d contributions: %v\n", len(batch), err)
		},
	})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	// After each activity_contributions row is written:
	for id := int64(101); id <= 103; id++ {
		err := reporter.Report(ctx, &combo.Contribution{
			Id: id, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose",
			Quantity: 1, CreatedAt: time.Now().UnixMilli(),
		})
		if err != nil { // invalid, client.ErrQueueFull or client.ErrClosed
			fmt.Println("not reported:", id)
		}
	}
	// A timestamp in seconds is refused at once, before anything is queued.
	if err := reporter.Report(ctx, &combo.Contribution{
		Id: 104, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose",
		Quantity: 1, CreatedAt: time.Now().Unix(),
	}); err != nil {
		fmt.Println("not reported: 104")
	}

	// On shutdown: flush what is queued, within a deadline.
	shutdown, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := reporter.Close(shutdown); err != nil {
		fmt.Println("close:", err)
	}
	s := reporter.Stats()
	fmt.Printf("sent=%d dropped=%d invalid=%d\n", s.Sent, s.Dropped, s.Invalid)
	// Output:
	// not reported: 104
	// ReportContributions: 3 contributions
	// sent=3 dropped=0 invalid=1
}

package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/validate"
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

// downComboService fails every call, as a client does while combo-service
// is unreachable.
type downComboService struct{}

func (downComboService) ReportContributions(context.Context, *combo.ReportContributionsRequest, ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	return nil, errors.New("connection refused")
}

// Telling why Report refused a contribution, and why the Reporter gave one
// up.
func ExampleReporter_errors() {
	reporter, err := client.NewReporter(downComboService{}, client.ReporterOptions{
		MaxRetries: 1, InitialBackoff: time.Millisecond,
		OnDrop: func(batch []*combo.Contribution, err error) {
			switch ce, refused := client.IsComboError(err); {
			case errors.Is(err, client.ErrRetriesExhausted):
				fmt.Printf("%d dropped: retries exhausted\n", len(batch))
			case errors.Is(err, client.ErrClosed):
				fmt.Printf("%d dropped: Close's ctx ended first\n", len(batch))
			case refused && ce.Code == client.CodeInvalidArgument:
				fmt.Printf("%d dropped: refused by the service\n", len(batch))
			}
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	err = reporter.Report(ctx, &combo.Contribution{Id: 1, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose"})
	if verr, ok := errors.AsType[*validate.Error](err); ok {
		fmt.Println("not reported:", verr.Field)
	}
	err = reporter.Report(ctx, &combo.Contribution{
		Id: 2, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose",
		Quantity: 1, CreatedAt: time.Now().UnixMilli(),
	})
	fmt.Println("reported:", err == nil)

	shutdown, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := reporter.Close(shutdown); err != nil {
		fmt.Println("close:", err)
	}
	// Output:
	// not reported: contribution.quantity
	// reported: true
	// 1 dropped: retries exhausted
}

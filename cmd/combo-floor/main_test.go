package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/handler"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// The floor answers reports over the real RPC stack at once, as if each had
// opened a window of its own, refuses MergeLatest with a ComboError, and
// stops when its context ends.
func TestFloorAnswersOverKitex(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln) }()

	cli, err := client.NewClient([]string{ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	call, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	one, err := cli.ReportContribution(call, &combo.ReportContributionRequest{
		Contribution: &combo.Contribution{Id: 41, Quantity: 3}})
	if err != nil {
		t.Fatalf("ReportContribution: %v", err)
	}
	if one.WindowId != 41 || one.WindowQuantity != 3 || one.Duplicate || one.Degraded {
		t.Fatalf("ReportContribution answered %+v, want window 41 of 3", one)
	}
	many, err := cli.ReportContributions(call, &combo.ReportContributionsRequest{
		Contributions: []*combo.Contribution{{Id: 7, Quantity: 1}, {Id: 8, Quantity: 2}}})
	if err != nil {
		t.Fatalf("ReportContributions: %v", err)
	}
	if len(many.Results) != 2 || many.Results[0].WindowId != 7 || many.Results[1].WindowQuantity != 2 {
		t.Fatalf("ReportContributions answered %+v", many.Results)
	}
	_, err = cli.MergeLatest(call, &combo.MergeLatestRequest{ActivityId: 1})
	if ce, ok := client.IsComboError(err); !ok || ce.Code != handler.CodeInternal {
		t.Fatalf("MergeLatest: got %v, want a ComboError with code %d", err, handler.CodeInternal)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v after its context ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return within 10 s of its context ending")
	}
}

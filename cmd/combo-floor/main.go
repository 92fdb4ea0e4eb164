// Command combo-floor serves combo-service's RPC interface with handlers
// that answer at once and touch no Redis, on the same Kitex server set-up
// as the service (internal/rpcserver). Driven by combo-bench (-floor), it
// measures the most any implementation of ReportContribution can do over
// this RPC layer on a machine: the floor the service's own work adds to.
// It is a measuring tool, never a service: nothing it answers is counted.
// Build it with go build ./cmd/combo-floor, as combo-bench.
//
//	combo-floor -addr 127.0.0.1:8899
//	combo-bench -mode compare -c 32 -floor 127.0.0.1:8899 -floor-pid PID ...
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/cloudwego/kitex/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/handler"
	"github.com/combo-service/combo-service/internal/rpcserver"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8899", "Kitex RPC listen address")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "combo-floor:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintln(os.Stderr, "combo-floor: listening on", ln.Addr())
	return serve(ctx, ln)
}

// serve answers RPCs on ln until ctx ends.
func serve(ctx context.Context, ln net.Listener) error {
	nl, err := rpcserver.Listener(ln) // as the service's
	if err != nil {
		ln.Close()
		return fmt.Errorf("listen %s: %w", ln.Addr(), err)
	}
	svr := comboservice.NewServer(&floor{},
		// The service's options, metrics included: they cost per RPC too.
		append(rpcserver.Options(prometheus.NewRegistry(), conf.Default().Server.MaxConnections, nil),
			server.WithListener(nl),
			rpcserver.StopOn(ctx),
		)...,
	)
	return svr.Run()
}

// floor answers every report as if it had opened a window of its own.
type floor struct{}

// Kitex needs a pointer (it checks the handler for nil by reflection).
var _ combo.ComboService = (*floor)(nil)

func answer(c *combo.Contribution) *combo.ReportContributionResponse {
	if c == nil {
		return &combo.ReportContributionResponse{}
	}
	return &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity}
}

func (*floor) ReportContribution(_ context.Context, req *combo.ReportContributionRequest) (*combo.ReportContributionResponse, error) {
	return answer(req.GetContribution()), nil
}

func (*floor) ReportContributions(_ context.Context, req *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
	cs := req.GetContributions()
	out := make([]*combo.ReportContributionResponse, len(cs))
	for i, c := range cs {
		out[i] = answer(c)
	}
	return &combo.ReportContributionsResponse{Results: out}, nil
}

func (*floor) MergeLatest(context.Context, *combo.MergeLatestRequest) (*combo.MergeLatestResponse, error) {
	return nil, &combo.ComboError{Code: handler.CodeInternal, Message: "combo-floor does not merge; it only answers reports"}
}

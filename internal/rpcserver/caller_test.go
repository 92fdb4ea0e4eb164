package rpcserver

import (
	"context"
	"strings"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/client"
)

// README: the caller label of kitex_server_throughput is the name a
// TTHeader caller gives itself. A client built by client.NewClient that
// names itself must be counted under that name, not as "unknown".
func TestCallerLabelNamesNewClientCaller(t *testing.T) {
	if got := countedCaller(t, "activity-service"); got != "activity-service" {
		t.Fatalf("kitex_server_throughput caller = %q, want %q", got, "activity-service")
	}
}

// countedCaller serves one RPC from a client.NewClient that names itself
// name and returns the caller label it was counted under ("" if none).
func countedCaller(t *testing.T, name string) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	addr := runServer(t, &okService{}, Options(reg, 10, nil)...)

	cli, err := client.NewClient([]string{addr},
		kclient.WithClientBasicInfo(&rpcinfo.EndpointBasicInfo{ServiceName: name}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ReportContributions(context.Background(), batch(2).Req); err != nil {
		t.Fatal(err)
	}
	// The tracer counts the RPC once it has finished, which may be just
	// after the answer reached the client: poll until it has.
	var got string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got = callers(t, reg); got != "" {
			break
		}
	}
	return got
}

// callers is the caller label of the RPCs counted so far, "" if none.
func callers(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kitex_server_throughput" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "caller" {
					return l.GetValue()
				}
			}
		}
	}
	return ""
}

// A caller's name is a label value only while it is short: TTHeader
// carries names up to 64 KB, and each of the caller label's 100 values is
// repeated on every line of its series (17 per method and status): 100
// names of 60 KB made a /metrics scrape 584 MB, 5.6 s to render.
func TestLongCallerNameIsNotALabel(t *testing.T) {
	got := countedCaller(t, strings.Repeat("x", 60_000))
	if got == "" || len(got) > 128 {
		t.Fatalf("kitex_server_throughput caller label of %d bytes, want a counted RPC under a label of at most 128", len(got))
	}
}

package main

import (
	"context"
	"fmt"
	"net"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// Through the real server, a refused report's line names the caller's
// address as Kitex saw it (the handler reads it from the call's rpcinfo),
// and its method: which caller regressed is what the ComboReportsInvalid
// alert's operator has to find.
func TestRefusedReportLineNamesTheCaller(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	s := startService(t, options{log: zap.New(core)})
	bad := gift(newID(), 1, "rose", 1)
	bad.Quantity = 0
	_, err := s.rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: bad})
	if ce := comboErr(t, err); ce.Code != 1 {
		t.Fatalf("a report of quantity 0: code %d, want 1", ce.Code)
	}
	es := logs.FilterMessage("request refused: invalid argument").All()
	if len(es) != 1 {
		t.Fatalf("logged %v, want one refusal", logs.All())
	}
	f := es[0].ContextMap()
	host, _, err := net.SplitHostPort(fmt.Sprint(f["peer"]))
	if err != nil || host != "127.0.0.1" || f["rpc"] != "ReportContribution" || f["activity"] != bad.ActivityId {
		t.Errorf("the refusal's fields %v: want peer 127.0.0.1:<port>, rpc ReportContribution, activity %d", f, bad.ActivityId)
	}
}

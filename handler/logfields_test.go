package handler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/validate"
)

// Each line a failed call logs names its RPC, and the caller that sent it
// where Kitex knows it: "request refused: invalid argument" is what the
// ComboReportsInvalid alert sends the operator to, and a line naming only
// the field ("contribution.created_at: ...") did not say which caller
// regressed, nor whether a report or a MergeLatest was refused. A refused
// report names its activity, user and id, as README says request logs do.
func TestFailedCallLinesNameTheRPCTheCallerAndTheActivity(t *testing.T) {
	peer := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 40001}
	ctx := rpcinfo.NewCtxWithRPCInfo(context.Background(), rpcinfo.NewRPCInfo(
		rpcinfo.NewEndpointInfo("activityService", "", peer, nil), nil, nil, nil, nil))
	bad := contributionWithID(5)
	bad.Quantity = 0
	for _, tc := range []struct {
		name, rpc, line string
		fail            error
		call            func(h *Handler) error
		activity        bool // the line names activity, user and id
	}{
		{name: "invalid report", rpc: "ReportContribution", line: "request refused: invalid argument", activity: true,
			call: func(h *Handler) error {
				_, err := h.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: bad})
				return err
			}},
		{name: "invalid batch", rpc: "ReportContributions", line: "request refused: invalid argument", activity: true,
			call: func(h *Handler) error {
				// The refused report is named, not the first.
				other := contributionWithID(9)
				other.ActivityId = 8
				_, err := h.ReportContributions(ctx, &combo.ReportContributionsRequest{Contributions: []*combo.Contribution{other, bad}})
				return err
			}},
		{name: "invalid merge", rpc: "MergeLatest", line: "request refused: invalid argument",
			call: func(h *Handler) error {
				_, err := h.MergeLatest(ctx, &combo.MergeLatestRequest{ActivityId: 0})
				return err
			}},
		{name: "unavailable report", rpc: "ReportContribution", line: "report refused: redis unavailable", activity: true,
			fail: fmt.Errorf("repo.Report: %w: i/o timeout", repo.ErrUnavailable),
			call: func(h *Handler) error {
				_, err := h.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: contributionWithID(5)})
				return err
			}},
		{name: "failed batch", rpc: "ReportContributions", line: "report failed", activity: true, fail: errors.New("boom"),
			call: func(h *Handler) error {
				_, err := h.ReportContributions(ctx, &combo.ReportContributionsRequest{Contributions: []*combo.Contribution{contributionWithID(5)}})
				return err
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			h := New(&scriptedStore{fail: tc.fail}, 3*time.Second, metrics.New(prometheus.NewRegistry()), zap.New(core))
			if err := tc.call(h); err == nil {
				t.Fatal("the call succeeded")
			}
			es := logs.FilterMessage(tc.line).All()
			if len(es) != 1 {
				t.Fatalf("logged %v, want one %q line", logs.All(), tc.line)
			}
			f := es[0].ContextMap()
			if f["rpc"] != tc.rpc || f["peer"] != peer.String() {
				t.Errorf("%q line's fields %v: want rpc %q and peer %q", tc.line, f, tc.rpc, peer.String())
			}
			if tc.activity && (f["activity"] != int64(7) || f["user"] != int64(42) || f["id"] != int64(5)) {
				t.Errorf("%q line's fields %v: want activity 7, user 42, id 5", tc.line, f)
			}
		})
	}
}

// A batch refused for its size names no report: the error names the
// batch ("contributions: must hold 1..1000 items"), and a report of it
// that is invalid too is not what was refused (nor is it judged: the
// refusal's line costs no walk over a batch past validate.MaxBatch).
func TestOversizedBatchLineNamesNoReport(t *testing.T) {
	cs := make([]*combo.Contribution, validate.MaxBatch+1)
	for i := range cs {
		cs[i] = contributionWithID(int64(i) + 1)
	}
	cs[3].Quantity = 0
	core, logs := observer.New(zapcore.DebugLevel)
	h := New(&scriptedStore{}, 3*time.Second, metrics.New(prometheus.NewRegistry()), zap.New(core))
	if _, err := h.ReportContributions(context.Background(), &combo.ReportContributionsRequest{Contributions: cs}); err == nil {
		t.Fatal("a batch past MaxBatch was taken")
	}
	es := logs.FilterMessage("request refused: invalid argument").All()
	if len(es) != 1 {
		t.Fatalf("logged %v, want one refusal", logs.All())
	}
	f := es[0].ContextMap()
	if _, named := f["id"]; named || f["batch"] != int64(len(cs)) {
		t.Errorf("the refusal's fields %v: want batch %d and no report's id", f, len(cs))
	}
}

// A context whose rpcinfo Kitex froze without a caller (its From() wraps
// no endpoint, and Address() panics) leaves a refusal counted and logged,
// without a peer: fail, which reads the peer, runs in recoverPanic too.
func TestFailedCallLineWithoutACallerEndpoint(t *testing.T) {
	ctx := rpcinfo.FreezeRPCInfo(rpcinfo.NewCtxWithRPCInfo(context.Background(), rpcinfo.NewRPCInfo(nil, nil, nil, nil, nil)))
	core, logs := observer.New(zapcore.DebugLevel)
	h := New(&scriptedStore{}, 3*time.Second, metrics.New(prometheus.NewRegistry()), zap.New(core))
	bad := contributionWithID(5)
	bad.Quantity = 0
	_, err := h.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: bad})
	if ce, ok := err.(*combo.ComboError); !ok || ce.Code != 1 {
		t.Fatalf("an invalid report without a caller endpoint: %v, want code 1", err)
	}
	if es := logs.FilterMessage("request refused: invalid argument").All(); len(es) != 1 || es[0].ContextMap()["peer"] != nil {
		t.Errorf("logged %v, want one refusal naming no peer", logs.All())
	}
}

package handler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// Tests pinning what a mutation sweep of the handler found no test for.

// ctxStore answers every report Opened, or Joined when joined, and keeps
// the context it was called with.
type ctxStore struct {
	joined bool
	ctx    context.Context
}

func (s *ctxStore) Report(ctx context.Context, cs []*combo.Contribution) ([]repo.ReportResult, error) {
	s.ctx = ctx
	res := make([]repo.ReportResult, len(cs))
	for i, c := range cs {
		res[i] = repo.ReportResult{Outcome: repo.Opened, WindowID: c.Id, WindowQuantity: c.Quantity}
		if s.joined && i > 0 {
			res[i].Outcome = repo.Joined
		}
	}
	return res, nil
}

func contributionWithID(id int64) *combo.Contribution {
	return &combo.Contribution{Id: id, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose", Quantity: 1, CreatedAt: 1732950000000}
}

type callerKey struct{}

// Both RPCs hand the store their caller's context, its end included: a
// batch whose caller gave up must not be sent (the repo sees the context
// end and answers ErrCallerGone). The batch RPC, which client.Reporter
// always uses, was pinned by no test.
func TestReportsGetTheCallersContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), callerKey{}, "the caller's"))
	cancel() // the caller gave up
	st := &ctxStore{}
	h := New(st, 3*time.Second, metrics.New(prometheus.NewRegistry()), zap.NewNop())
	if _, err := h.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: contributionWithID(1)}); err != nil {
		t.Fatal(err)
	}
	if st.ctx == nil || st.ctx.Value(callerKey{}) != "the caller's" || st.ctx.Err() == nil {
		t.Error("ReportContribution did not pass the caller's context, ended, to the store")
	}
	st.ctx = nil
	if _, err := h.ReportContributions(ctx, &combo.ReportContributionsRequest{Contributions: []*combo.Contribution{contributionWithID(2)}}); err != nil {
		t.Fatal(err)
	}
	if st.ctx == nil || st.ctx.Value(callerKey{}) != "the caller's" || st.ctx.Err() == nil {
		t.Error("ReportContributions did not pass the caller's context, ended, to the store")
	}
}

// A failure the handler does not know (a bug, a script's error reply) is
// INTERNAL, which callers do not retry, and counted so; it was pinned by no
// test, and UNAVAILABLE there passed.
func TestAnUnknownStoreErrorIsInternal(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	h := New(&scriptedStore{fail: errors.New("boom")}, 3*time.Second, m, zap.NewNop())
	for name, call := range reportCalls(h) {
		var ce *combo.ComboError
		if err := call(); !errors.As(err, &ce) || ce.Code != CodeInternal || !strings.Contains(ce.Message, "boom") {
			t.Errorf("%s with a store failing \"boom\": %v, want a ComboError of code %d", name, err, CodeInternal)
		}
	}
	if n := testutil.ToFloat64(m.Reports.WithLabelValues(metrics.OutcomeInternal)); n != 3 {
		t.Fatalf("reports counted internal: %v, want 3", n)
	}
}

// reportCalls are the two report RPCs on h, one contribution and a batch
// of two, each returning its error.
func reportCalls(h *Handler) map[string]func() error {
	return map[string]func() error{
		"ReportContribution": func() error {
			_, err := h.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: contributionWithID(1)})
			return err
		},
		"ReportContributions": func() error {
			_, err := h.ReportContributions(context.Background(), &combo.ReportContributionsRequest{
				Contributions: []*combo.Contribution{contributionWithID(1), contributionWithID(2)}})
			return err
		},
	}
}

// combo_windows_opened_total counts the windows reports opened, not those
// they joined, for single reports and batches.
func TestOpenedWindowsAreCounted(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	h := New(&ctxStore{joined: true}, 3*time.Second, m, zap.NewNop())
	if _, err := h.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: contributionWithID(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ReportContributions(context.Background(), &combo.ReportContributionsRequest{
		Contributions: []*combo.Contribution{contributionWithID(2), contributionWithID(3), contributionWithID(4)}}); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(m.WindowsOpened); n != 2 {
		t.Fatalf("windows opened: %v, want 2 (one per call; the batch's other two joined)", n)
	}
}

// A request without its field (a Thrift message with no field 1) is
// INVALID_ARGUMENT naming the field, not a panic Kitex turns into an
// application exception, uncounted.
func TestARequestWithoutItsFieldIsInvalid(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	h := New(&ctxStore{}, 3*time.Second, m, zap.NewNop())
	var ce *combo.ComboError
	if _, err := h.ReportContribution(context.Background(), nil); !errors.As(err, &ce) || ce.Code != CodeInvalidArgument ||
		!strings.HasPrefix(ce.Message, "contribution") {
		t.Errorf("ReportContribution(nil): %v, want INVALID_ARGUMENT naming contribution", err)
	}
	if _, err := h.ReportContributions(context.Background(), nil); !errors.As(err, &ce) || ce.Code != CodeInvalidArgument ||
		!strings.HasPrefix(ce.Message, "contributions") {
		t.Errorf("ReportContributions(nil): %v, want INVALID_ARGUMENT naming contributions", err)
	}
	if _, err := h.MergeLatest(context.Background(), nil); !errors.As(err, &ce) || ce.Code != CodeInvalidArgument {
		t.Errorf("MergeLatest(nil): %v, want INVALID_ARGUMENT", err)
	}
}

// A MergeLatest limit of 0 or below means all the merged records
// (CONTRACT §1), negative ones too: a limit taken as "not 0" sliced
// merged[:-1] and panicked.
func TestMergeLatestLimitAtOrBelowZeroMeansAll(t *testing.T) {
	h := New(&scriptedStore{}, 3*time.Second, metrics.New(prometheus.NewRegistry()), zap.NewNop())
	const t0 = 1732950000000
	rows := []*combo.ContributionRecord{
		{Id: 1, UserId: 1, ItemId: 1, ItemType: "a", Quantity: 1, CreatedAt: t0},
		{Id: 2, UserId: 2, ItemId: 1, ItemType: "a", Quantity: 1, CreatedAt: t0},
		{Id: 3, UserId: 3, ItemId: 1, ItemType: "a", Quantity: 1, CreatedAt: t0 + 1},
	}
	for _, limit := range []int32{0, -1, math.MinInt32} {
		resp, err := h.MergeLatest(context.Background(), &combo.MergeLatestRequest{ActivityId: 7, Records: rows, Limit: limit})
		if err != nil || len(resp.Records) != 3 {
			t.Fatalf("limit %d: %+v %v, want all 3 records", limit, resp, err)
		}
	}
	resp, err := h.MergeLatest(context.Background(), &combo.MergeLatestRequest{ActivityId: 7, Records: rows, Limit: 2})
	if err != nil || len(resp.Records) != 2 || resp.Records[0].Id != 3 || resp.Records[1].Id != 2 {
		t.Fatalf("limit 2: %+v %v, want the newest two, ids 3 and 2", resp, err)
	}
}

// Redis unavailable (repo.ErrUnavailable, wrapped as the repo does) is
// UNAVAILABLE, which callers retry elsewhere, and counted so, on both
// RPCs; pinned before only by the root package's Redis-down test.
func TestAStoreUnavailableIsUnavailable(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	h := New(&scriptedStore{fail: fmt.Errorf("repo.Report: %w: dial tcp: connection refused", repo.ErrUnavailable)},
		3*time.Second, m, zap.NewNop())
	for name, call := range reportCalls(h) {
		var ce *combo.ComboError
		if err := call(); !errors.As(err, &ce) || ce.Code != CodeUnavailable {
			t.Errorf("%s with Redis unavailable: %v, want a ComboError of code %d", name, err, CodeUnavailable)
		}
	}
	if n := testutil.ToFloat64(m.Reports.WithLabelValues(metrics.OutcomeUnavailable)); n != 3 {
		t.Fatalf("reports counted unavailable: %v, want 3", n)
	}
}

// Each report RPC leaves the drain gate as it returns, failed or not: a call
// that did not made Drain wait out its whole deadline at every stop.
func TestDrainReturnsOnceTheCallsHaveReturned(t *testing.T) {
	for name, fail := range map[string]error{"answered": nil, "failed": errors.New("boom")} {
		h := New(&scriptedStore{fail: fail}, 3*time.Second, metrics.New(prometheus.NewRegistry()), zap.NewNop())
		_, _ = h.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: contributionWithID(1)})
		_, _ = h.ReportContributions(context.Background(), &combo.ReportContributionsRequest{
			Contributions: []*combo.Contribution{contributionWithID(2)}})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := h.Drain(ctx); err != nil {
			t.Errorf("%s calls: Drain = %v, want nil at once", name, err)
		}
		cancel()
	}
}

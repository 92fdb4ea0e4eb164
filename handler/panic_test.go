package handler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// panickingStore panics in Report, as a bug in the report path outside the
// repo's shared pipeline (which recovers its own) would.
type panickingStore struct{}

func (panickingStore) Report(context.Context, []*combo.Contribution) ([]repo.ReportResult, error) {
	panic("store boom")
}

// panickingCounter and panickingHistogram panic when counted into: a bug
// in the handler's own work after the store answered (MergeLatest's merge,
// building an answer).
type panickingCounter struct{ prometheus.Counter }

func (panickingCounter) Add(float64) { panic("counter boom") }

type panickingHistogram struct{ prometheus.Histogram }

func (panickingHistogram) Observe(float64) { panic("histogram boom") }

// A panic in a handler method is the handler's to recover, like a report
// pipeline's: left to Kitex, it reached no combo_* metric (no alert fired)
// and the caller got Kitex's generic error, not the ComboError INTERNAL
// CONTRACT.md §1 promises. Each call answers code 3 without the panic's
// text, counts combo_loop_panics_total{loop="rpc_handler"} once and its
// reports (none for MergeLatest) internal, unless they were already
// counted by their outcome, and logs one error line with the stack.
func TestAHandlerPanicIsInternal(t *testing.T) {
	merge := &combo.MergeLatestRequest{ActivityId: 7, Records: []*combo.ContributionRecord{nil,
		{Id: 1, UserId: 42, ItemId: 3, ItemType: "rose", Quantity: 1, CreatedAt: 1732950000000}}}
	for _, tc := range []struct {
		name     string
		store    Store
		metrics  func(*metrics.Metrics) // breaks a collector
		call     func(context.Context, *Handler) error
		internal float64        // reports counted internal
		ok       float64        // reports counted ok
		site     string         // in the logged stack
		names    map[string]any // the line's fields naming the call's reports
	}{
		{name: "ReportContribution in the store", store: panickingStore{}, internal: 1, site: "panickingStore.Report",
			names: map[string]any{"activity": int64(7), "user": int64(42), "id": int64(1)},
			call: func(ctx context.Context, h *Handler) error {
				_, err := h.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: contributionWithID(1)})
				return err
			}},
		{name: "ReportContributions in the store", store: panickingStore{}, internal: 2, site: "panickingStore.Report",
			names: map[string]any{"batch": int64(2), "activity": int64(7), "user": int64(42), "id": int64(1)},
			call: func(ctx context.Context, h *Handler) error {
				_, err := h.ReportContributions(ctx, &combo.ReportContributionsRequest{
					Contributions: []*combo.Contribution{contributionWithID(1), contributionWithID(2)}})
				return err
			}},
		// Counted ok before the panic (Redis counted them, and they are
		// pushed): not counted again as internal.
		{name: "ReportContributions after counting", store: &scriptedStore{}, ok: 2, site: "panickingHistogram.Observe",
			metrics: func(m *metrics.Metrics) { m.ReportAge = panickingHistogram{} },
			call: func(ctx context.Context, h *Handler) error {
				_, err := h.ReportContributions(ctx, &combo.ReportContributionsRequest{
					Contributions: []*combo.Contribution{contributionWithID(1), contributionWithID(2)}})
				return err
			}},
		{name: "MergeLatest", store: &scriptedStore{}, site: "panickingCounter.Add", names: map[string]any{"activity": int64(7)},
			metrics: func(m *metrics.Metrics) { m.MergeRowsSkipped = panickingCounter{} },
			call: func(ctx context.Context, h *Handler) error {
				_, err := h.MergeLatest(ctx, merge)
				return err
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.New(prometheus.NewRegistry())
			if tc.metrics != nil {
				tc.metrics(m)
			}
			core, logs := observer.New(zapcore.DebugLevel)
			h := New(tc.store, 3*time.Second, m, zap.New(core))
			err := func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("the panic went past the handler: %v", p)
					}
				}()
				return tc.call(context.Background(), h)
			}()
			var ce *combo.ComboError
			if !errors.As(err, &ce) || ce.Code != 3 {
				t.Fatalf("answer %v, want a ComboError of code 3 (INTERNAL)", err)
			}
			if strings.Contains(ce.Message, "boom") {
				t.Errorf("answer %q carries the panic's text", ce.Message)
			}
			if n := testutil.ToFloat64(m.LoopPanics.WithLabelValues("rpc_handler")); n != 1 {
				t.Errorf("combo_loop_panics_total{loop=rpc_handler} = %v, want 1", n)
			}
			for outcome, want := range map[string]float64{metrics.OutcomeInternal: tc.internal, metrics.OutcomeOK: tc.ok} {
				if n := testutil.ToFloat64(m.Reports.WithLabelValues(outcome)); n != want {
					t.Errorf("combo_reports_total{outcome=%s} = %v, want %v", outcome, n, want)
				}
			}
			lines := logs.FilterLevelExact(zapcore.ErrorLevel).All()
			if len(lines) != 1 || !strings.Contains(lines[0].Message, "panic") {
				var msgs []string
				for _, l := range lines {
					msgs = append(msgs, l.Message)
				}
				t.Fatalf("error lines %q, want one about the panic", msgs)
			}
			fields := lines[0].ContextMap()
			if p, _ := fields["panic"].(string); !strings.Contains(p, "boom") {
				t.Errorf("logged panic %v, want the panic's value", fields["panic"])
			}
			if s, _ := fields["stack"].(string); !strings.Contains(s, tc.site) {
				t.Errorf("logged stack %q does not name where it panicked (%s)", s, tc.site)
			}
			// The reports the panic hit, to reproduce it with.
			for k, want := range tc.names {
				if fields[k] != want {
					t.Errorf("logged %s=%v (%T), want %v: the line names the call's reports as fail's other lines do",
						k, fields[k], fields[k], want)
				}
			}
			if n := logs.Len(); n != 1 {
				t.Errorf("%d lines logged, want 1: %v", n, logs.All())
			}
		})
	}
}

// brokenErr is an error whose Error panics, as a typed nil pointer's
// does: a store bug that returns one where it meant nil.
type brokenErr struct{ msg string }

func (e *brokenErr) Error() string { return e.msg }

// A panic inside fail (here building the answer's message from an error
// whose Error panics) must not count the call's reports twice: by their
// outcome in fail, then as internal when recoverPanic answers the call.
// fail reads the message before it counts: one report, counted once.
func TestAPanicInFailCountsTheReportsOnce(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	h := New(&scriptedStore{fail: (*brokenErr)(nil)}, 3*time.Second, m, zap.NewNop())
	_, err := h.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: contributionWithID(1)})
	var ce *combo.ComboError
	if !errors.As(err, &ce) || ce.Code != CodeInternal {
		t.Fatalf("answer %v, want a ComboError of code 3 (INTERNAL)", err)
	}
	var total float64
	for _, o := range []string{metrics.OutcomeOK, metrics.OutcomeDuplicate, metrics.OutcomeDegraded, metrics.OutcomeInvalid,
		metrics.OutcomeUnavailable, metrics.OutcomeInternal, metrics.OutcomeCanceled, metrics.OutcomeDraining} {
		total += testutil.ToFloat64(m.Reports.WithLabelValues(o))
	}
	if total != 1 {
		t.Errorf("combo_reports_total summed over outcomes = %v for one report, want 1", total)
	}
}

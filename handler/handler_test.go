package handler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// degradingStore answers every report degraded, for cause.
type degradingStore struct{ cause error }

func (s degradingStore) Report(_ context.Context, cs []*combo.Contribution) ([]repo.ReportResult, error) {
	res := make([]repo.ReportResult, len(cs))
	for i, c := range cs {
		res[i] = repo.ReportResult{Outcome: repo.Degraded, WindowID: c.Id, WindowQuantity: c.Quantity, Cause: s.cause}
	}
	return res, nil
}

// The warning for degraded reports says why the aggregation failed, so an
// operator can tell a full stream from a Redis refusing writes.
func TestDegradedWarningNamesTheCause(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	cause := errors.New("report script: STREAMFULL the stream holds redis.stream_maxlen (10000) windows waiting to close")
	h := New(degradingStore{cause}, 3*time.Second, metrics.New(prometheus.NewRegistry()), zap.New(core))
	c := &combo.Contribution{Id: 1, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose", Quantity: 1, CreatedAt: 1732950000000}
	resp, err := h.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
	if err != nil || !resp.Degraded {
		t.Fatalf("report: %+v %v", resp, err)
	}
	entries := logs.FilterMessageSnippet("published on their own").All()
	if len(entries) != 1 {
		t.Fatalf("%d warnings, want 1", len(entries))
	}
	if got, ok := entries[0].ContextMap()["cause"]; !ok || got != cause.Error() {
		t.Fatalf("warning fields %v, want cause %q", entries[0].ContextMap(), cause)
	}
}

// How late reports arrive is observed for every report counted, single or
// in a batch; an invalid call, a refused one and a duplicate observe
// nothing (a retried contribution would otherwise count at each attempt).
func TestReportAgeIsObserved(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := &scriptedStore{}
	h := New(st, 3*time.Second, metrics.New(reg), zap.NewNop())
	now := time.Now().UnixMilli()
	gift := func(id, ageMs int64) *combo.Contribution {
		return &combo.Contribution{Id: id, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose", Quantity: 1, CreatedAt: now - ageMs}
	}
	ctx := context.Background()
	if _, err := h.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: gift(1, 20_000)}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ReportContributions(ctx, &combo.ReportContributionsRequest{Contributions: []*combo.Contribution{gift(2, 0), gift(3, -5_000)}}); err != nil {
		t.Fatal(err)
	}
	bad := gift(4, 0)
	bad.Quantity = 0
	if _, err := h.ReportContributions(ctx, &combo.ReportContributionsRequest{Contributions: []*combo.Contribution{gift(5, 0), bad}}); err == nil {
		t.Fatal("an invalid batch was taken")
	}
	st.fail = repo.ErrUnavailable
	if _, err := h.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: gift(6, 30_000)}); err == nil {
		t.Fatal("a refused report was answered")
	}
	st.fail = nil
	if _, err := h.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: gift(1, 20_000)}); err != nil {
		t.Fatal(err) // id 1 again: a duplicate
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "combo_report_age_seconds" {
			continue
		}
		hist := mf.GetMetric()[0].GetHistogram()
		// 20 s late, and two on time (one from a clock 5 s ahead: 0).
		if hist.GetSampleCount() != 3 || hist.GetSampleSum() < 20 || hist.GetSampleSum() > 25 {
			t.Fatalf("count %d sum %.3f, want 3 reports summing to about 20 s", hist.GetSampleCount(), hist.GetSampleSum())
		}
		return
	}
	t.Fatal("no combo_report_age_seconds")
}

// scriptedStore counts each id once (later ones are duplicates), or fails
// every call with fail.
type scriptedStore struct {
	fail error
	seen map[int64]bool
}

func (s *scriptedStore) Report(_ context.Context, cs []*combo.Contribution) ([]repo.ReportResult, error) {
	if s.fail != nil {
		return nil, s.fail
	}
	if s.seen == nil {
		s.seen = map[int64]bool{}
	}
	res := make([]repo.ReportResult, len(cs))
	for i, c := range cs {
		res[i] = repo.ReportResult{Outcome: repo.Opened, WindowID: c.Id, WindowQuantity: c.Quantity}
		if s.seen[c.Id] {
			res[i] = repo.ReportResult{Outcome: repo.Duplicate}
		}
		s.seen[c.Id] = true
	}
	return res, nil
}

// At debug each report gets its line, in a batch too (client.Reporter
// sends every report in one); at info no report gets one.
func TestDebugLogsEachReport(t *testing.T) {
	gift := func(id int64) *combo.Contribution {
		return &combo.Contribution{Id: id, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose", Quantity: 1, CreatedAt: 1732950000000}
	}
	for _, tc := range []struct {
		name  string
		level zapcore.Level
		batch bool
		want  []int64 // ids with a "reported" line
	}{
		{"single at debug", zapcore.DebugLevel, false, []int64{1}},
		{"batch at debug", zapcore.DebugLevel, true, []int64{1, 2, 3}},
		{"single at info", zapcore.InfoLevel, false, nil},
		{"batch at info", zapcore.InfoLevel, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(tc.level)
			// Sampled, as main builds the handler's logger.
			h := New(&scriptedStore{}, 3*time.Second, metrics.New(prometheus.NewRegistry()), logging.Sampled(zap.New(core), nil))
			ctx := context.Background()
			if tc.batch {
				req := &combo.ReportContributionsRequest{Contributions: []*combo.Contribution{gift(1), gift(2), gift(3)}}
				if _, err := h.ReportContributions(ctx, req); err != nil {
					t.Fatal(err)
				}
			} else if _, err := h.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: gift(1)}); err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, e := range logs.FilterMessage("reported").All() {
				f := e.ContextMap()
				if f["activity"] != int64(7) || f["user"] != int64(42) || f["window"] != f["id"] {
					t.Errorf("line fields %v, want activity 7, user 42 and its window", f)
				}
				got = append(got, f["id"].(int64))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("reported lines for ids %v, want %v", got, tc.want)
			}
		})
	}
}

// MergeLatest leaves out the rows a report would be refused for, counts
// them and warns once per call naming the first; a call with no valid row
// answers an empty feed, unless every row is refused alike for a column
// the caller misread (times in the wrong unit, or a column not read at
// all): that is refused, naming the first row's field.
func TestMergeLatestSkipsRowsAReportWouldBeRefusedFor(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	m := metrics.New(prometheus.NewRegistry())
	h := New(&scriptedStore{}, 3*time.Second, m, zap.New(core))
	rec := func(id int64, at int64) *combo.ContributionRecord {
		return &combo.ContributionRecord{Id: id, UserId: 42, ItemId: 3, ItemType: "rose", Quantity: 1, CreatedAt: at}
	}
	const t0 = 1732950000000
	badQty := rec(9, t0+20)
	badQty.Quantity = 0
	resp, err := h.MergeLatest(context.Background(), &combo.MergeLatestRequest{ActivityId: 7,
		Records: []*combo.ContributionRecord{rec(1, t0), rec(2, t0+1000), rec(3, t0/1000), badQty}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Records) != 1 || resp.Records[0].Id != 1 || resp.Records[0].Quantity != 2 {
		t.Fatalf("merged %+v, want the two valid rows as one record of id 1", resp.Records)
	}
	if got := testutil.ToFloat64(m.MergeRowsSkipped); got != 2 {
		t.Fatalf("combo_merge_rows_skipped_total %v, want 2", got)
	}
	warns := logs.FilterMessageSnippet("left out").All()
	if len(warns) != 1 || warns[0].ContextMap()["skipped"] != int64(2) ||
		!strings.HasPrefix(warns[0].ContextMap()["first"].(string), "records[2].created_at") {
		t.Fatalf("warnings %v, want one naming records[2].created_at and 2 skipped", warns)
	}

	// Only rows the DB kept and the reports were refused for: the push
	// feed showed nothing, and so does the poll feed, without failing.
	resp, err = h.MergeLatest(context.Background(), &combo.MergeLatestRequest{ActivityId: 7,
		Records: []*combo.ContributionRecord{rec(3, t0/1000), badQty}})
	if err != nil || resp == nil || len(resp.Records) != 0 {
		t.Fatalf("no valid row: %+v, %v, want an empty feed", resp, err)
	}
	if got := testutil.ToFloat64(m.MergeRowsSkipped); got != 4 {
		t.Fatalf("combo_merge_rows_skipped_total %v, want 4", got)
	}

	// Every row's time in seconds: the caller's mistake, named.
	badID := rec(0, t0/1000) // refused for its id first; its time is wrong too
	_, err = h.MergeLatest(context.Background(), &combo.MergeLatestRequest{ActivityId: 7,
		Records: []*combo.ContributionRecord{badID, rec(3, t0/1000)}})
	var ce *combo.ComboError
	if !errors.As(err, &ce) || ce.Code != CodeInvalidArgument || !strings.HasPrefix(ce.Message, "records[0].created_at: must be unix milliseconds") {
		t.Fatalf("every row in seconds: %v, want INVALID_ARGUMENT naming records[0].created_at", err)
	}
	if got := testutil.ToFloat64(m.MergeRowsSkipped); got != 4 {
		t.Fatalf("a refused call counted skipped rows: %v", got)
	}

	// No row's id read (0 in every row, which no DB row holds): also the
	// caller's mistake, named.
	_, err = h.MergeLatest(context.Background(), &combo.MergeLatestRequest{ActivityId: 7,
		Records: []*combo.ContributionRecord{rec(0, t0), rec(0, t0+1)}})
	if !errors.As(err, &ce) || ce.Code != CodeInvalidArgument || !strings.HasPrefix(ce.Message, "records[0].id: must be > 0, got 0 in every row") {
		t.Fatalf("every id unset: %v, want INVALID_ARGUMENT naming records[0].id", err)
	}
	// A page of one row the DB holds and the push path refused (a guest's
	// user_id 0): an empty feed, as the pushes were, not an error.
	guest := rec(5, t0)
	guest.UserId = 0
	if resp, err := h.MergeLatest(context.Background(), &combo.MergeLatestRequest{ActivityId: 7,
		Records: []*combo.ContributionRecord{guest}}); err != nil || len(resp.Records) != 0 {
		t.Fatalf("a guest's row alone: %+v, %v, want an empty feed", resp, err)
	}
}

// A store failing with the caller's context canceled answers UNAVAILABLE,
// counted canceled, as for repo.ErrCallerGone: not INTERNAL, whether or
// not the store wrapped it.
func TestCanceledCallerIsNoInternalError(t *testing.T) {
	for _, fail := range []error{context.Canceled, fmt.Errorf("repo.Report: %w: %w", repo.ErrCallerGone, context.Canceled)} {
		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		h := New(&scriptedStore{fail: fail}, 3*time.Second, m, zap.NewNop())
		c := &combo.Contribution{Id: 1, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose", Quantity: 1, CreatedAt: 1732950000000}
		_, err := h.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
		var ce *combo.ComboError
		if !errors.As(err, &ce) || ce.Code != CodeUnavailable {
			t.Errorf("store failing %v: %v, want UNAVAILABLE", fail, err)
		}
		if n := testutil.ToFloat64(m.Reports.WithLabelValues(metrics.OutcomeCanceled)); n != 1 {
			t.Errorf("store failing %v: %v reports counted canceled, want 1", fail, n)
		}
	}
}

// A replica that is stopping answers UNAVAILABLE (the call should go to
// another replica), not INTERNAL, which a caller other than client.Reporter
// may take as final: every deploy would drop the reports in flight.
func TestDrainingReplicaAnswersUnavailable(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	h := New(&scriptedStore{}, 3*time.Second, m, zap.NewNop())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // nothing in flight: at once
	defer cancel()
	if err := h.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	c := &combo.Contribution{Id: 1, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose", Quantity: 1, CreatedAt: 1732950000000}
	_, err := h.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
	var ce *combo.ComboError
	if !errors.As(err, &ce) || ce.Code != CodeUnavailable {
		t.Fatalf("report to a draining replica: %v, want UNAVAILABLE", err)
	}
	_, err = h.ReportContributions(context.Background(), &combo.ReportContributionsRequest{Contributions: []*combo.Contribution{c}})
	if !errors.As(err, &ce) || ce.Code != CodeUnavailable {
		t.Fatalf("batch to a draining replica: %v, want UNAVAILABLE", err)
	}
	if n := testutil.ToFloat64(m.Reports.WithLabelValues(metrics.OutcomeDraining)); n != 2 {
		t.Errorf("%v reports counted draining, want 2", n)
	}
}

// A refused report is logged, naming the field: a caller that regressed
// (times in seconds) has every report refused, and the count alone does
// not say why. The logger in main is sampled, so a flood writes little.
func TestInvalidReportIsLoggedNamingTheField(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	m := metrics.New(prometheus.NewRegistry())
	h := New(&scriptedStore{}, 3*time.Second, m, zap.New(core))
	c := &combo.Contribution{Id: 1, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose", Quantity: 1, CreatedAt: 1732950000}
	if _, err := h.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c}); err == nil {
		t.Fatal("a report in seconds was taken")
	}
	es := logs.FilterMessage("request refused: invalid argument").All()
	if len(es) != 1 || !strings.HasPrefix(es[0].ContextMap()["error"].(string), "contribution.created_at:") {
		t.Fatalf("logged %v, want one line naming created_at", logs.All())
	}
}

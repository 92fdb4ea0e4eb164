package handler

import (
	"context"
	"errors"
	"fmt"
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

// Tests pinning what a second mutation sweep of the handler found no test
// for: what a caller reads off each answer, and what an operator counts.

// Every way a report RPC fails answers the code CONTRACT.md §1 gives it,
// as the literal the wire carries (the tests before compared with the
// named constants, so a constant changed with them: UNAVAILABLE sent as
// 3 passed), on a single report and on a batch; each report of the call
// is counted under its outcome, and the one line it logs is at the level
// an operator filters on. A report whose caller's own RPC deadline passed
// is the caller's, not Redis's: counted canceled at debug, never
// unavailable with a warning (which fires the Redis alert).
func TestEachFailureAnswersItsContractCode(t *testing.T) {
	const noLine = zapcore.InvalidLevel
	for _, tc := range []struct {
		name    string
		fail    error // the store's
		drain   bool  // Drain first
		bad     bool  // the reports sent are invalid (quantity 0)
		code    int32
		outcome string
		level   zapcore.Level // of the line each call logs
		line    string
	}{
		{name: "invalid", bad: true, code: 1, outcome: metrics.OutcomeInvalid,
			level: zapcore.InfoLevel, line: "request refused: invalid argument"},
		{name: "draining", drain: true, code: 2, outcome: metrics.OutcomeDraining, level: noLine},
		{name: "caller gave up", fail: context.Canceled, code: 2, outcome: metrics.OutcomeCanceled,
			level: zapcore.DebugLevel, line: "report abandoned by its caller"},
		{name: "caller's deadline passed", fail: fmt.Errorf("repo.Report: %w: %w", repo.ErrCallerGone, context.DeadlineExceeded),
			code: 2, outcome: metrics.OutcomeCanceled, level: zapcore.DebugLevel, line: "report abandoned by its caller"},
		{name: "redis unavailable", fail: fmt.Errorf("repo.Report: %w: i/o timeout", repo.ErrUnavailable),
			code: 2, outcome: metrics.OutcomeUnavailable, level: zapcore.WarnLevel, line: "report refused: redis unavailable"},
		{name: "deadline exceeded", fail: context.DeadlineExceeded,
			code: 2, outcome: metrics.OutcomeUnavailable, level: zapcore.WarnLevel, line: "report refused: redis unavailable"},
		{name: "unknown", fail: errors.New("boom"), code: 3, outcome: metrics.OutcomeInternal,
			level: zapcore.ErrorLevel, line: "report failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			m := metrics.New(prometheus.NewRegistry())
			h := New(&scriptedStore{fail: tc.fail}, 3*time.Second, m, zap.New(core))
			if tc.drain {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := h.Drain(ctx); err != nil {
					t.Fatal(err)
				}
			}
			c := contributionWithID(1)
			if tc.bad {
				c.Quantity = 0
			}
			_, single := h.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
			_, batch := h.ReportContributions(context.Background(), &combo.ReportContributionsRequest{
				Contributions: []*combo.Contribution{contributionWithID(2), c}})
			// The field each message names, when the reports are invalid.
			for _, call := range []struct {
				name, field string
				err         error
			}{{"ReportContribution", "contribution.quantity:", single}, {"ReportContributions", "contributions[1].quantity:", batch}} {
				var ce *combo.ComboError
				if !errors.As(call.err, &ce) || ce.Code != tc.code || tc.bad && !strings.HasPrefix(ce.Message, call.field) {
					t.Errorf("%s: %v, want a ComboError of code %d (naming %s if invalid)", call.name, call.err, tc.code, call.field)
				}
			}
			if n := testutil.ToFloat64(m.Reports.WithLabelValues(tc.outcome)); n != 3 {
				t.Errorf("combo_reports_total{outcome=%q} %v, want 3 (one single report, a batch of two)", tc.outcome, n)
			}
			if tc.level == noLine {
				if n := logs.Len(); n != 0 {
					t.Errorf("logged %v, want nothing", logs.All())
				}
				return
			}
			if es := logs.All(); len(es) != 2 || es[0].Level != tc.level || es[1].Level != tc.level ||
				es[0].Message != tc.line || es[1].Message != tc.line {
				t.Errorf("logged %v, want one %q line at %s per call", es, tc.line, tc.level)
			}
		})
	}
}

// outcomeStore answers every call with its results, one per report.
type outcomeStore []repo.ReportResult

func (s outcomeStore) Report(_ context.Context, cs []*combo.Contribution) ([]repo.ReportResult, error) {
	if len(cs) != len(s) {
		return nil, fmt.Errorf("outcomeStore: %d reports, want %d", len(cs), len(s))
	}
	return s, nil
}

// Each report of a batch is counted by its outcome: a report that opened
// a window or joined one is ok, a duplicate is not (it changed nothing),
// a degraded one is degraded; one warning for the call, naming the count
// and the first degraded report's cause.
func TestReportsAreCountedByOutcome(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	m := metrics.New(prometheus.NewRegistry())
	first, second := errors.New("NOREPLICAS first"), errors.New("STREAMFULL second")
	h := New(outcomeStore{
		{Outcome: repo.Opened, WindowID: 1, WindowQuantity: 1},
		{Outcome: repo.Joined, WindowID: 1, WindowQuantity: 2},
		{Outcome: repo.Duplicate},
		{Outcome: repo.Degraded, WindowID: 4, WindowQuantity: 1, Cause: first},
		{Outcome: repo.Degraded, WindowID: 5, WindowQuantity: 1, Cause: second},
	}, 3*time.Second, m, zap.New(core))
	cs := make([]*combo.Contribution, 5)
	for i := range cs {
		cs[i] = contributionWithID(int64(i + 1))
	}
	if _, err := h.ReportContributions(context.Background(), &combo.ReportContributionsRequest{Contributions: cs}); err != nil {
		t.Fatal(err)
	}
	for outcome, want := range map[string]float64{metrics.OutcomeOK: 2, metrics.OutcomeDuplicate: 1, metrics.OutcomeDegraded: 2} {
		if n := testutil.ToFloat64(m.Reports.WithLabelValues(outcome)); n != want {
			t.Errorf("combo_reports_total{outcome=%q} %v, want %v", outcome, n, want)
		}
	}
	if n := testutil.ToFloat64(m.WindowsOpened); n != 1 {
		t.Errorf("combo_windows_opened_total %v, want 1", n)
	}
	ws := logs.FilterMessageSnippet("published on their own").All()
	if len(ws) != 1 || ws[0].ContextMap()["count"] != int64(2) || ws[0].ContextMap()["cause"] != first.Error() {
		t.Fatalf("warnings %v, want one of count 2 naming the first cause %q", ws, first)
	}
}

// A MergeLatest limit of 1 (the latest gift alone) answers the newest
// merged record only: the limit tests before took 2, and a limit read as
// "above 1" passed them and answered every record.
func TestMergeLatestLimitOneAnswersTheNewest(t *testing.T) {
	h := New(&scriptedStore{}, 3*time.Second, metrics.New(prometheus.NewRegistry()), zap.NewNop())
	const t0 = 1732950000000
	resp, err := h.MergeLatest(context.Background(), &combo.MergeLatestRequest{ActivityId: 7, Limit: 1, Records: []*combo.ContributionRecord{
		{Id: 1, UserId: 1, ItemId: 1, ItemType: "a", Quantity: 1, CreatedAt: t0},
		{Id: 3, UserId: 2, ItemId: 1, ItemType: "a", Quantity: 1, CreatedAt: t0 + 5},
		{Id: 2, UserId: 3, ItemId: 1, ItemType: "a", Quantity: 1, CreatedAt: t0 + 1},
	}})
	if err != nil || len(resp.Records) != 1 || resp.Records[0].Id != 3 {
		t.Fatalf("limit 1: %+v %v, want the newest record alone, id 3", resp, err)
	}
}

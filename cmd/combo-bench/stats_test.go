package main

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

func TestPercentileNearestRank(t *testing.T) {
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond // unsorted on purpose
	}
	s := summarize(ds)
	if s.N != 100 || s.P50 != 50 || s.P99 != 99 || s.Max != 100 || s.Mean != 50.5 {
		t.Fatalf("summarize = %+v", s)
	}
	for _, tc := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{[]time.Duration{7}, 99, 7},
		{[]time.Duration{1, 2, 3}, 50, 2},
		{[]time.Duration{1, 2, 3}, 0, 1},
		{[]time.Duration{1, 2, 3}, 100, 3},
	} {
		if got := percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
		}
	}
}

func TestBudget(t *testing.T) {
	b := newBudget(5)
	if got := []int{b.take(3), b.take(3), b.take(3)}; got[0] != 3 || got[1] != 2 || got[2] != 0 {
		t.Fatalf("takes = %v, want [3 2 0]", got)
	}
	if newBudget(0).take(50) != 50 {
		t.Fatal("n=0 must be unlimited")
	}
}

// recordedRun builds what a run records: one window on key a (ids 1, 2), one on
// key b (id 3), and a failed RPC on key c (id 4).
func recordedRun(t0 time.Time) (*recorder, comboKey, comboKey, comboKey) {
	a := comboKey{Activity: 1, User: 10, ItemType: "rose"}
	b := comboKey{Activity: 1, User: 11, ItemType: "超级火箭"}
	c := comboKey{Activity: 1, User: 12, ItemType: "crown:{gold} 1"}
	contrib := func(id int64, k comboKey, q int32) *combo.Contribution {
		return &combo.Contribution{Id: id, ActivityId: k.Activity, UserId: k.User, ItemType: k.ItemType, Quantity: q}
	}
	answer := func(window int64, total int32) []*combo.ReportContributionResponse {
		return []*combo.ReportContributionResponse{{WindowId: window, WindowQuantity: total}}
	}
	r := newRecorder()
	r.observe(t0, time.Millisecond, []*combo.Contribution{contrib(1, a, 2)}, answer(1, 2), nil)
	r.observe(t0.Add(time.Second), time.Millisecond, []*combo.Contribution{contrib(2, a, 3)}, answer(1, 5), nil)
	r.observe(t0.Add(2*time.Second), time.Millisecond, []*combo.Contribution{contrib(3, b, 4)}, answer(3, 4), nil)
	r.observe(t0, time.Millisecond, []*combo.Contribution{contrib(4, c, 1)}, nil, errors.New("timeout"))
	return r, a, b, c
}

func TestCheckPushesConserved(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rec, a, b, _ := recordedRun(t0)
	if rec.opened != 2 || rec.acked != 3 || rec.errors != 1 {
		t.Fatalf("opened %d acked %d errors %d, want 2 3 1", rec.opened, rec.acked, rec.errors)
	}
	base := 3200 * time.Millisecond
	W, grace := 3*time.Second, 200*time.Millisecond
	got := checkPushes(rec, []pushed{
		{Recv: t0.Add(base + 40*time.Millisecond), WindowID: 1, Key: a, Quantity: 5},
		{Recv: t0.Add(2*time.Second + base + 60*time.Millisecond), WindowID: 3, Key: b, Quantity: 4},
	}, W, grace)
	if !got.Conserved || got.WindowsPushed != 2 || got.WindowsMissing != 0 || got.KeysMismatched != 0 {
		t.Fatalf("check = %+v, want conserved", got)
	}
	// c's only RPC failed and nothing of c was pushed: 0 = 0, but checked
	// over nothing acknowledged, so uncertain, not exact.
	if got.KeysUncertain != 1 {
		t.Fatalf("keys uncertain %d, want 1 (the key whose RPC failed)", got.KeysUncertain)
	}
	if got.Lag.P50 != 40 || got.Lag.Max != 60 {
		t.Fatalf("lag = %+v, want p50 40 max 60", got.Lag)
	}
	if got.QtyReported != 9 || got.QtyPushed != 9 {
		t.Fatalf("qty reported %d pushed %d, want 9 9", got.QtyReported, got.QtyPushed)
	}
}

func TestCheckPushesFindsLossDuplicatesAndDrift(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rec, a, _, c := recordedRun(t0)
	got := checkPushes(rec, []pushed{
		{Recv: t0, WindowID: 1, Key: a, Quantity: 4}, // one short
		{Recv: t0, WindowID: 1, Key: a, Quantity: 1}, // and pushed twice
		{Recv: t0, WindowID: 4, Key: c, Quantity: 1}, // the failed RPC did count
	}, 0, 0)
	if got.Conserved {
		t.Fatal("a run with a window pushed twice and one missing passed")
	}
	if got.PushedTwice != 1 || got.WindowsMissing != 1 || got.UnknownPushes != 1 {
		t.Fatalf("twice %d missing %d unknown %d, want 1 1 1", got.PushedTwice, got.WindowsMissing, got.UnknownPushes)
	}
	// Key a: 4+1 pushed == 5 reported (sums agree although split); key b:
	// 0 of 4; key c: 1 pushed of 0 acked + 1 uncertain is explained.
	if got.KeysMismatched != 1 || got.KeysUncertain != 1 || got.KeysChecked != 3 {
		t.Fatalf("mismatched %d uncertain %d checked %d, want 1 1 3", got.KeysMismatched, got.KeysUncertain, got.KeysChecked)
	}
}

// Every id a run sends is new: a report answered duplicate on a key whose
// RPCs were all answered was dropped by the service, neither counted nor
// pushed, and the per-key sums still agreed. On a key with a failed RPC a
// duplicate is a retry of what may have been counted, and expected.
func TestCheckPushesFindsAFreshReportAnsweredDuplicate(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rec, a, b, c := recordedRun(t0)
	dup := []*combo.ReportContributionResponse{{Duplicate: true}}
	rec.observe(t0, time.Millisecond, []*combo.Contribution{{Id: 5, ActivityId: a.Activity, UserId: a.User, ItemType: a.ItemType, Quantity: 3}}, dup, nil)
	rec.observe(t0, time.Millisecond, []*combo.Contribution{{Id: 4, ActivityId: c.Activity, UserId: c.User, ItemType: c.ItemType, Quantity: 1}}, dup, nil)
	pushes := []pushed{
		{Recv: t0.Add(3240 * time.Millisecond), WindowID: 1, Key: a, Quantity: 5},
		{Recv: t0.Add(5260 * time.Millisecond), WindowID: 3, Key: b, Quantity: 4},
		{Recv: t0.Add(3240 * time.Millisecond), WindowID: 4, Key: c, Quantity: 1},
	}
	got := checkPushes(rec, pushes, 3*time.Second, 200*time.Millisecond)
	if got.Conserved || got.UnexpectedDuplicates != 1 {
		t.Fatalf("check = %+v, want not conserved, one unexpected duplicate (key a's; key c's follows a failed RPC)", got)
	}
	if merged := mergeAll([]*recorder{rec}); merged.duplicated[a] != 1 || merged.duplicated[c] != 1 {
		t.Fatalf("merged duplicates per key %v, want one on a and one on c", merged.duplicated)
	}
}

func TestRecorderMergeKeepsEarliestStart(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	x, y := newRecorder(), newRecorder()
	x.windowStart[9] = t0.Add(time.Second)
	y.windowStart[9] = t0
	all := mergeAll([]*recorder{x, y})
	if !all.windowStart[9].Equal(t0) {
		t.Fatalf("window start = %v, want %v", all.windowStart[9], t0)
	}
}

// CONTRACT.md §3: a window is published no earlier than W after its first
// report arrived. A push received before W has passed since that report's
// RPC started (lag below -grace) breaks it for certain.
func TestCheckPushesFindsEarlyPushes(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rec, a, b, _ := recordedRun(t0)
	W, grace := 3*time.Second, 200*time.Millisecond
	got := checkPushes(rec, []pushed{
		{Recv: t0.Add(W + grace + 5*time.Millisecond), WindowID: 1, Key: a, Quantity: 5},
		{Recv: t0.Add(2*time.Second + 10*time.Millisecond), WindowID: 3, Key: b, Quantity: 4}, // 10 ms after its report
	}, W, grace)
	if got.EarlyPushes != 1 || got.Conserved {
		t.Fatalf("early pushes %d, conserved %v: want 1 and false (window 3 pushed 10 ms after its first report, W = 3 s)",
			got.EarlyPushes, got.Conserved)
	}
	// W after the RPC started is the earliest allowed: the report arrived at
	// the service after that (the grace is the service's to use or not).
	got = checkPushes(rec, []pushed{
		{Recv: t0.Add(W), WindowID: 1, Key: a, Quantity: 5},
		{Recv: t0.Add(2*time.Second + W), WindowID: 3, Key: b, Quantity: 4},
	}, W, grace)
	if got.EarlyPushes != 0 || !got.Conserved {
		t.Fatalf("early pushes %d, conserved %v: want 0 and true", got.EarlyPushes, got.Conserved)
	}
}

// The marker member 0 of every dedupe set is no id: 8192 sets holding
// 100,000 ids have 108,192 members.
func TestBytesPerIDLeavesOutTheMarkers(t *testing.T) {
	if got := bytesPerID(1_534_470, 108_192, 8192); got < 15.34 || got > 15.35 {
		t.Fatalf("bytesPerID = %.3f, want 15.34 (1,534,470 B over 100,000 ids)", got)
	}
	if got := bytesPerID(100, 3, 3); got != 0 {
		t.Fatalf("sets holding only their markers: %v, want 0", got)
	}
}

// A window known only from a join (its opening RPC failed) and pushed does
// not stand in for one that was never pushed: missing windows are matched
// by id. Nor is its push measured from the join, which would make an
// on-time push look early.
func TestMissingWindowsAreMatchedByID(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rec, a, _, _ := recordedRun(t0) // opens windows 1 (key a) and 3 (key b)
	d := comboKey{Activity: 1, User: 13, ItemType: "lily"}
	rec.observe(t0, time.Millisecond, []*combo.Contribution{{Id: 5, ActivityId: 1, UserId: 13, ItemType: "lily", Quantity: 1}}, nil, errors.New("timeout"))
	rec.observe(t0.Add(2*time.Second), time.Millisecond, []*combo.Contribution{{Id: 6, ActivityId: 1, UserId: 13, ItemType: "lily", Quantity: 1}},
		[]*combo.ReportContributionResponse{{WindowId: 5, WindowQuantity: 2}}, nil)
	W, grace := 3*time.Second, 200*time.Millisecond
	got := checkPushes(rec, []pushed{
		{Recv: t0.Add(3240 * time.Millisecond), WindowID: 1, Key: a, Quantity: 5},
		// Window 5, on time for its first report, before the join's W.
		{Recv: t0.Add(3250 * time.Millisecond), WindowID: 5, Key: d, Quantity: 2},
	}, W, grace)
	if got.WindowsMissing != 1 || got.Conserved {
		t.Fatalf("check = %+v, want window 3 missing and not conserved", got)
	}
	if got.EarlyPushes != 0 || got.Lag.N != 1 {
		t.Fatalf("check = %+v, want no early push and one lag (window 1's)", got)
	}
}

// A window's only push that came after the check (a window opened by a
// report whose RPC failed: the check does not wait for it) is judged as it
// would have been in time, not as a window pushed twice.
func TestLateOnlyPushOfAnUncertainWindowKeepsTheRunConserved(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rec, a, b, c := recordedRun(t0) // key c's RPC failed: its window 4 may or may not exist
	W, grace := 3*time.Second, 200*time.Millisecond
	taken := []pushed{
		{Recv: t0.Add(3240 * time.Millisecond), WindowID: 1, Key: a, Quantity: 5},
		{Recv: t0.Add(5260 * time.Millisecond), WindowID: 3, Key: b, Quantity: 4},
	}
	pc := runCheck(1, rec, taken, nil, W, grace)
	col := &collector{late: map[int64][]pushed{1: {{Recv: t0.Add(9 * time.Second), WindowID: 4, Key: c, Quantity: 1}}}}
	amendLate(runs{{Pushes: &pc}}, col)
	if !pc.Conserved || pc.PushedTwice != 0 || pc.LatePushes != 1 || pc.KeysUncertain != 1 {
		t.Fatalf("after amendLate: %+v, want conserved, one late push, key c uncertain", pc)
	}
}

// Conservation is per window as well as per key: a report answered as
// joining window 1 (window_quantity 5) whose quantity is pushed in a window
// no answer announced, or windows of one key pushed with their quantities
// shifted between them, keep every key's sum equal and must still fail the
// check (the join-while-flushing race would look exactly like this).
func TestCheckPushesFindsQuantityInTheWrongWindow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	W, grace := 3*time.Second, 200*time.Millisecond
	due := t0.Add(W + grace)

	rec, a, b, _ := recordedRun(t0) // window 1 on a: 2 then 3 (total 5); window 3 on b: 4
	got := checkPushes(rec, []pushed{
		{Recv: due, WindowID: 1, Key: a, Quantity: 2}, // without the join answered as counted in it
		{Recv: due, WindowID: 2, Key: a, Quantity: 3}, // the join, as a window nobody was told of
		{Recv: due.Add(2 * time.Second), WindowID: 3, Key: b, Quantity: 4},
	}, W, grace)
	if got.KeysMismatched != 0 {
		t.Fatalf("keys mismatched %d: the setup must keep every key's sum", got.KeysMismatched)
	}
	if got.Conserved || got.WindowsMiscounted != 2 {
		t.Fatalf("window 1 pushed with 2 where its answers said 5, and an unannounced window on a key with no failed RPC: "+
			"conserved %v, miscounted %d; want false, 2", got.Conserved, got.WindowsMiscounted)
	}

	// Two announced windows of one key, their quantities swapped.
	rec, a, b, _ = recordedRun(t0)
	rec.observe(t0.Add(4*time.Second), time.Millisecond,
		[]*combo.Contribution{{Id: 5, ActivityId: a.Activity, UserId: a.User, ItemType: a.ItemType, Quantity: 1}},
		[]*combo.ReportContributionResponse{{WindowId: 5, WindowQuantity: 1}}, nil)
	got = checkPushes(rec, []pushed{
		{Recv: due, WindowID: 1, Key: a, Quantity: 1},
		{Recv: due.Add(4 * time.Second), WindowID: 5, Key: a, Quantity: 5},
		{Recv: due.Add(2 * time.Second), WindowID: 3, Key: b, Quantity: 4},
	}, W, grace)
	if got.Conserved || got.WindowsMiscounted != 2 || got.KeysMismatched != 0 {
		t.Fatalf("windows 1 and 5 pushed with each other's totals: conserved %v, miscounted %d, keys mismatched %d; want false, 2, 0",
			got.Conserved, got.WindowsMiscounted, got.KeysMismatched)
	}

	// A key with a failed RPC may have a window nobody was told of, or a
	// larger total than answered: that stays uncertain, not miscounted.
	rec, a, b, c := recordedRun(t0)
	got = checkPushes(rec, []pushed{
		{Recv: due, WindowID: 1, Key: a, Quantity: 5},
		{Recv: due.Add(2 * time.Second), WindowID: 3, Key: b, Quantity: 4},
		{Recv: due, WindowID: 4, Key: c, Quantity: 1},
	}, W, grace)
	if !got.Conserved || got.WindowsMiscounted != 0 {
		t.Fatalf("a run whose only unannounced window is on a key with a failed RPC: conserved %v, miscounted %d; want true, 0",
			got.Conserved, got.WindowsMiscounted)
	}
}

// The table says how many windows its push lag figures were taken over, so
// a reader can tell figures over every pushed window from figures over part.
func TestTableCountsTheWindowsOfItsLagFigures(t *testing.T) {
	var b strings.Builder
	runs{{Mode: "rate", Pushes: &pushCheck{WindowsPushed: 20000, Lag: durStats{N: 19998, P99: 5.6}}}}.print(&b)
	if !regexp.MustCompile(`push lag over windows +19998`).MatchString(b.String()) {
		t.Fatalf("no lag count in the table:\n%s", b.String())
	}
}

// A run that opened no window, because it sent nothing or every RPC
// failed, checked nothing and is not conserved. Before, its check over no
// key passed.
func TestCheckOverNoWindowIsNotConserved(t *testing.T) {
	if got := checkPushes(newRecorder(), nil, 3*time.Second, 200*time.Millisecond); got.Conserved {
		t.Fatalf("check of a run that sent nothing = %+v, want not conserved", got)
	}
	rec := newRecorder()
	rec.errors = 5 // every RPC failed
	if got := checkPushes(rec, nil, 3*time.Second, 200*time.Millisecond); got.Conserved {
		t.Fatalf("check of a run whose RPCs all failed = %+v, want not conserved", got)
	}
}

// A key with a failed RPC is uncertain only while its pushes add up to at
// least what its answers acknowledged and at most that plus what failed.
// Pushes short of the acknowledged quantity lost a counted report, and a
// window pushed twice, or one answered as opened and never pushed, breaks
// the run, even when the key's sum falls inside its uncertain range.
func TestUncertainKeyDoesNotExcuseLossDoublePushOrMissingWindow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	W, grace := 3*time.Second, 200*time.Millisecond
	due := t0.Add(W + grace)
	// Key c: its RPC of id 4 (1) failed in recordedRun, one of id 8 (3)
	// fails here, and id 7 (2) is answered as opening window 7: c's pushes
	// may add up to 2..6.
	rec, a, b, c := recordedRun(t0)
	on := func(id int64, k comboKey, q int32) []*combo.Contribution {
		return []*combo.Contribution{{Id: id, ActivityId: k.Activity, UserId: k.User, ItemType: k.ItemType, Quantity: q}}
	}
	rec.observe(t0, time.Millisecond, on(7, c, 2), []*combo.ReportContributionResponse{{WindowId: 7, WindowQuantity: 2}}, nil)
	rec.observe(t0, time.Millisecond, on(8, c, 3), nil, errors.New("timeout"))
	ab := []pushed{
		{Recv: due, WindowID: 1, Key: a, Quantity: 5},
		{Recv: due.Add(2 * time.Second), WindowID: 3, Key: b, Quantity: 4},
	}
	check := func(cs ...pushed) pushCheck { return checkPushes(rec, append(slices.Clone(ab), cs...), W, grace) }

	if got := check(pushed{Recv: due, WindowID: 7, Key: c, Quantity: 2}); !got.Conserved || got.KeysUncertain != 1 {
		t.Fatalf("window 7 pushed with its 2: %+v, want conserved, key c uncertain", got)
	}
	if got := check(pushed{Recv: due, WindowID: 7, Key: c, Quantity: 1}); got.Conserved || got.KeysMismatched != 1 {
		t.Errorf("key c pushed 1 of the 2 acknowledged: conserved %v, keys mismatched %d; want false, 1", got.Conserved, got.KeysMismatched)
	}
	// 2 + 2 is within c's 2..6.
	if got := check(pushed{Recv: due, WindowID: 7, Key: c, Quantity: 2}, pushed{Recv: due, WindowID: 7, Key: c, Quantity: 2}); got.Conserved || got.PushedTwice != 1 {
		t.Errorf("window 7 pushed twice: conserved %v, pushed twice %d; want false, 1", got.Conserved, got.PushedTwice)
	}
	// Window 7's 2 pushed in a window of the failed RPCs instead: c's sum
	// is 2, but window 7, answered as opened, is missing.
	if got := check(pushed{Recv: due, WindowID: 4, Key: c, Quantity: 2}); got.Conserved || got.WindowsMissing != 1 {
		t.Errorf("window 7 never pushed: conserved %v, missing %d; want false, 1", got.Conserved, got.WindowsMissing)
	}
}

// A degraded report is published on its own at once: it is a window to
// expect (counted in windows expected, missing until pushed, pushed once
// pushed), with no lag (it has no window to close).
func TestDegradedReportsAreWindowsToPush(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	W, grace := 3*time.Second, 200*time.Millisecond
	rec, a, b, _ := recordedRun(t0)
	d := comboKey{Activity: 1, User: 13, ItemType: "lily"}
	rec.observe(t0, time.Millisecond, []*combo.Contribution{{Id: 9, ActivityId: d.Activity, UserId: d.User, ItemType: d.ItemType, Quantity: 6}},
		[]*combo.ReportContributionResponse{{Degraded: true}}, nil)
	pushes := []pushed{
		{Recv: t0.Add(3240 * time.Millisecond), WindowID: 1, Key: a, Quantity: 5},
		{Recv: t0.Add(5260 * time.Millisecond), WindowID: 3, Key: b, Quantity: 4},
	}
	got := checkPushes(rec, pushes, W, grace)
	if got.WindowsExpected != 3 || got.WindowsPushed != 2 || got.WindowsMissing != 1 || got.Conserved {
		t.Errorf("degraded report 9 not pushed: expected %d, pushed %d, missing %d, conserved %v; want 3, 2, 1, false",
			got.WindowsExpected, got.WindowsPushed, got.WindowsMissing, got.Conserved)
	}
	got = checkPushes(rec, append(pushes, pushed{Recv: t0.Add(2 * time.Millisecond), WindowID: 9, Key: d, Quantity: 6}), W, grace)
	if got.WindowsExpected != 3 || got.WindowsPushed != 3 || got.WindowsMissing != 0 || !got.Conserved || got.Lag.N != 2 || got.EarlyPushes != 0 {
		t.Errorf("degraded report 9 pushed at once: %+v; want 3 expected, 3 pushed, none missing or early, lag over 2, conserved", got)
	}
}

package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
)

// A tap of ×10 pushed as one ×10 record is right: the window check sums
// the taps' quantities (every other test taps ×1, so counting taps passed).
func TestWindowQuantityIsSumOfQuantities(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	s := newSession(t, w, grace)
	s.st.ours[1] = true
	s.st.send(context.Background(), s.svc, s.b, click{Activity: 1001, User: xiaohong, Item: heart, Qty: 10}, 1)
	tp := s.st.taps[0]
	s.push(push.RecordOf(tp.c), tp.at.Add(w))
	if ok := s.summary(time.Time{}); !ok || strings.Contains(s.out.String(), "expected ×") {
		t.Errorf("a ×10 tap pushed as ×10: summary %v, want true:\n%s", ok, s.out.String())
	}
}

// A push 50 ms before W is early: the check's tolerance is the clocks'
// 1 ms, not more.
func TestPushJustBeforeWIsEarly(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	s := newSession(t, w, grace)
	tp := s.tap(1, xiaoming)
	s.push(push.RecordOf(tp.c), tp.at.Add(w-50*time.Millisecond))
	if ok := s.summary(time.Time{}); ok || !strings.Contains(s.out.String(), "(1 early, 0 late)") {
		t.Errorf("push at W-50ms: summary %v, want false with 1 early:\n%s", ok, s.out.String())
	}
}

// A tap the service did not count fails the run, even when every tap it
// counted was pushed right.
func TestFailedTapFailsTheRun(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	s := newSession(t, w, grace)
	tp := s.tap(1, xiaoming)
	s.push(push.RecordOf(tp.c), tp.at.Add(w))
	s.svc.report = func(*combo.Contribution) (*combo.ReportContributionResponse, error) {
		return nil, errors.New("connection refused")
	}
	s.tap(2, xiaohong)
	if ok := s.summary(time.Time{}); ok {
		t.Errorf("a failed tap: summary true, want false:\n%s", s.out.String())
	}
}

// A push whose combo_count differs from its quantity (CONTRACT §2: they are
// equal) fails the poll check.
func TestWrongComboCountFailsPollCheck(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	s := newSession(t, w, grace)
	tp := s.tap(1, xiaoming)
	r := push.RecordOf(tp.c)
	r.ComboCount = 7
	s.push(r, tp.at.Add(w))
	if ok := s.summary(time.Time{}); ok {
		t.Errorf("push with combo_count 7, quantity 1: summary true, want false:\n%s", s.out.String())
	}
}

// A bad flag value exits 2 before anything is sent (README), its error
// naming the flag. Redis is a closed port, so a check that let the value
// through would fail on Redis instead, naming -redis.
func TestBadFlagValuesExit2NamingTheFlag(t *testing.T) {
	base := options{addr: "127.0.0.1:1", redisAddr: "127.0.0.1:1", window: 3 * time.Second, grace: 200 * time.Millisecond,
		scenario: "script", color: "never", activity: 1001, duration: 15 * time.Second, seed: 1}
	for _, c := range []struct {
		name string
		mod  func(*options)
		flag string
	}{
		{"window 5ms", func(o *options) { o.window = 5 * time.Millisecond }, "-window"},
		{"grace -1ns", func(o *options) { o.grace = -1 }, "-grace"},
		{"activity 0", func(o *options) { o.activity = 0 }, "-activity"},
		{"duration 0", func(o *options) { o.scenario = "random"; o.duration = 0 }, "-duration"},
	} {
		o := base
		c.mod(&o)
		code, err := run(context.Background(), o)
		if code != 2 || err == nil || !strings.HasPrefix(err.Error(), c.flag) {
			t.Errorf("%s: run = %d, %v; want 2 and an error naming %s", c.name, code, err, c.flag)
		}
	}
}

// A push within W + grace + 1 s is not late, whatever grace is.
func TestLateBoundIncludesGrace(t *testing.T) {
	const w, grace = 3 * time.Second, 2 * time.Second
	s := newSession(t, w, grace)
	tp := s.tap(1, xiaoming)
	s.push(push.RecordOf(tp.c), tp.at.Add(w+grace+500*time.Millisecond))
	if ok := s.summary(time.Time{}); !ok {
		t.Errorf("push at W+grace+0.5s with grace 2s: summary false, want true:\n%s", s.out.String())
	}
}

// badComboCountMerge answers MergeLatest with every record's combo_count 7.
type badComboCountMerge struct{ *fakeService }

func (f badComboCountMerge) MergeLatest(ctx context.Context, req *combo.MergeLatestRequest, o ...callopt.Option) (*combo.MergeLatestResponse, error) {
	resp, err := f.fakeService.MergeLatest(ctx, req, o...)
	for _, r := range resp.GetRecords() {
		r.ComboCount = 7
	}
	return resp, err
}

// A MergeLatest whose combo_count differs from the push's fails the poll
// check.
func TestPollComboCountIsCompared(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	s := newSession(t, w, grace)
	tp := s.tap(1, xiaoming)
	s.push(push.RecordOf(tp.c), tp.at.Add(w))
	ok := s.st.summary(context.Background(), badComboCountMerge{s.svc}, s.b, s.o, time.Second, []int64{1001, 1002}, time.Time{})
	if ok || !strings.Contains(s.out.String(), "0/1 merged records identical") {
		t.Errorf("MergeLatest combo_count 7 vs push 1: summary %v, want false:\n%s", ok, s.out.String())
	}
}

// Once every tap is sent the demo says how long it waits for the last
// windows; when the last taps failed (the service stopped mid-run) there
// is none to wait for, and it said "up to -4.4s".
func TestSentNoteNeverNegative(t *testing.T) {
	for _, c := range []struct {
		wait time.Duration
		want string
	}{
		{3500 * time.Millisecond, "all taps sent; waiting for the last windows (up to 3.5s)"},
		{0, "all taps sent"},
		{-4400 * time.Millisecond, "all taps sent"},
	} {
		if got := sentNote(c.wait); got != c.want {
			t.Errorf("sentNote(%s) = %q, want %q", c.wait, got, c.want)
		}
	}
}

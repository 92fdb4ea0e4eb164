package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// stallingClient answers every report at once, as opening its window,
// except that every call between stallFrom and stallTo (after the first
// call) waits until stallTo: a service that stops for a while.
type stallingClient struct {
	once               sync.Once
	t0                 time.Time
	stallFrom, stallTo time.Duration
}

func (s *stallingClient) ReportContribution(_ context.Context, req *combo.ReportContributionRequest, _ ...callopt.Option) (*combo.ReportContributionResponse, error) {
	s.once.Do(func() { s.t0 = time.Now() })
	if since := time.Since(s.t0); since >= s.stallFrom && since < s.stallTo {
		time.Sleep(s.stallTo - since)
	}
	c := req.Contribution
	return &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity}, nil
}

func (s *stallingClient) ReportContributions(context.Context, *combo.ReportContributionsRequest, ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	return nil, errors.New("not used")
}

func (s *stallingClient) MergeLatest(context.Context, *combo.MergeLatestRequest, ...callopt.Option) (*combo.MergeLatestResponse, error) {
	return nil, errors.New("not used")
}

// Rate mode's latency counts from when a report was released, not from
// when a caller got to send it: a 200 ms stall that leaves reports queued
// for a free caller shows in their latency (no coordinated omission), so
// the latency's p99 is about the send delay's, not a few microseconds.
func TestRateLatencyCountsTheWaitForACaller(t *testing.T) {
	cli := &stallingClient{stallFrom: 300 * time.Millisecond, stallTo: 500 * time.Millisecond}
	cfg := config{Rate: 1000, Duration: time.Second, Concurrency: 8}
	l := runRate(cfg, cli, newWorkload())
	lat := summarize(l.rec.latencies)
	if l.sendDelay.P99 < 50 {
		t.Fatalf("send delay p99 %.1f ms: the stall queued nothing, the test proves nothing", l.sendDelay.P99)
	}
	// Each latency is its send delay less the tick's lateness (1 ms, more
	// on a busy machine): half is a wide margin.
	if lat.P99 < l.sendDelay.P99/2 {
		t.Fatalf("latency p99 %.1f ms below the send delay's %.1f ms: the wait for a caller is left out", lat.P99, l.sendDelay.P99)
	}
}

// A stall longer than the queue's second holds the pacer up: the reports
// due meanwhile are released at once after it, and their latency counts
// from their due time, not from that late release. Each report's answer
// comes after a caller took it, so its latency is at least its send delay.
// Timed from the late release, the median latency was 1.7 ms against a
// median send delay of 1 s.
func TestRateLatencyCountsAHeldUpPacer(t *testing.T) {
	cli := &stallingClient{stallFrom: 300 * time.Millisecond, stallTo: 2300 * time.Millisecond}
	cfg := config{Rate: 1000, Duration: 3 * time.Second, Concurrency: 4}
	l := runRate(cfg, cli, newWorkload())
	lat := summarize(l.rec.latencies)
	if l.sendDelay.Max < 1500 {
		t.Fatalf("send delay max %.1f ms: the pacer was not held up past the queue's second, the test proves nothing", l.sendDelay.Max)
	}
	// At most a tick (1 ms, more on a busy machine) below: half is a wide margin.
	if lat.P50 < l.sendDelay.P50/2 || lat.P99 < l.sendDelay.P99/2 {
		t.Fatalf("latency p50 %.1f p99 %.1f ms, send delay p50 %.1f p99 %.1f ms: the pacer's hold-up is left out",
			lat.P50, lat.P99, l.sendDelay.P50, l.sendDelay.P99)
	}
}

// keyingClient answers every report at once, as opening its window, and
// counts the reports of each combo key; each call takes perCall.
type keyingClient struct {
	perCall time.Duration
	mu      sync.Mutex
	keys    map[comboKey]int
}

func (c *keyingClient) ReportContribution(_ context.Context, req *combo.ReportContributionRequest, _ ...callopt.Option) (*combo.ReportContributionResponse, error) {
	time.Sleep(c.perCall)
	c.mu.Lock()
	c.keys[keyOf(req.Contribution)]++
	c.mu.Unlock()
	return &combo.ReportContributionResponse{WindowId: req.Contribution.Id, WindowQuantity: req.Contribution.Quantity}, nil
}

func (c *keyingClient) ReportContributions(context.Context, *combo.ReportContributionsRequest, ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	return nil, errors.New("not used")
}

func (c *keyingClient) MergeLatest(context.Context, *combo.MergeLatestRequest, ...callopt.Option) (*combo.MergeLatestResponse, error) {
	return nil, errors.New("not used")
}

// Rate mode offers -rate NEW windows a second: rate × d reports, each on a
// key of its own, paced over d (not sent at once, nor at another rate).
func TestRateOffersNewWindowsAtTheRate(t *testing.T) {
	cli := &keyingClient{keys: map[comboKey]int{}}
	l := runRate(config{Rate: 400, Duration: time.Second, Concurrency: 4}, cli, newWorkload())
	if l.rec.sent != 400 || l.rec.opened != 400 || len(cli.keys) != 400 {
		t.Fatalf("sent %d, opened %d, distinct keys %d; want 400 each", l.rec.sent, l.rec.opened, len(cli.keys))
	}
	// The last report is due at 399/400 s; 800 ms of slack for a busy
	// host (half the rate would take 2 s). Whether a run reached its rate
	// is TestRateNotReachedIsJudgedOverTheSendingSpan's, without a clock.
	if l.elapsed < 990*time.Millisecond || l.elapsed > 1800*time.Millisecond {
		t.Fatalf("400 reports at 400/s took %v, want about 1 s", l.elapsed)
	}
}

// The shortfall is judged over the sending span, not to the last answer:
// a slow last answer is no slow rate. And at rateReached, not below it.
func TestRateNotReachedIsJudgedOverTheSendingSpan(t *testing.T) {
	cfg := config{Rate: 400, Concurrency: 64}
	start := time.Unix(1_700_000_000, 0)
	interval := time.Second / 400
	for _, c := range []struct {
		sent     int64
		lastSend time.Duration // after start
		note     bool
	}{
		{400, 997500 * time.Microsecond, false}, // on time
		{400, 998500 * time.Microsecond, false}, // a tick late
		{400, 1018 * time.Millisecond, false},   // 98.1% of the rate
		{400, 1025 * time.Millisecond, true},    // 97.4%
		{400, 2 * time.Second, true},            // half the rate
		{400, 1019500 * time.Microsecond, true}, // 97.97%: the span is to the last take + an interval - a tick
		{10, 22500 * time.Microsecond, false},   // -n 10, on time
		{10, 50 * time.Millisecond, true},       // -n 10, at half the rate
		{0, 0, false},                           // nothing sent
	} {
		last := start.Add(c.lastSend)
		if c.sent == 0 {
			last = time.Time{}
		}
		note := rateNotReached(cfg, c.sent, start, last, interval)
		if (note != "") != c.note {
			t.Errorf("%d sent, the last %v after the start: note %q, want one: %v", c.sent, c.lastSend, note, c.note)
		}
	}
}

// A rate the callers cannot offer (one caller, 5 ms a call: 200/s at
// most, against 400/s asked) is noted: the push lag, timed from each
// send, would otherwise stand for a load that was never sent.
func TestRateNotesARateNotReached(t *testing.T) {
	cli := &keyingClient{perCall: 5 * time.Millisecond, keys: map[comboKey]int{}}
	l := runRate(config{Rate: 400, Duration: 500 * time.Millisecond, Concurrency: 1}, cli, newWorkload())
	if len(l.notes) != 1 || !strings.Contains(l.notes[0], "offered 400 new windows/s, sent ") {
		t.Fatalf("notes %q, want one saying 400/s was not sent", l.notes)
	}
}

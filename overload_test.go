package main

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// While Redis stalls (CLIENT PAUSE: it takes connections and answers
// nothing), callers with client.NewClient's defaults (1 s RPC timeout)
// get UNAVAILABLE from the service, saying why, not their own timeout: a
// report queued behind a pipeline Redis did not answer used to ride a
// second pipeline into the same silence and wait two redis.timeouts, the
// whole of that second. When the stall ends the reports go through again,
// and every acknowledged one is pushed, none twice.
func TestRedisStallAnswersUnavailableBeforeCallersTimeOut(t *testing.T) {
	s := startService(t, options{})
	rpc, err := client.NewClient([]string{s.addrs.RPCAddr})
	if err != nil {
		t.Fatal(err)
	}
	// Enough to queue calls behind the pipeline Redis leaves unanswered
	// (on the bug this pins, 17 to 20 of them time out each run); 100
	// callers on a loaded 2-core machine timed out on CPU alone, 1 to 3
	// runs in 10, and the test failed for want of CPU, not of the fix.
	const callers = 20
	const stall = 1500 * time.Millisecond
	a := newActivity()
	var stalled atomic.Bool
	var pauseEnds atomic.Int64 // unix nano, once the stall is asked for
	var okBefore, okAfter, unavailable, acked atomic.Int64
	var mu sync.Mutex
	var timedOut []error // errors that are no ComboError: the caller's own timeout
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := gift(a, int64(i+1), "rose", 1)
				sent := time.Now()
				resp, err := rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
				var ce *combo.ComboError
				switch {
				case err == nil:
					if !resp.Duplicate {
						acked.Add(1)
					}
					if end := pauseEnds.Load(); end != 0 && sent.UnixNano() > end {
						okAfter.Add(1)
					} else if !stalled.Load() {
						okBefore.Add(1)
					}
				case errors.As(err, &ce) && ce.Code == client.CodeUnavailable:
					unavailable.Add(1)
				default:
					mu.Lock()
					timedOut = append(timedOut, err)
					mu.Unlock()
				}
			}
		})
	}
	stopCallers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopCallers()
	waitUntil(t, 10*time.Second, "reports answered before the stall", func() bool { return okBefore.Load() >= 2*callers })

	stalled.Store(true)
	pauseEnds.Store(time.Now().Add(stall).UnixNano())
	if err := s.rdb.Do(context.Background(), "CLIENT", "PAUSE", stall.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "reports answered after the stall", func() bool { return okAfter.Load() >= 2*callers })
	stopCallers()

	mu.Lock()
	defer mu.Unlock()
	if len(timedOut) > 0 {
		t.Errorf("%d of %d failed reports during a %v stall ended with the caller's own timeout, not UNAVAILABLE; first: %v",
			len(timedOut), len(timedOut)+int(unavailable.Load()), stall, timedOut[0])
	}
	if unavailable.Load() == 0 {
		t.Errorf("no report failed UNAVAILABLE during a %v stall: the test no longer shows what it means to", stall)
	}

	// Every acknowledged report is pushed (unacknowledged ones may be too:
	// a pipeline that timed out may still have run), and no window twice.
	want := acked.Load()
	var pushed []received
	s.pushes.until(20*time.Second, func(rs []received) bool {
		sum := int64(0)
		for _, r := range rs {
			sum += int64(r.msg.Record.Quantity)
		}
		pushed = rs
		return sum >= want
	}, forActivity(a))
	ids := map[int64]bool{}
	for _, r := range pushed {
		if ids[r.msg.Record.ID] {
			t.Fatalf("window %d pushed twice", r.msg.Record.ID)
		}
		ids[r.msg.Record.ID] = true
	}
}

// waitUntil polls cond until it holds, failing after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A report whose caller has given up (its RPC timeout, sent in TTHeader,
// has passed) while it waited for a pipeline leaves the queue unsent and
// is counted canceled, as README's combo_reports_total says: Kitex never
// ends a handler's ctx, so it used to wait on and be sent, work for an
// answer nobody read, under overload exactly when Redis can least spare
// it; the caller's retry then came as a duplicate.
func TestReportsOfACallerThatGaveUpAreNotSent(t *testing.T) {
	s := startService(t, options{})
	const callerTimeout, stall = 100 * time.Millisecond, 400 * time.Millisecond // stall < redis.timeout
	rpc, err := client.NewClient([]string{s.addrs.RPCAddr}, kclient.WithRPCTimeout(callerTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := newActivity()
	// Enough to queue calls behind the pipeline Redis leaves unanswered
	// (on the bug this pins, 17 to 20 of them time out each run); 100
	// callers on a loaded 2-core machine timed out on CPU alone, 1 to 3
	// runs in 10, and the test failed for want of CPU, not of the fix.
	const callers = 20
	cs := make([]*combo.Contribution, callers)
	for i := range cs {
		cs[i] = gift(a, int64(i+1), "rose", 1)
	}
	if err := s.rdb.Do(ctx, "CLIENT", "PAUSE", stall.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			if _, err := rpc.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: c}); err == nil {
				t.Errorf("report %d answered during a %v stall, within its caller's %v", c.Id, stall, callerTimeout)
			}
		})
	}
	wg.Wait()
	// Once every report has an outcome (the stall over, the queue sent or
	// dropped), send them again: a duplicate is one that was counted.
	var outcomes map[string]int
	waitUntil(t, 10*time.Second, "an outcome for every report", func() bool {
		outcomes = reportOutcomes(t, s)
		return outcomes["ok"]+outcomes["canceled"]+outcomes["unavailable"] >= callers
	})
	fresh := 0
	for _, c := range cs {
		if !s.report(c).Duplicate {
			fresh++
		}
	}
	// A canceled report was never sent, so it comes back fresh. The ones
	// whose pipeline was already on its way (the first, and any that joined
	// it) were answered OK (counted: a duplicate now) or, on a loaded
	// machine where that pipeline's dial and send outlasted redis.timeout
	// under the stall, UNAVAILABLE (counted or not: a write that timed out
	// never reached Redis, a read that did may have).
	canceled, unavailable := outcomes["canceled"], outcomes["unavailable"]
	if canceled < callers/2 || fresh < canceled || fresh > canceled+unavailable {
		t.Errorf("of %d reports whose callers gave up after %v during a %v stall, %d were counted canceled and %d left unsent "+
			"(outcomes %v): want most canceled, every canceled one unsent, and no other unsent but an UNAVAILABLE one",
			callers, callerTimeout, stall, canceled, fresh, outcomes)
	}
}

var outcomeLine = regexp.MustCompile(`(?m)^combo_reports_total\{outcome="(\w+)"\} (\d+)$`)

// reportOutcomes reads combo_reports_total from the service's /metrics.
func reportOutcomes(t *testing.T, s *service) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range outcomeLine.FindAllStringSubmatch(scrape(t, s), -1) {
		n, _ := strconv.Atoi(m[2])
		out[m[1]] = n
	}
	return out
}

package client

// Tests pinning what a mutation sweep of the Reporter found no test for
// (the code right, each mutant named in its test's comment).

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/internal/stacks"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// A Report that passed the first closed check and then finds the Reporter
// closed under mu is refused with ErrClosed and counted in Closed: every
// Report call counts once. (Mutant: drop `r.stats.Closed++` in the second
// closed check of Report.)
func TestReportRacingCloseCountsClosed(t *testing.T) {
	r := newTestReporter(t, newFake(nil), ReporterOptions{Linger: time.Hour})
	r.mu.Lock()
	errc, id := make(chan error, 1), make(chan string, 1)
	go func() { id <- stacks.Self(); errc <- r.Report(context.Background(), contribution(1)) }()
	// Waited for, not slept for: a Report not yet past its first check
	// when closed is set counts Closed there, and the test passes on the
	// mutant. closed is false until then, so a Report waiting for mu is
	// past that check.
	g := <-id
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if state, stack, ok := stacks.State(g); ok && state == "sync.Mutex.Lock" && strings.Contains(stack, "(*Reporter).Report(") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Report not waiting for mu within 10 s")
		}
	}
	r.closed.Store(true) // as Close does, under mu
	r.mu.Unlock()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("Report = %v, want ErrClosed", err)
	}
	if s := r.Stats(); s.Closed != 1 || s.Accepted != 0 {
		t.Fatalf("stats %+v, want Closed 1, Accepted 0", s)
	}
}

// A Close that gives up while everything queued is blocked behind a batch
// in flight (the dispatcher idle, waiting for a wake) still ends the
// dispatcher. (Mutant: remove `case <-r.ctx.Done():` from the dispatcher's
// idle select.)
func TestCloseGivingUpEndsAnIdleDispatcher(t *testing.T) {
	f := newFake(func(ctx context.Context, _ int, _ []*combo.Contribution) error {
		<-ctx.Done()
		return ctx.Err()
	})
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 1, Linger: time.Hour, RPCTimeout: time.Hour,
		OnDrop: func([]*combo.Contribution, error) {}})
	mustReport(t, r, 1, 11) // one key: 11 is blocked behind 1
	f.recv(t)
	// Not canceled at once: the dispatcher first takes Close's wake, finds
	// only 11 queued, blocked, and goes idle; then Close gives up.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want DeadlineExceeded", err)
	}
	select {
	case <-r.done:
	case <-time.After(waitFor):
		t.Fatal("dispatcher goroutine still running after Close gave up")
	}
}

// What a Close that gives up drops from the queue reaches OnDrop in
// batches of at most BatchSize, as they would have been sent: a caller
// re-sending an OnDrop batch with ReportContributions (1..1000 items)
// must not get the whole QueueSize at once. (Mutant: abort puts all of
// pending in one OnDrop call.)
func TestCloseGivingUpDropsInBatchesOfBatchSize(t *testing.T) {
	f := newFake(func(ctx context.Context, _ int, _ []*combo.Contribution) error {
		<-ctx.Done()
		return ctx.Err()
	})
	var mu sync.Mutex
	var sizes []int
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 3, Concurrency: 1, Linger: time.Hour, RPCTimeout: time.Hour,
		OnDrop: func(b []*combo.Contribution, _ error) {
			mu.Lock()
			sizes = append(sizes, len(b))
			mu.Unlock()
		}})
	mustReport(t, r, ids(1, 10)...)
	f.recv(t) // 1..3 in flight, 4..10 queued
	closeGivingUp(t, r)
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range sizes {
		if n < 1 || n > 3 {
			t.Fatalf("OnDrop batches %v, want each 1..BatchSize 3", sizes)
		}
		total += n
	}
	if total != 10 {
		t.Fatalf("OnDrop batches %v, want 10 contributions", sizes)
	}
}

// Linger runs from the oldest *sendable* contribution: one blocked behind
// its key's batch in flight, however old, does not make a newer report of
// another key go out before it has waited Linger. (Mutant:
// oldestSendableLocked returns pending[0].at.)
func TestLingerIgnoresBlockedReports(t *testing.T) {
	const linger = 300 * time.Millisecond
	release := make(chan struct{})
	f := newFake(func(ctx context.Context, attempt int, _ []*combo.Contribution) error {
		if attempt == 1 {
			<-release
		}
		return nil
	})
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 10, Linger: linger, RPCTimeout: time.Hour})
	defer close(release)
	mustReport(t, r, 1)
	f.recv(t)            // [1] in flight until released
	mustReport(t, r, 11) // 1's key: blocked
	time.Sleep(linger * 2 / 3)
	start := time.Now()
	mustReport(t, r, 2) // another key: sendable, Linger starts now
	if got := f.recv(t); len(got) != 1 || got[0] != 2 {
		t.Fatalf("sent %v, want [2]", got)
	}
	if el := time.Since(start); el < linger*9/10 {
		t.Fatalf("[2] sent %v after its Report, want at least Linger %v", el, linger)
	}
}

// BatchSize's upper bound is inclusive: MaxBatchSize is what
// ReportContributions takes. (Mutant: `> MaxBatchSize` -> `>=`.)
func TestMaxBatchSizeIsAccepted(t *testing.T) {
	o := ReporterOptions{BatchSize: MaxBatchSize, QueueSize: MaxBatchSize}
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate(BatchSize %d) = %v, want nil", MaxBatchSize, err)
	}
}

// The attempt histogram spans 0.5 ms to 16 s, as documented (ReporterOptions.
// Registerer, README): a timed-out attempt with a long RPCTimeout still
// lands in a finite bucket. (Mutant: ExponentialBuckets(0.0005, 2, 15).)
func TestAttemptHistogramBucketsSpanTheDocumentedRange(t *testing.T) {
	reg := prometheus.NewRegistry()
	newTestReporter(t, newFake(nil), ReporterOptions{Registerer: reg, Linger: time.Hour})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metricAttemptTime {
			continue
		}
		b := mf.GetMetric()[0].GetHistogram().GetBucket()
		if first, last := b[0].GetUpperBound(), b[len(b)-1].GetUpperBound(); first != 0.0005 || last < 16 || last > 17 {
			t.Fatalf("buckets %v .. %v, want 0.0005 .. about 16 s", first, last)
		}
		return
	}
	t.Fatalf("no %s gathered", metricAttemptTime)
}

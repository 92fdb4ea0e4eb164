package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/validate"
)

// Tests pinning what a mutation sweep of the Reporter found loose: each
// fails with the mutant it names applied (in its commit message).

// A batch of one refused for its only item is dropped as it is: no second
// RPC with an empty batch (which combo-service refuses as a whole, handing
// OnDrop an empty slice), one OnDrop call with that item.
func TestRefusedOnlyItemIsNotResentEmpty(t *testing.T) {
	f := refuseIDs(".quantity: must be 1..100000, got 0", 1)
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 1, Linger: time.Hour, InitialBackoff: time.Hour, OnDrop: drops.onDrop})
	mustReport(t, r, 1)
	closeWithin(t, r)
	attempts, _ := f.snapshot()
	if !slices.EqualFunc(attempts, [][]int64{{1}}, slices.Equal) {
		t.Fatalf("attempts %v, want only [[1]]", attempts)
	}
	got, errs := drops.snapshot()
	if !slices.Equal(got, []int64{1}) || len(errs) != 1 {
		t.Fatalf("OnDrop got ids %v in %d calls, want [1] in 1", got, len(errs))
	}
	if s := r.Stats(); s.Sent != 0 || s.Dropped != 1 {
		t.Fatalf("stats %+v, want Sent 0, Dropped 1", s)
	}
}

// Once every report of a key is resolved the Reporter forgets the key: a
// long-running caller sees a new (activity, user, item) key per gift
// sender, and the map must not grow with every key ever reported.
func TestResolvedKeysAreForgotten(t *testing.T) {
	f := newFake(nil)
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 10, Linger: time.Millisecond})
	for id := int64(1); id <= 200; id++ {
		c := contribution(id)
		c.UserId = id // 200 distinct keys
		mustReportPtr(t, r, c)
	}
	deadline := time.Now().Add(waitFor)
	for r.Stats().Sent != 200 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, want 200 sent", r.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	r.mu.Lock()
	n, blocked := len(r.keys), r.blocked
	r.mu.Unlock()
	if n != 0 || blocked != 0 {
		t.Fatalf("after every report was sent the Reporter still tracks %d keys (blocked %d), want 0", n, blocked)
	}
}

// An item refused by index frees its key at once: a later report of that
// key, blocked behind it, is sent without waiting for another Report or
// for Close.
func TestRefusedItemUnblocksItsKey(t *testing.T) {
	release := make(chan struct{})
	f := newFake(func(ctx context.Context, attempt int, items []*combo.Contribution) error {
		if attempt == 1 {
			<-release
			return &combo.ComboError{Code: CodeInvalidArgument, Message: "contributions[0].quantity: must be 1..100000, got 0"}
		}
		return nil
	})
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 2, Linger: 10 * time.Millisecond, OnDrop: func([]*combo.Contribution, error) {}})
	mustReport(t, r, 1, 2) // contribution(1) and contribution(11) share a key
	if got := f.recv(t); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("first attempt %v", got)
	}
	mustReport(t, r, 11) // blocked behind 1
	close(release)
	if got := f.recv(t); !slices.Equal(got, []int64{2}) {
		t.Fatalf("resend %v, want [2]", got)
	}
	if got := f.recv(t); !slices.Equal(got, []int64{11}) { // fails on timeout if never signalled
		t.Fatalf("then %v, want [11]", got)
	}
}

// Close returns only after every OnDrop call has returned, even when its
// ctx ends first: also for an item the service refused by index, whose
// OnDrop runs on the send's goroutine while the rest of the batch is
// still in flight.
func TestCloseWaitsForOnDropOfARefusedItem(t *testing.T) {
	f := refuseIDs(".quantity: must be 1..100000, got 0", 1)
	entered, hold := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	onDrop := func(batch []*combo.Contribution, _ error) {
		if batch[0].Id == 1 {
			close(entered)
			<-hold
			returned.Store(true)
		}
	}
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 2, Linger: time.Hour, OnDrop: onDrop})
	mustReport(t, r, 1, 2)
	select {
	case <-entered:
	case <-time.After(waitFor):
		t.Fatal("OnDrop of the refused item not called")
	}
	go func() { time.Sleep(300 * time.Millisecond); close(hold) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_ = r.Close(ctx)
	if !returned.Load() {
		t.Fatal("Close returned while OnDrop of a refused item was still running")
	}
}

// A refusal naming the index one past the batch (a server counting from 1)
// drops the whole batch: it must not index past the batch's items (a
// panic on the Reporter's goroutine, which kills the caller's process).
func TestRefusalNamingIndexNDropsWhole(t *testing.T) {
	refusal := &combo.ComboError{Code: CodeInvalidArgument, Message: "contributions[3].id: must be > 0, got 0"}
	f := newFake(func(context.Context, int, []*combo.Contribution) error { return refusal })
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 3, Linger: time.Hour, OnDrop: drops.onDrop})
	mustReport(t, r, 1, 2, 3)
	closeWithin(t, r)
	if got, _ := drops.snapshot(); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("OnDrop got %v, want the whole batch", got)
	}
}

// An item the service refused by index counts as dropped in the metrics as
// in Stats: an alert on reports_total{outcome="dropped"} must see it.
func TestRefusedItemCountsInDroppedMetric(t *testing.T) {
	f := refuseIDs(".quantity: must be 1..100000, got 0", 2)
	reg := prometheus.NewRegistry()
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 3, Linger: time.Hour, Registerer: reg, OnDrop: func([]*combo.Contribution, error) {}})
	mustReport(t, r, 1, 2, 3)
	closeWithin(t, r)
	if s := r.Stats(); s.Dropped != 1 || s.Sent != 2 {
		t.Fatalf("stats %+v", s)
	}
	m := gather(t, reg)
	if m["combo_reporter_reports_total{outcome=dropped}"] != 1 || m["combo_reporter_reports_total{outcome=sent}"] != 2 {
		t.Fatalf("metrics %v, want dropped 1 and sent 2", m)
	}
}

// Linger runs from the oldest sendable report, not from the dispatcher's
// last wake-up: a resolve that unblocks a key (and signals) half-way
// through a Linger must not restart it. contribution(id) has key
// (7, 1000+id%10, rose).
func TestLingerNotRestartedByAWakeUp(t *testing.T) {
	const linger = time.Second // margins of 300 ms either side
	release := make(chan struct{})
	f := newFake(func(ctx context.Context, attempt int, _ []*combo.Contribution) error {
		if attempt == 1 {
			<-release
		}
		return nil
	})
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 3, Linger: linger, RPCTimeout: time.Hour})
	mustReport(t, r, 1, 2, 3) // BatchSize: sent at once, held until released
	f.recv(t)
	start := time.Now()
	mustReport(t, r, 11) // key of 1: blocked
	mustReport(t, r, 4)  // another key: sendable, Linger starts now
	time.Sleep(linger * 5 / 8)
	close(release) // [1 2 3] resolves: 11 unblocked, dispatcher woken
	got := f.recv(t)
	el := time.Since(start)
	if len(got) != 2 {
		t.Fatalf("second batch %v, want [11 4]", got)
	}
	if el > linger*13/10 {
		t.Fatalf("second batch sent %v after its reports, want about Linger %v: the wake-up restarted Linger", el, linger)
	}
}

// The drop error counts the attempts made: 1 + MaxRetries.
func TestRetriesExhaustedNamesTheAttempts(t *testing.T) {
	f := newFake(func(context.Context, int, []*combo.Contribution) error { return errTransport })
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 2, Linger: time.Hour, MaxRetries: 2,
		InitialBackoff: time.Millisecond, OnDrop: drops.onDrop})
	mustReport(t, r, 1, 2)
	drops.recv(t)
	_, errs := drops.snapshot()
	if want := "batch of 2 failed after 3 attempts"; !strings.Contains(errs[0].Error(), want) {
		t.Fatalf("drop error %q, want it to say %q", errs[0], want)
	}
}

// The package doc promises a *validate.Error naming the field, not only
// its text.
func TestReportRefusalIsAValidateError(t *testing.T) {
	r := newTestReporter(t, newFake(nil), ReporterOptions{})
	err := r.Report(context.Background(), contribution(0))
	var ve *validate.Error
	if !errors.As(err, &ve) || ve.Field != "contribution.id" {
		t.Fatalf("Report = %#v, want a *validate.Error with Field contribution.id", err)
	}
}

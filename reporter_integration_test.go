package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/stacks"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// These tests use client.Reporter as activityService does: through
// client.NewClient, against the service run in-process on a real
// redis-server.

// reporterGoroutines counts the goroutines running the Reporter's own code
// (its dispatcher and sends), from their stacks: the standard library's
// way to check that Close leaves none behind, whatever Kitex and the
// in-process service run meanwhile.
func reporterGoroutines() int {
	count := 0
	for _, g := range stacks.All() {
		if strings.Contains(g, "combo-service/client.(*Reporter)") {
			count++
		}
	}
	return count
}

// noReporterGoroutines waits until no goroutine runs the Reporter's code.
func noReporterGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for reporterGoroutines() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d Reporter goroutines still running 5s after Close", reporterGoroutines())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// drops collects OnDrop calls.
type drops struct {
	mu   sync.Mutex
	ids  map[int64]int
	errs []error
}

func (d *drops) onDrop(batch []*combo.Contribution, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ids == nil {
		d.ids = map[int64]int{}
	}
	for _, c := range batch {
		d.ids[c.Id]++
	}
	d.errs = append(d.errs, err)
}

func (d *drops) snapshot() (map[int64]int, []error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make(map[int64]int, len(d.ids))
	maps.Copy(ids, d.ids)
	return ids, append([]error(nil), d.errs...)
}

func waitReporter(t *testing.T, r *client.Reporter, timeout time.Duration, ok func(client.ReporterStats) bool) client.ReporterStats {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := r.Stats()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("reporter stats %+v: the awaited state never came within %s", s, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Concurrent producers of several combo keys: every report Report took is
// acknowledged, pushed exactly once per window with every quantity
// conserved, Close flushes what Linger still held, and no Reporter
// goroutine outlives Close.
func TestReporterAgainstTheService(t *testing.T) {
	s := startService(t, options{})
	cli, err := client.NewClient([]string{s.addrs.RPCAddr})
	if err != nil {
		t.Fatal(err)
	}
	var d drops
	r, err := client.NewReporter(cli, client.ReporterOptions{BatchSize: 20, Linger: 50 * time.Millisecond, OnDrop: d.onDrop})
	if err != nil {
		t.Fatal(err)
	}
	a := newActivity()
	const producers, each = 8, 60
	want := map[string]int32{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				c := gift(a, int64(p%4+1), []string{"firework", "rose"}[i%2], int32(i%3+1))
				if err := r.Report(context.Background(), c); err != nil {
					t.Errorf("Report: %v", err)
					return
				}
				mu.Lock()
				want[fmt.Sprintf("%d|%s", c.UserId, c.ItemType)] += c.Quantity
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	st := r.Stats()
	if st.Accepted != producers*each || st.Sent != st.Accepted || st.Dropped != 0 || st.Queued != 0 || st.InFlight != 0 {
		t.Fatalf("stats %+v, want all %d sent", st, producers*each)
	}
	if ids, errs := d.snapshot(); len(ids) != 0 {
		t.Fatalf("OnDrop got %d ids: %v", len(ids), errs)
	}
	if err := r.Report(context.Background(), gift(a, 1, "firework", 1)); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Report after Close = %v, want ErrClosed", err)
	}
	checkConservation(t, s.pushes, s.cfg, wait, forActivity(a), want)
	noReporterGoroutines(t)
}

// With nothing listening at the service's address, every report ends in
// OnDrop (never silently), with the transport's error, once its bounded
// retries are spent; Close then returns at once and leaves nothing behind.
func TestReporterServiceDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cli, err := client.NewClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	var d drops
	r, err := client.NewReporter(cli, client.ReporterOptions{
		BatchSize: 3, Linger: 10 * time.Millisecond, MaxRetries: 2, InitialBackoff: 10 * time.Millisecond, OnDrop: d.onDrop,
	})
	if err != nil {
		t.Fatal(err)
	}
	a := newActivity()
	var reported []int64
	for range 5 {
		c := gift(a, 1, "firework", 1)
		if err := r.Report(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		reported = append(reported, c.Id)
	}
	st := waitReporter(t, r, 5*time.Second, func(s client.ReporterStats) bool { return s.Dropped == 5 })
	if st.Sent != 0 || st.Retried != 2*5 {
		t.Fatalf("stats %+v, want 5 dropped after 2 retries each", st)
	}
	// A drop is counted before its batch is handed to OnDrop: wait for
	// that too.
	var ids map[int64]int
	var errs []error
	waitUntil(t, 5*time.Second, "the 5 dropped reports handed to OnDrop", func() bool {
		ids, errs = d.snapshot()
		return len(ids) >= len(reported)
	})
	for _, id := range reported {
		if ids[id] != 1 {
			t.Fatalf("OnDrop got %v, want each of %v once", ids, reported)
		}
	}
	for _, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "after 3 attempts") {
			t.Fatalf("OnDrop error %v, want it to say the attempts were spent", err)
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close with nothing held took %s", d)
	}
	noReporterGoroutines(t)
}

// Redis down: the service answers UNAVAILABLE and the Reporter retries
// (the default policy), so the reports get through once Redis is back.
func TestReporterRidesOutARedisOutage(t *testing.T) {
	// The test can subscribe only once Redis is back, when the Reporter's
	// retries may land too: a window of a second leaves the subscription
	// that long to be in place before the first push (with 200 ms, a
	// stalled host could push before it).
	s := startService(t, options{mutate: func(c *conf.Config) {
		c.Window.Size, c.Window.Grace = time.Second, 100*time.Millisecond
		c.Worker.ClaimIdle = conf.DefaultClaimIdle(c.Window)
	}})
	cli, err := client.NewClient([]string{s.addrs.RPCAddr})
	if err != nil {
		t.Fatal(err)
	}
	var d drops
	r, err := client.NewReporter(cli, client.ReporterOptions{Linger: 10 * time.Millisecond, OnDrop: d.onDrop})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Close(ctx)
	})
	a := newActivity()
	s.redis.Kill()
	want := map[string]int32{}
	for i := range 10 {
		c := gift(a, int64(i%3+1), "firework", 1)
		if err := r.Report(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		want[fmt.Sprintf("%d|firework", c.UserId)] += c.Quantity
	}
	waitReporter(t, r, 5*time.Second, func(s client.ReporterStats) bool { return s.Retried > 0 })
	s.redis.Start()
	pushes := subscribe(t, s.rdb) // the harness's subscriber died with Redis
	st := waitReporter(t, r, 30*time.Second, func(s client.ReporterStats) bool { return s.Sent+s.Dropped == 10 })
	if st.Sent != 10 {
		ids, errs := d.snapshot()
		t.Fatalf("stats %+v, want all 10 sent after Redis came back; dropped %v: %v", st, ids, errs)
	}
	checkConservation(t, pushes, s.cfg, wait, forActivity(a), want)
}

// Close bounds itself by its ctx while the service cannot take the
// reports: it returns the ctx's error close to the deadline, every held
// report reaches OnDrop, and no Reporter goroutine is left.
func TestReporterCloseRespectsItsDeadline(t *testing.T) {
	s := startService(t, options{})
	cli, err := client.NewClient([]string{s.addrs.RPCAddr})
	if err != nil {
		t.Fatal(err)
	}
	var d drops
	r, err := client.NewReporter(cli, client.ReporterOptions{BatchSize: 4, Linger: 10 * time.Millisecond, OnDrop: d.onDrop})
	if err != nil {
		t.Fatal(err)
	}
	a := newActivity()
	s.redis.Kill()
	// Before the service stops (cleanups run last first): on a dead Redis
	// its drain would wait out server.shutdown_timeout (10 s).
	t.Cleanup(s.redis.Start)
	for range 10 {
		if err := r.Report(context.Background(), gift(a, 1, "firework", 1)); err != nil {
			t.Fatal(err)
		}
	}
	waitReporter(t, r, 5*time.Second, func(s client.ReporterStats) bool { return s.Retried > 0 })
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err = r.Close(ctx)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want DeadlineExceeded", err)
	}
	if took > deadline+time.Second {
		t.Fatalf("Close took %s with a %s deadline", took, deadline)
	}
	st := r.Stats()
	if st.Dropped != 10 || st.Sent != 0 {
		t.Fatalf("stats %+v, want all 10 dropped", st)
	}
	if ids, _ := d.snapshot(); len(ids) != 10 {
		t.Fatalf("OnDrop got %d ids, want 10", len(ids))
	}
	noReporterGoroutines(t)
}

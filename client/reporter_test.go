package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/combo-service/combo-service/internal/stacks"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// waitFor bounds every wait for an event, so a bug fails fast instead of
// hanging the suite.
const waitFor = 5 * time.Second

var errTransport = errors.New("connection reset by peer")

// fakeSender records every attempt and answers through respond (nil: success).
type fakeSender struct {
	// respond decides an attempt's outcome; attempt counts from 1 across all
	// calls. It may block. nil means success.
	respond func(ctx context.Context, attempt int, items []*combo.Contribution) error
	// calls, if set, receives the ids of each attempt as it starts.
	calls chan []int64

	mu          sync.Mutex
	attempts    [][]int64
	at          []time.Time
	inFlight    int
	maxInFlight int
}

func newFake(respond func(ctx context.Context, attempt int, items []*combo.Contribution) error) *fakeSender {
	return &fakeSender{respond: respond, calls: make(chan []int64, 1024)}
}

func (f *fakeSender) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest, _ ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	items := req.GetContributions()
	ids := make([]int64, len(items))
	for i, c := range items {
		ids[i] = c.Id
	}
	f.mu.Lock()
	f.attempts = append(f.attempts, ids)
	f.at = append(f.at, time.Now())
	attempt := len(f.attempts)
	f.inFlight++
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	if f.calls != nil {
		f.calls <- ids
	}

	if f.respond != nil {
		if err := f.respond(ctx, attempt, items); err != nil {
			return nil, err
		}
	}
	resp := &combo.ReportContributionsResponse{Results: make([]*combo.ReportContributionResponse, len(items))}
	for i, c := range items {
		resp.Results[i] = &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity}
	}
	return resp, nil
}

func (f *fakeSender) snapshot() (attempts [][]int64, maxInFlight int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.attempts), f.maxInFlight
}

// recv waits for the next attempt.
func (f *fakeSender) recv(t *testing.T) []int64 {
	t.Helper()
	select {
	case ids := <-f.calls:
		return ids
	case <-time.After(waitFor):
		t.Fatal("timed out waiting for a ReportContributions call")
		return nil
	}
}

// dropLog collects OnDrop calls.
type dropLog struct {
	mu    sync.Mutex
	ids   []int64
	errs  []error
	calls chan int
}

func newDropLog() *dropLog { return &dropLog{calls: make(chan int, 1024)} }

func (d *dropLog) onDrop(batch []*combo.Contribution, err error) {
	d.mu.Lock()
	for _, c := range batch {
		d.ids = append(d.ids, c.Id)
	}
	d.errs = append(d.errs, err)
	d.mu.Unlock()
	d.calls <- len(batch)
}

func (d *dropLog) snapshot() ([]int64, []error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ids), slices.Clone(d.errs)
}

func (d *dropLog) recv(t *testing.T) int {
	t.Helper()
	select {
	case n := <-d.calls:
		return n
	case <-time.After(waitFor):
		t.Fatal("timed out waiting for OnDrop")
		return 0
	}
}

func contribution(id int64) *combo.Contribution {
	return &combo.Contribution{
		Id: id, ActivityId: 7, UserId: 1000 + id%10, StarId: 0, ItemId: 3,
		ItemType: "rose", ItemName: "Rose", Quantity: 1, CreatedAt: 1_732_950_000_000 + id,
	}
}

func newTestReporter(t *testing.T, s BatchSender, opts ReporterOptions) *Reporter {
	t.Helper()
	r, err := NewReporter(s, opts)
	if err != nil {
		t.Fatalf("NewReporter: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = r.Close(ctx)
	})
	return r
}

func mustReport(t *testing.T, r *Reporter, ids ...int64) {
	t.Helper()
	for _, id := range ids {
		if err := r.Report(context.Background(), contribution(id)); err != nil {
			t.Fatalf("Report(%d): %v", id, err)
		}
	}
}

func ids(from, to int64) []int64 {
	var out []int64
	for id := from; id <= to; id++ {
		out = append(out, id)
	}
	return out
}

func closeWithin(t *testing.T, r *Reporter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func checkConsistent(t *testing.T, s ReporterStats) {
	t.Helper()
	if s.Accepted != s.Sent+s.Dropped+uint64(s.Queued)+uint64(s.InFlight) {
		t.Fatalf("inconsistent stats: %+v", s)
	}
}

func TestBatchSizeTrigger(t *testing.T) {
	f := newFake(nil)
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 10, Linger: time.Hour})

	mustReport(t, r, ids(1, 9)...)
	if s := r.Stats(); s.Queued != 9 || s.InFlight != 0 {
		t.Fatalf("9 of BatchSize 10 must stay queued, stats %+v", s)
	}
	// Below BatchSize, with an hour's Linger, nothing goes out.
	select {
	case got := <-f.calls:
		t.Fatalf("sent %v with 9 of BatchSize 10 queued", got)
	case <-time.After(50 * time.Millisecond):
	}
	// The 10th report alone triggers the batch: Linger is an hour away.
	mustReport(t, r, 10)
	got := f.recv(t)
	if !slices.Equal(got, ids(1, 10)) {
		t.Fatalf("batch = %v, want ids 1..10 in order", got)
	}
	closeWithin(t, r)
	attempts, _ := f.snapshot()
	if len(attempts) != 1 {
		t.Fatalf("%d calls, want 1", len(attempts))
	}
	if s := r.Stats(); s.Sent != 10 || s.Queued != 0 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLingerTrigger(t *testing.T) {
	// The upper bound is far above scheduling noise and far below waitFor,
	// so a Linger timer that never fires (only Close's flush would send)
	// fails here rather than passing late.
	const linger, within = 50 * time.Millisecond, 2 * time.Second
	f := newFake(nil)
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 50, Linger: linger})

	start := time.Now()
	mustReport(t, r, 1, 2, 3)
	var got []int64
	select {
	case got = <-f.calls:
	case <-time.After(within):
		t.Fatalf("no batch within %v of Linger %v", within, linger)
	}
	elapsed := time.Since(start)
	if !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("batch = %v, want [1 2 3]", got)
	}
	if elapsed < linger || elapsed > within {
		t.Fatalf("batch sent after %v, want between Linger %v and %v", elapsed, linger, within)
	}
	closeWithin(t, r)
	if attempts, _ := f.snapshot(); len(attempts) != 1 {
		t.Fatalf("%d calls, want 1", len(attempts))
	}
	if s := r.Stats(); s.Sent != 3 {
		t.Fatalf("stats %+v", s)
	}
}

func TestConcurrentReports(t *testing.T) {
	const producers, each = 32, 500
	f := newFake(nil)
	f.calls = nil
	opts := ReporterOptions{QueueSize: producers * each}
	r := newTestReporter(t, f, opts)

	// Watch the invariants while the producers run.
	stop := make(chan struct{})
	watched := make(chan error, 1)
	go func() {
		var err error
		for {
			select {
			case <-stop:
				watched <- err
				return
			default:
			}
			s := r.Stats()
			if err == nil && s.Accepted != s.Sent+s.Dropped+uint64(s.Queued)+uint64(s.InFlight) {
				err = fmt.Errorf("inconsistent stats %+v", s)
			}
			if err == nil && s.Queued+s.InFlight > opts.QueueSize {
				err = fmt.Errorf("holding %d > QueueSize", s.Queued+s.InFlight)
			}
			runtime.Gosched()
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				id := int64(p*each + i + 1)
				if err := r.Report(context.Background(), contribution(id)); err != nil {
					errs <- fmt.Errorf("Report(%d): %w", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	closeWithin(t, r)
	close(stop)
	if err := <-watched; err != nil {
		t.Fatal(err)
	}

	attempts, maxInFlight := f.snapshot()
	seen := make(map[int64]int, producers*each)
	for _, batch := range attempts {
		if len(batch) == 0 || len(batch) > DefaultBatchSize {
			t.Fatalf("batch of %d, want 1..%d", len(batch), DefaultBatchSize)
		}
		for _, id := range batch {
			seen[id]++
		}
	}
	for id := int64(1); id <= producers*each; id++ {
		if seen[id] != 1 {
			t.Fatalf("id %d sent %d times, want exactly once", id, seen[id])
		}
	}
	if len(seen) != producers*each {
		t.Fatalf("%d distinct ids sent, want %d", len(seen), producers*each)
	}
	if maxInFlight > DefaultConcurrency {
		t.Fatalf("%d batches in flight at once, Concurrency is %d", maxInFlight, DefaultConcurrency)
	}
	s := r.Stats()
	checkConsistent(t, s)
	want := ReporterStats{Accepted: producers * each, Sent: producers * each}
	if s != want {
		t.Fatalf("stats %+v, want %+v", s, want)
	}
}

func TestConcurrencyBound(t *testing.T) {
	release := make(chan struct{})
	f := newFake(func(ctx context.Context, _ int, _ []*combo.Contribution) error {
		<-release
		return nil
	})
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 1, Concurrency: 3, Linger: time.Hour})

	mustReport(t, r, ids(1, 10)...)
	for range 3 {
		f.recv(t)
	}
	// Three batches hold the three slots; the rest wait, uncut.
	if s := r.Stats(); s.InFlight != 3 || s.Queued != 7 {
		t.Fatalf("stats %+v, want 3 in flight and 7 queued", s)
	}
	close(release)
	closeWithin(t, r)
	attempts, maxInFlight := f.snapshot()
	if len(attempts) != 10 || maxInFlight != 3 {
		t.Fatalf("%d calls, %d at most in flight; want 10 and 3", len(attempts), maxInFlight)
	}
}

// A slow batch holds one slot while batches of other keys go through the
// other. A report of the slow batch's own key (id 11 shares id 1's user)
// waits for it, so the key's reports stay in order, and goes right after.
func TestSlowBatchDoesNotStallOthers(t *testing.T) {
	release := make(chan struct{})
	f := newFake(func(ctx context.Context, _ int, items []*combo.Contribution) error {
		if items[0].Id == 1 {
			<-release
		}
		return nil
	})
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 1, Concurrency: 2, Linger: time.Hour, RPCTimeout: time.Hour})

	mustReport(t, r, 1)
	if got := f.recv(t); !slices.Equal(got, []int64{1}) {
		t.Fatalf("first call %v", got)
	}
	mustReport(t, r, ids(2, 20)...)
	// FIFO through the free slot: id 11 would be the 10th of these.
	for range 18 {
		if got := f.recv(t); got[0] == 11 {
			t.Fatal("id 11 sent while id 1, of the same key, was still in flight")
		}
	}
	// The slow batch still in flight, id 11 queued behind it; the others
	// got through the other slot.
	waitStats(t, r, func(s ReporterStats) bool { return s.Sent == 18 })
	if s := r.Stats(); s.InFlight != 1 || s.Queued != 1 {
		t.Fatalf("stats %+v, want the slow batch in flight and id 11 queued", s)
	}
	close(release)
	if got := f.recv(t); !slices.Equal(got, []int64{11}) {
		t.Fatalf("after the slow batch: call %v, want id 11", got)
	}
	closeWithin(t, r)
	if s := r.Stats(); s.Sent != 20 {
		t.Fatalf("stats %+v", s)
	}
}

// keyIDs filters attempts down to the ids of one combo key of
// contribution(): those equal to k modulo 10.
func keyIDs(attempts [][]int64, k int64) []int64 {
	var out []int64
	for _, a := range attempts {
		for _, id := range a {
			if id%10 == k {
				out = append(out, id)
			}
		}
	}
	return out
}

// With several batches in flight at once, a key's later reports wait until
// its earlier batch, retries included, is over: they reach the service in
// Report order (CONTRACT §2: push and poll agree only then).
func TestRetryKeepsReportsOfOneKeyInOrder(t *testing.T) {
	var failures atomic.Int32
	f := newFake(func(_ context.Context, _ int, items []*combo.Contribution) error {
		if items[0].Id == 1 && failures.Add(1) <= 2 {
			return errTransport // twice, then id 1 goes through
		}
		return nil
	})
	r := newTestReporter(t, f, ReporterOptions{
		BatchSize: 1, Concurrency: 3, Linger: time.Hour, InitialBackoff: 20 * time.Millisecond,
	})
	mustReport(t, r, 1)
	f.recv(t)                   // failed; the retry is at least 10ms away
	mustReport(t, r, 11, 21, 2) // 11 and 21 share id 1's key
	closeWithin(t, r)

	attempts, _ := f.snapshot()
	if got, want := keyIDs(attempts, 1), []int64{1, 1, 1, 11, 21}; !slices.Equal(got, want) {
		t.Fatalf("attempts of the key of id 1: %v, want %v (all attempts %v)", got, want, attempts)
	}
	if s := r.Stats(); s.Sent != 4 || s.Retried != 2 {
		t.Fatalf("stats %+v, want 4 sent after 2 retries", s)
	}
}

// A key waiting for a retry holds back only its own reports: other keys
// keep going through the other slot, a batch taking the sendable reports
// past the blocked ones.
func TestRetryingKeyDoesNotBlockOtherKeys(t *testing.T) {
	f := newFake(func(_ context.Context, _ int, items []*combo.Contribution) error {
		if items[0].Id == 1 {
			return errTransport // and the retry is at least half an hour away
		}
		return nil
	})
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{
		BatchSize: 3, Concurrency: 2, Linger: time.Hour, InitialBackoff: time.Hour, OnDrop: drops.onDrop,
	})
	mustReport(t, r, 1, 11, 21) // one batch, one key
	if got := f.recv(t); !slices.Equal(got, []int64{1, 11, 21}) {
		t.Fatalf("first call %v", got)
	}
	mustReport(t, r, 2, 31, 3, 41, 4, 5, 6, 7) // 31 and 41 share the retrying key
	for _, want := range [][]int64{{2, 3, 4}, {5, 6, 7}} {
		if got := f.recv(t); !slices.Equal(got, want) {
			t.Fatalf("call %v, want %v", got, want)
		}
	}
	waitStats(t, r, func(s ReporterStats) bool { return s.Sent == 6 })
	if s := r.Stats(); s.InFlight != 3 || s.Queued != 2 {
		t.Fatalf("stats %+v, want the retrying batch in flight and 31, 41 queued", s)
	}

	// Giving up drops them all, each once, the blocked ones included.
	closeGivingUp(t, r)
	got, _ := drops.snapshot()
	slices.Sort(got)
	if want := []int64{1, 11, 21, 31, 41}; !slices.Equal(got, want) {
		t.Fatalf("OnDrop got %v, want %v", got, want)
	}
	s := r.Stats()
	checkConsistent(t, s)
	if s.Sent != 6 || s.Dropped != 5 || s.Queued != 0 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// While everything queued is blocked, the dispatcher sleeps: it does not
// spin on the blocked reports, before Close or during it. Close waits for
// them to become sendable, then sends them, in order.
func TestCloseFlushesBlockedReportsWithoutSpinning(t *testing.T) {
	release := make(chan struct{})
	f := newFake(func(_ context.Context, _ int, items []*combo.Contribution) error {
		if items[0].Id == 1 {
			<-release
		}
		return nil
	})
	r := newTestReporter(t, f, ReporterOptions{
		BatchSize: 5, Concurrency: 2, Linger: time.Millisecond, RPCTimeout: time.Hour,
	})
	mustReport(t, r, 1)
	if got := f.recv(t); !slices.Equal(got, []int64{1}) {
		t.Fatalf("first call %v", got)
	}
	mustReport(t, r, 11, 2, 21) // 11 and 21 wait for id 1
	if got := f.recv(t); !slices.Equal(got, []int64{2}) {
		t.Fatalf("second call %v, want [2]", got)
	}
	waitStats(t, r, func(s ReporterStats) bool { return s.Sent == 1 })

	// A spinning dispatcher turns thousands of times in 100ms; a sleeping
	// one not at all, or once for a stale signal.
	const idle = 100 * time.Millisecond
	assertSleeps := func(when string) {
		t.Helper()
		before := r.turns.Load()
		time.Sleep(idle)
		if n := r.turns.Load() - before; n > 3 {
			t.Fatalf("%s: the dispatcher turned %d times in %v with everything queued blocked", when, n, idle)
		}
	}
	assertSleeps("before Close")

	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		closed <- r.Close(ctx)
	}()
	for !r.closed.Load() {
		runtime.Gosched()
	}
	assertSleeps("during Close")
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v with 11 and 21 still queued", err)
	default:
	}
	if s := r.Stats(); s.Queued != 2 || s.InFlight != 1 {
		t.Fatalf("stats %+v, want 11 and 21 queued behind id 1", s)
	}

	close(release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close = %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Close did not return")
	}
	attempts, _ := f.snapshot()
	if want := [][]int64{{1}, {2}, {11, 21}}; !slices.EqualFunc(attempts, want, slices.Equal) {
		t.Fatalf("attempts %v, want %v", attempts, want)
	}
	if s := r.Stats(); s.Sent != 4 {
		t.Fatalf("stats %+v", s)
	}
}

// gather returns the reporter metrics of reg by name and outcome label.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[key+"_count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func TestQueueFull(t *testing.T) {
	release := make(chan struct{})
	f := newFake(func(ctx context.Context, _ int, _ []*combo.Contribution) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	reg := prometheus.NewRegistry()
	const size = 100
	r := newTestReporter(t, f, ReporterOptions{
		QueueSize: size, BatchSize: 10, Concurrency: 2, RPCTimeout: time.Hour, Registerer: reg,
	})

	mustReport(t, r, ids(1, size)...)
	for id := int64(size + 1); id <= size+10; id++ {
		if err := r.Report(context.Background(), contribution(id)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("Report(%d) = %v, want ErrQueueFull", id, err)
		}
	}
	s := r.Stats()
	checkConsistent(t, s)
	if s.Accepted != size || s.QueueFull != 10 || s.Queued+s.InFlight != size {
		t.Fatalf("stats %+v, want %d held and 10 refused", s, size)
	}
	r.mu.Lock()
	capacity := cap(r.pending)
	r.mu.Unlock()
	if capacity > 2*size {
		t.Fatalf("queue capacity %d grew past 2*QueueSize", capacity)
	}
	m := gather(t, reg)
	if m["combo_reporter_queue_depth"] != size || m["combo_reporter_reports_total{outcome=queue_full}"] != 10 {
		t.Fatalf("metrics %v", m)
	}

	close(release)
	// Read the metrics before Close, which unregisters them.
	waitStats(t, r, func(s ReporterStats) bool { return s.Sent == size })
	if s := r.Stats(); s.Sent != size || s.Dropped != 0 || s.Queued+s.InFlight != 0 {
		t.Fatalf("stats after release %+v", s)
	}
	m = gather(t, reg)
	if m["combo_reporter_queue_depth"] != 0 || m["combo_reporter_reports_total{outcome=sent}"] != size {
		t.Fatalf("metrics after release %v", m)
	}
	closeWithin(t, r)
}

// statsProbe wraps one of a Reporter's counters: on each Add or Inc, while
// the Reporter's lock is free (a Stats caller could run), it reads Stats()
// and the counter as a scraper would, before the count lands.
type statsProbe struct {
	prometheus.Counter
	r     *Reporter
	stat  func(ReporterStats) uint64
	adds  atomic.Int32
	mu    sync.Mutex
	ahead []string // Stats already counting what the counter does not yet
}

func (p *statsProbe) Inc() { p.Add(1) }

func (p *statsProbe) Add(v float64) {
	p.adds.Add(1)
	// The lock may be briefly held by another goroutine (the dispatcher):
	// only one held throughout by the caller itself means Stats must wait.
	for range 1000 {
		if p.r.mu.TryLock() {
			p.r.mu.Unlock()
			if s, m := p.stat(p.r.Stats()), testutil.ToFloat64(p.Counter); float64(s) > m {
				p.mu.Lock()
				p.ahead = append(p.ahead, fmt.Sprintf("Stats says %d, the counter %v", s, m))
				p.mu.Unlock()
			}
			break
		}
		runtime.Gosched()
	}
	p.Counter.Add(v)
}

// A reader that sees a count in Stats() sees it in the metrics too (the
// tests above read the metrics once Stats shows the outcome): every counter
// is updated under the lock Stats reads under.
func TestMetricsNeverBehindStats(t *testing.T) {
	release := make(chan struct{})
	f := newFake(func(_ context.Context, _ int, items []*combo.Contribution) error {
		switch items[0].Id {
		case 1:
			<-release
		case 3:
			return errTransport
		}
		return nil
	})
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{
		QueueSize: 1, BatchSize: 1, Linger: time.Hour, MaxRetries: -1, OnDrop: drops.onDrop,
	})
	probe := func(c *prometheus.Counter, stat func(ReporterStats) uint64) *statsProbe {
		p := &statsProbe{Counter: *c, r: r, stat: stat}
		*c = p
		return p
	}
	probes := map[string]*statsProbe{
		"sent":       probe(&r.metrics.sent, func(s ReporterStats) uint64 { return s.Sent }),
		"dropped":    probe(&r.metrics.dropped, func(s ReporterStats) uint64 { return s.Dropped }),
		"queue_full": probe(&r.metrics.queueFull, func(s ReporterStats) uint64 { return s.QueueFull }),
		"invalid":    probe(&r.metrics.invalid, func(s ReporterStats) uint64 { return s.Invalid }),
	}

	mustReport(t, r, 1)
	f.recv(t) // 1 in flight holds the whole queue
	if err := r.Report(context.Background(), contribution(2)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Report(2) = %v, want ErrQueueFull", err)
	}
	if err := r.Report(context.Background(), contribution(0)); err == nil {
		t.Fatal("Report(0) accepted an invalid id")
	}
	close(release)
	waitStats(t, r, func(s ReporterStats) bool { return s.Sent == 1 })
	mustReport(t, r, 3)
	drops.recv(t)
	closeWithin(t, r)

	for name, p := range probes {
		if p.adds.Load() == 0 {
			t.Fatalf("%s: never counted", name)
		}
		p.mu.Lock()
		if len(p.ahead) > 0 {
			t.Errorf("%s: a reader saw Stats ahead of the metric: %v", name, p.ahead)
		}
		p.mu.Unlock()
	}
}

// waitStats waits until ok holds for r's stats.
func waitStats(t *testing.T, r *Reporter, ok func(ReporterStats) bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for s := r.Stats(); !ok(s); s = r.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: the awaited state never came", s)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRetryThenSuccess(t *testing.T) {
	const backoff = 20 * time.Millisecond
	f := newFake(func(ctx context.Context, attempt int, _ []*combo.Contribution) error {
		if attempt <= 2 {
			return errTransport
		}
		return nil
	})
	drops := newDropLog()
	reg := prometheus.NewRegistry()
	r := newTestReporter(t, f, ReporterOptions{
		BatchSize: 5, Linger: time.Hour, InitialBackoff: backoff, OnDrop: drops.onDrop, Registerer: reg,
	})

	mustReport(t, r, ids(1, 5)...)
	// Wait for the retries without Close, which would unregister the metrics.
	waitStats(t, r, func(s ReporterStats) bool { return s.Sent+s.Dropped == 5 })

	attempts, _ := f.snapshot()
	if len(attempts) != 3 {
		t.Fatalf("%d attempts, want 3", len(attempts))
	}
	for _, a := range attempts {
		if !slices.Equal(a, ids(1, 5)) {
			t.Fatalf("attempt sent %v, want the same batch 1..5", a)
		}
	}
	f.mu.Lock()
	gap1, gap2 := f.at[1].Sub(f.at[0]), f.at[2].Sub(f.at[1])
	f.mu.Unlock()
	// Jitter waits at least half the backoff.
	if gap1 < backoff/2 || gap2 < backoff {
		t.Fatalf("retry gaps %v, %v; want >= %v, %v", gap1, gap2, backoff/2, backoff)
	}
	s := r.Stats()
	if s.Sent != 5 || s.Retried != 10 || s.Dropped != 0 {
		t.Fatalf("stats %+v, want 5 sent, 10 retried", s)
	}
	if got, _ := drops.snapshot(); len(got) != 0 {
		t.Fatalf("OnDrop got %v", got)
	}
	m := gather(t, reg)
	if m["combo_reporter_retries_total"] != 10 || m["combo_reporter_reports_total{outcome=sent}"] != 5 {
		t.Fatalf("metrics %v", m)
	}
	// Each contribution has one outcome: the sum over outcome is what was
	// reported, however often it was retried.
	var sum float64
	for k, v := range m {
		if strings.HasPrefix(k, "combo_reporter_reports_total{") {
			sum += v
		}
	}
	if sum != 5 {
		t.Fatalf("reports_total summed over outcome: %v, want 5 (metrics %v)", sum, m)
	}
	closeWithin(t, r)
}

// A retry waits a uniform random time in [backoff/2, backoff] (equal
// jitter), so callers that failed together do not retry in lockstep.
func TestRetryWaitHasEqualJitter(t *testing.T) {
	for _, b := range []time.Duration{1, 2, 3, 50 * time.Millisecond, time.Second} {
		if got := jittered(b, func(time.Duration) time.Duration { return 0 }); got != b/2 {
			t.Errorf("backoff %v, lowest draw: wait %v, want %v", b, got, b/2)
		}
		if got := jittered(b, func(n time.Duration) time.Duration { return n - 1 }); got != b {
			t.Errorf("backoff %v, highest draw: wait %v, want %v", b, got, b)
		}
		lo, hi := b, time.Duration(0)
		for range 2000 {
			w := jittered(b, rand.N[time.Duration])
			if w < b/2 || w > b {
				t.Fatalf("backoff %v: wait %v outside [%v, %v]", b, w, b/2, b)
			}
			lo, hi = min(lo, w), max(hi, w)
		}
		// 2000 uniform draws all in one tenth of the range: odds 2*0.9^2000.
		if b >= 50*time.Millisecond && (lo > b/2+b/20 || hi < b-b/20) {
			t.Errorf("backoff %v: 2000 waits within [%v, %v], want them spread over [%v, %v]", b, lo, hi, b/2, b)
		}
	}
}

// The send loop draws each retry's wait from the doubling backoff, capped
// at MaxBackoff, and waits what it drew: less than the backoff when the
// draw is low.
func TestRetryWaitsAreJittered(t *testing.T) {
	var mu sync.Mutex
	var asked []time.Duration
	lowest := func(n time.Duration) time.Duration {
		mu.Lock()
		asked = append(asked, n)
		mu.Unlock()
		return 0 // wait backoff/2
	}
	newJitterReporter := func(f *fakeSender, opts ReporterOptions) *Reporter {
		r, err := newReporter(f, opts, lowest)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			_ = r.Close(ctx)
		})
		return r
	}

	// The sequence of backoffs, from the draws asked for (no timing).
	f := newFake(func(context.Context, int, []*combo.Contribution) error { return errTransport })
	drops := newDropLog()
	r := newJitterReporter(f, ReporterOptions{
		BatchSize: 1, MaxRetries: 4, InitialBackoff: 2 * time.Millisecond, MaxBackoff: 8 * time.Millisecond,
		OnDrop: drops.onDrop,
	})
	mustReport(t, r, 1)
	drops.recv(t)
	mu.Lock()
	got := slices.Clone(asked)
	asked = nil
	mu.Unlock()
	// Backoffs 2, 4, 8, 8 ms: each draw spans [0, backoff-backoff/2].
	want := []time.Duration{time.Millisecond + 1, 2*time.Millisecond + 1, 4*time.Millisecond + 1, 4*time.Millisecond + 1}
	if !slices.Equal(got, want) {
		t.Fatalf("jitter draws over %v, want %v", got, want)
	}

	// The wait is the drawn one: half a 1 s backoff, with half a second of
	// margin either way (without jitter it would be the whole second).
	const backoff = time.Second
	f = newFake(func(_ context.Context, attempt int, _ []*combo.Contribution) error {
		if attempt == 1 {
			return errTransport
		}
		return nil
	})
	r = newJitterReporter(f, ReporterOptions{BatchSize: 1, MaxRetries: 1, InitialBackoff: backoff})
	mustReport(t, r, 1)
	f.recv(t)
	f.recv(t)
	f.mu.Lock()
	gap := f.at[1].Sub(f.at[0])
	f.mu.Unlock()
	if gap < backoff/2 || gap >= backoff {
		t.Fatalf("retried after %v, want the drawn %v (under the backoff %v)", gap, backoff/2, backoff)
	}
}

func TestRetryExhausted(t *testing.T) {
	f := newFake(func(context.Context, int, []*combo.Contribution) error { return errTransport })
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{
		BatchSize: 5, Linger: time.Hour, MaxRetries: 2, InitialBackoff: time.Millisecond, OnDrop: drops.onDrop,
	})

	mustReport(t, r, ids(1, 5)...)
	if n := drops.recv(t); n != 5 {
		t.Fatalf("OnDrop got %d, want the batch of 5", n)
	}
	got, errs := drops.snapshot()
	if !slices.Equal(got, ids(1, 5)) || len(errs) != 1 || !errors.Is(errs[0], errTransport) {
		t.Fatalf("OnDrop(%v, %v), want ids 1..5 and the transport error", got, errs)
	}
	attempts, _ := f.snapshot()
	if len(attempts) != 3 {
		t.Fatalf("%d attempts, want 1 + MaxRetries = 3", len(attempts))
	}
	s := r.Stats()
	checkConsistent(t, s)
	if s.Dropped != 5 || s.Retried != 10 || s.Sent != 0 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
	closeWithin(t, r)
}

func TestRetryPolicyByError(t *testing.T) {
	cases := []struct {
		name         string
		maxRetries   int
		err          error
		wantAttempts int
	}{
		// Naming no item: the whole batch is refused (TestInvalidItemDroppedAlone
		// covers a refusal naming one).
		{"invalid argument is never retried", 3, &combo.ComboError{Code: CodeInvalidArgument, Message: "contributions: must hold 1..1000 items, got 0"}, 1},
		{"wrapped invalid argument is never retried", 3, fmt.Errorf("kitex: %w", &combo.ComboError{Code: CodeInvalidArgument}), 1},
		{"unavailable is retried", 2, &combo.ComboError{Code: CodeUnavailable, Message: "redis down"}, 3},
		{"internal is retried", 1, &combo.ComboError{Code: CodeInternal}, 2},
		{"negative MaxRetries disables retries", -1, errTransport, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(func(context.Context, int, []*combo.Contribution) error { return tc.err })
			drops := newDropLog()
			r := newTestReporter(t, f, ReporterOptions{
				BatchSize: 2, Linger: time.Hour, MaxRetries: tc.maxRetries,
				InitialBackoff: time.Millisecond, OnDrop: drops.onDrop,
			})
			mustReport(t, r, 1, 2)
			drops.recv(t)
			attempts, _ := f.snapshot()
			if len(attempts) != tc.wantAttempts {
				t.Fatalf("%d attempts, want %d", len(attempts), tc.wantAttempts)
			}
			_, errs := drops.snapshot()
			if !errors.Is(errs[0], tc.err) {
				t.Fatalf("OnDrop err %v, want it to wrap %v", errs[0], tc.err)
			}
			if ce, ok := IsComboError(tc.err); ok {
				if got, ok := IsComboError(errs[0]); !ok || got.Code != ce.Code {
					t.Fatalf("IsComboError(%v) = %v, %v", errs[0], got, ok)
				}
			}
			s := r.Stats()
			if s.Dropped != 2 || s.Retried != uint64(2*(tc.wantAttempts-1)) {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

func TestMalformedResponseIsNotSent(t *testing.T) {
	for name, answer := range map[string]func(*combo.ReportContributionsRequest) *combo.ReportContributionsResponse{
		"nil response": func(*combo.ReportContributionsRequest) *combo.ReportContributionsResponse {
			return nil // what a dropped BizStatusError looks like
		},
		// More results than contributions is as malformed as fewer.
		"one result too many": func(req *combo.ReportContributionsRequest) *combo.ReportContributionsResponse {
			resp := &combo.ReportContributionsResponse{}
			for range len(req.Contributions) + 1 {
				resp.Results = append(resp.Results, &combo.ReportContributionResponse{})
			}
			return resp
		},
	} {
		t.Run(name, func(t *testing.T) {
			drops := newDropLog()
			s := senderFunc(func(_ context.Context, req *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
				return answer(req), nil
			})
			r := newTestReporter(t, s, ReporterOptions{BatchSize: 1, MaxRetries: -1, OnDrop: drops.onDrop})
			mustReport(t, r, 1)
			drops.recv(t)
			if _, errs := drops.snapshot(); !errors.Is(errs[0], ErrBadResponse) {
				t.Fatalf("OnDrop err %v, want ErrBadResponse", errs[0])
			}
			if st := r.Stats(); st.Sent != 0 || st.Dropped != 1 {
				t.Fatalf("stats %+v, want Sent 0, Dropped 1", st)
			}
		})
	}
}

// A batch's duplicate and degraded answers are counted apart, within Sent:
// a degraded contribution shows in the live feed as an item of its own.
// Unequal counts, so that the two swapped show.
func TestSentAnswersAreCounted(t *testing.T) {
	s := senderFunc(func(_ context.Context, req *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
		resp := &combo.ReportContributionsResponse{}
		for _, c := range req.Contributions {
			resp.Results = append(resp.Results, &combo.ReportContributionResponse{
				WindowId: c.Id, WindowQuantity: 1, Duplicate: c.Id%3 == 0, Degraded: c.Id == 1 || c.Id == 4,
			})
		}
		return resp, nil
	})
	reg := prometheus.NewRegistry()
	r := newTestReporter(t, s, ReporterOptions{BatchSize: 4, Registerer: reg})
	mustReport(t, r, ids(1, 9)...) // 3, 6, 9 duplicate; 1, 4 degraded
	waitStats(t, r, func(st ReporterStats) bool { return st.Sent == 9 })
	if st := r.Stats(); st.Duplicate != 3 || st.Degraded != 2 {
		t.Fatalf("stats %+v, want 3 duplicate and 2 degraded of 9 sent", st)
	}
	m := gather(t, reg)
	if m["combo_reporter_sent_answers_total{answer=duplicate}"] != 3 || m["combo_reporter_sent_answers_total{answer=degraded}"] != 2 ||
		m["combo_reporter_reports_total{outcome=sent}"] != 9 {
		t.Fatalf("metrics %v", m)
	}
}

type senderFunc func(context.Context, *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error)

func (f senderFunc) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest, _ ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	return f(ctx, req)
}

func TestRPCTimeoutThroughCtx(t *testing.T) {
	const timeout = 20 * time.Millisecond
	drops := newDropLog()
	f := newFake(func(ctx context.Context, _ int, _ []*combo.Contribution) error {
		dl, ok := ctx.Deadline()
		if !ok || time.Until(dl) > timeout {
			return fmt.Errorf("deadline %v, %v; want within %v", dl, ok, timeout)
		}
		<-ctx.Done()
		return ctx.Err()
	})
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 1, MaxRetries: -1, RPCTimeout: timeout, OnDrop: drops.onDrop})
	mustReport(t, r, 1)
	drops.recv(t)
	if _, errs := drops.snapshot(); !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("OnDrop err %v, want DeadlineExceeded", errs[0])
	}
}

func TestReportRefusesInvalid(t *testing.T) {
	f := newFake(nil)
	reg := prometheus.NewRegistry()
	r := newTestReporter(t, f, ReporterOptions{Registerer: reg})

	bad := contribution(0) // id must be > 0
	seconds := contribution(2)
	seconds.CreatedAt = 1_732_950_000 // seconds, not milliseconds
	for _, tc := range []struct {
		c     *combo.Contribution
		field string
	}{
		{bad, "contribution.id"},
		{seconds, "contribution.created_at"},
		{nil, "contribution"},
	} {
		err := r.Report(context.Background(), tc.c)
		if err == nil || !strings.HasPrefix(err.Error(), tc.field) {
			t.Fatalf("Report(%v) = %v, want a validation error naming %s", tc.c, err, tc.field)
		}
	}
	s := r.Stats()
	if s != (ReporterStats{Invalid: 3}) {
		t.Fatalf("stats %+v, want only 3 invalid", s)
	}
	if m := gather(t, reg); m["combo_reporter_reports_total{outcome=invalid}"] != 3 {
		t.Fatalf("metrics %v", m)
	}
	closeWithin(t, r)
	if attempts, _ := f.snapshot(); len(attempts) != 0 {
		t.Fatalf("sent %v", attempts)
	}
}

// Once Close has been called, Report refuses with ErrClosed before it
// validates: an invalid contribution counts as Closed, not Invalid.
func TestReportAfterCloseIsClosedEvenIfInvalid(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := newTestReporter(t, newFake(nil), ReporterOptions{Registerer: reg})
	closeWithin(t, r)
	for _, c := range []*combo.Contribution{contribution(0), nil, contribution(1)} {
		if err := r.Report(context.Background(), c); !errors.Is(err, ErrClosed) {
			t.Fatalf("Report(%v) after Close = %v, want ErrClosed", c, err)
		}
	}
	if s := r.Stats(); s != (ReporterStats{Closed: 3}) {
		t.Fatalf("stats %+v, want only 3 closed", s)
	}
}

func TestReportCopiesContribution(t *testing.T) {
	var got *combo.Contribution
	s := senderFunc(func(_ context.Context, req *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
		got = req.Contributions[0]
		return &combo.ReportContributionsResponse{Results: []*combo.ReportContributionResponse{{}}}, nil
	})
	r := newTestReporter(t, s, ReporterOptions{Linger: time.Hour})
	c := contribution(1)
	mustReportPtr(t, r, c)
	c.Id, c.ItemType = 99, "changed" // the caller reuses its struct
	closeWithin(t, r)
	if got == nil || got.Id != 1 || got.ItemType != "rose" {
		t.Fatalf("sent %v, want the contribution as it was at Report", got)
	}
}

func mustReportPtr(t *testing.T, r *Reporter, c *combo.Contribution) {
	t.Helper()
	if err := r.Report(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

func TestCloseFlushes(t *testing.T) {
	f := newFake(nil)
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 50, Linger: time.Hour})

	mustReport(t, r, ids(1, 7)...)
	closeWithin(t, r)
	attempts, _ := f.snapshot()
	if len(attempts) != 1 || !slices.Equal(attempts[0], ids(1, 7)) {
		t.Fatalf("sent %v, want one batch 1..7", attempts)
	}
	if err := r.Report(context.Background(), contribution(8)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Report after Close = %v, want ErrClosed", err)
	}
	closeWithin(t, r) // a second Close is harmless
	if s := r.Stats(); s.Sent != 7 || s.Accepted != 7 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCloseFlushesLargeQueue(t *testing.T) {
	f := newFake(nil)
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 10, Linger: time.Hour, Concurrency: 1})
	// 25 = two size-triggered batches plus 5 that only Close sends.
	mustReport(t, r, ids(1, 25)...)
	closeWithin(t, r)
	attempts, _ := f.snapshot()
	var all []int64
	for _, a := range attempts {
		all = append(all, a...)
	}
	if !slices.Equal(all, ids(1, 25)) {
		t.Fatalf("sent %v", attempts)
	}
}

func TestCloseExpiredDropsRemainder(t *testing.T) {
	release := make(chan struct{})
	ctxErrs := make(chan error, 1)
	// This sender ignores its ctx until released: Close must not wait for it.
	f := newFake(func(ctx context.Context, _ int, _ []*combo.Contribution) error {
		<-release
		ctxErrs <- ctx.Err()
		return nil
	})
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{
		BatchSize: 5, Concurrency: 1, Linger: time.Hour, RPCTimeout: time.Hour, OnDrop: drops.onDrop,
	})

	mustReport(t, r, ids(1, 12)...)
	f.recv(t) // batch 1..5 in flight, 6..12 queued
	if s := r.Stats(); s.InFlight != 5 || s.Queued != 7 {
		t.Fatalf("stats %+v", s)
	}

	closeGivingUp(t, r)
	got, errs := drops.snapshot()
	slices.Sort(got)
	if !slices.Equal(got, ids(1, 12)) {
		t.Fatalf("OnDrop got %v, want every held id 1..12 once", got)
	}
	for _, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("OnDrop err %v, want it to wrap context.Canceled", err)
		}
	}
	s := r.Stats()
	checkConsistent(t, s)
	if s.Dropped != 12 || s.Sent != 0 || s.Queued != 0 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
	if err := r.Report(context.Background(), contribution(13)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Report after Close = %v, want ErrClosed", err)
	}
	s.Closed++ // that refusal

	// The stuck RPC was canceled; when it returns, nothing is counted twice
	// and nothing that was dropped turns into sent.
	close(release)
	if err := <-ctxErrs; !errors.Is(err, context.Canceled) {
		t.Fatalf("in-flight RPC ctx err = %v, want canceled", err)
	}
	select {
	case <-r.done:
	case <-time.After(waitFor):
		t.Fatal("reporter goroutines did not finish")
	}
	if got, _ := drops.snapshot(); len(got) != 12 {
		t.Fatalf("OnDrop got %d ids after the RPC returned, want 12", len(got))
	}
	if s2 := r.Stats(); s2 != s {
		t.Fatalf("stats changed after abort: %+v -> %+v", s, s2)
	}
	if attempts, _ := f.snapshot(); len(attempts) != 1 {
		t.Fatalf("%d attempts after Close gave up, want only the one in flight", len(attempts))
	}
	// A later Close does not pretend the flush succeeded.
	if err := r.Close(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("second Close = %v, want the first one's context.Canceled", err)
	}
}

// A Close that gives up still returns only after OnDrop calls already under
// way have returned: a caller that exits after Close must not cut one off.
func TestCloseWaitsForOnDropUnderWay(t *testing.T) {
	f := newFake(func(context.Context, int, []*combo.Contribution) error { return errTransport })
	entered, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	r := newTestReporter(t, f, ReporterOptions{
		BatchSize: 1, Linger: time.Hour, MaxRetries: -1,
		OnDrop: func([]*combo.Contribution, error) {
			close(entered)
			<-release
			finished.Store(true)
		},
	})
	mustReport(t, r, 1)
	select {
	case <-entered: // the batch failed; OnDrop is running
	case <-time.After(waitFor):
		t.Fatal("OnDrop was not called")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- r.Close(ctx) }()
	<-ctx.Done()
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while OnDrop was still running", err)
	case <-time.After(100 * time.Millisecond): // Close gave up at the deadline; it must still wait
	}
	close(release)
	select {
	case err := <-closed:
		// Nothing was held when Close gave up: the one contribution had
		// already been dropped through OnDrop, which does not fail Close.
		if err != nil {
			t.Fatalf("Close = %v, want nil", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Close did not return after OnDrop did")
	}
	if !finished.Load() {
		t.Fatal("Close returned before OnDrop finished")
	}
}

// When one Close gives up with contributions held, a Close running at the
// same time returns the same error, not nil.
func TestConcurrentCloseSharesGiveUp(t *testing.T) {
	f := newFake(func(ctx context.Context, _ int, _ []*combo.Contribution) error {
		<-ctx.Done()
		return ctx.Err()
	})
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{
		BatchSize: 3, Linger: time.Hour, RPCTimeout: time.Hour, OnDrop: drops.onDrop,
	})
	mustReport(t, r, 1, 2, 3)
	f.recv(t) // in flight until canceled

	patient := make(chan error, 1)
	go func() { patient <- r.Close(context.Background()) }()
	closeGivingUp(t, r)
	select {
	case err := <-patient:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("concurrent Close = %v, want context.Canceled", err)
		}
	case <-time.After(waitFor):
		t.Fatal("concurrent Close did not return")
	}
	if got, _ := drops.snapshot(); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("OnDrop got %v", got)
	}
}

// A Close already waiting when another gives up returns only after the
// giving-up Close's OnDrop calls have: those run on the giving-up Close's
// goroutine, and a caller exiting after the patient Close would cut them
// off. (Mutant: abort leaves out its drops.Add(1).)
func TestConcurrentCloseWaitsForTheGiveUpsOnDrop(t *testing.T) {
	f := newFake(func(ctx context.Context, _ int, _ []*combo.Contribution) error {
		<-ctx.Done()
		return ctx.Err()
	})
	entered, release := make(chan struct{}), make(chan struct{})
	r := newTestReporter(t, f, ReporterOptions{
		BatchSize: 1, Linger: time.Hour, RPCTimeout: time.Hour,
		OnDrop: func([]*combo.Contribution, error) {
			close(entered)
			<-release
		},
	})
	// Registered after newTestReporter's, so run before its Close: on a
	// failure below, OnDrop still waits on release, and that Close, after
	// the give-up, waits for it with no bound.
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo)
	mustReport(t, r, 1)
	f.recv(t) // in flight until canceled

	patient, patientID := make(chan error, 1), make(chan string, 1)
	go func() { patientID <- stacks.Self(); patient <- r.Close(context.Background()) }()
	g := <-patientID
	for deadline := time.Now().Add(waitFor); !r.closed.Load(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("the patient Close never began")
		}
	}
	givingUp := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		givingUp <- r.Close(ctx)
	}()
	select {
	case <-entered: // the giving-up Close is in OnDrop with id 1
	case <-time.After(waitFor):
		t.Fatal("OnDrop was not called")
	}
	// Released by the give-up, the patient Close must wait for that OnDrop:
	// waited for, not slept for, it parks in drops.Wait (or, on the mutant,
	// returns).
	for deadline := time.Now().Add(waitFor); ; time.Sleep(time.Millisecond) {
		select {
		case err := <-patient:
			t.Fatalf("the patient Close returned %v while the giving-up Close's OnDrop was running", err)
		default:
		}
		if state, stack, ok := stacks.State(g); ok && state == "sync.WaitGroup.Wait" && strings.Contains(stack, "(*Reporter).Close(") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the patient Close neither returned nor waited for the drops within 5 s")
		}
	}
	letGo()
	for name, ch := range map[string]chan error{"patient": patient, "giving-up": givingUp} {
		select {
		case err := <-ch:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("%s Close = %v, want context.Canceled", name, err)
			}
		case <-time.After(waitFor):
			t.Fatalf("%s Close did not return after OnDrop did", name)
		}
	}
}

// OnDrop gets copies: the originals may still be read by an RPC its ctx
// abandoned, and the caller may change what it is given.
func TestOnDropGetsCopies(t *testing.T) {
	sent := make(chan []*combo.Contribution, 1)
	s := senderFunc(func(_ context.Context, req *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
		sent <- req.Contributions
		return nil, errTransport
	})
	got := make(chan []*combo.Contribution, 1)
	r := newTestReporter(t, s, ReporterOptions{
		BatchSize: 2, Linger: time.Hour, MaxRetries: -1,
		OnDrop: func(batch []*combo.Contribution, _ error) {
			for _, c := range batch {
				c.Quantity = 99 // the caller's to change
			}
			got <- batch
		},
	})
	mustReport(t, r, 1, 2)
	var orig, dropped []*combo.Contribution
	for _, ch := range []struct {
		c   chan []*combo.Contribution
		dst *[]*combo.Contribution
	}{{sent, &orig}, {got, &dropped}} {
		select {
		case *ch.dst = <-ch.c:
		case <-time.After(waitFor):
			t.Fatal("timed out waiting for the attempt and the drop")
		}
	}
	if len(dropped) != 2 || &dropped[0] == &orig[0] {
		t.Fatalf("OnDrop got %d items, or the request's own slice", len(dropped))
	}
	for i := range dropped {
		if dropped[i] == orig[i] {
			t.Fatalf("item %d: OnDrop got the pointer the request holds", i)
		}
		if dropped[i].Id != orig[i].Id || orig[i].Quantity != 1 {
			t.Fatalf("item %d: dropped id %d, request's %d with quantity %d", i, dropped[i].Id, orig[i].Id, orig[i].Quantity)
		}
	}
}

func TestCloseDeadlineWhileRetrying(t *testing.T) {
	f := newFake(func(context.Context, int, []*combo.Contribution) error { return errTransport })
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{
		BatchSize: 3, Linger: time.Hour, MaxRetries: 5, InitialBackoff: time.Hour, OnDrop: drops.onDrop,
	})
	mustReport(t, r, 1, 2, 3)
	f.recv(t) // first attempt failed; now waiting an hour to retry
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want DeadlineExceeded", err)
	}
	if got, _ := drops.snapshot(); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("OnDrop got %v", got)
	}
	select {
	case <-r.done: // the backoff was interrupted
	case <-time.After(waitFor):
		t.Fatal("retry loop did not stop")
	}
	if s := r.Stats(); s.Dropped != 3 || s.Retried != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestOptionsValidate(t *testing.T) {
	var o ReporterOptions
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	want := ReporterOptions{
		QueueSize: DefaultQueueSize, BatchSize: DefaultBatchSize, Linger: DefaultLinger,
		Concurrency: DefaultConcurrency, MaxRetries: DefaultMaxRetries, InitialBackoff: DefaultInitialBackoff,
		MaxBackoff: DefaultMaxBackoff, RPCTimeout: DefaultRPCTimeout,
	}
	if fmt.Sprint(o) != fmt.Sprint(want) {
		t.Fatalf("defaults %+v, want %+v", o, want)
	}
	for _, bad := range []ReporterOptions{
		{BatchSize: MaxBatchSize + 1, QueueSize: 5000},
		{BatchSize: -1},
		{QueueSize: 10, BatchSize: 50},
		{QueueSize: -1},
		{Linger: -time.Second},
		{Concurrency: -1},
		{InitialBackoff: time.Second, MaxBackoff: time.Millisecond},
		{InitialBackoff: time.Second, MaxBackoff: time.Second - 1},
		// Not caught by MaxBackoff's check (its default is 5 s): a
		// negative backoff would make the retry loop's rand.N panic.
		{InitialBackoff: -time.Second},
		{RPCTimeout: -1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", bad)
		}
	}
	// Every problem is named, not only the first.
	two := ReporterOptions{Linger: -time.Second, RPCTimeout: -1}
	if err := two.Validate(); err == nil || !strings.Contains(err.Error(), "Linger") || !strings.Contains(err.Error(), "RPCTimeout") {
		t.Errorf("Validate(%+v) = %v, want both fields named", two, err)
	}
	// MaxBackoff left zero takes a longer InitialBackoff, as its doc says.
	long := ReporterOptions{InitialBackoff: 2 * DefaultMaxBackoff}
	if err := long.Validate(); err != nil || long.MaxBackoff != long.InitialBackoff {
		t.Errorf("Validate(InitialBackoff %v) = %v, MaxBackoff %v; want MaxBackoff = InitialBackoff",
			long.InitialBackoff, err, long.MaxBackoff)
	}
	if _, err := NewReporter(newFake(nil), ReporterOptions{BatchSize: 2000}); err == nil {
		t.Error("NewReporter accepted BatchSize 2000")
	}
	if _, err := NewReporter(nil, ReporterOptions{}); err == nil {
		t.Error("NewReporter accepted a nil sender")
	}
}

func TestDuplicateRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := prometheus.WrapRegistererWith(prometheus.Labels{"target": "a"}, reg)
	newTestReporter(t, newFake(nil), ReporterOptions{Registerer: a})
	if _, err := NewReporter(newFake(nil), ReporterOptions{Registerer: a}); err == nil {
		t.Fatal("second Reporter on one Registerer: want an error")
	}
	// Wrapped with another label value, a second one is fine.
	b := prometheus.WrapRegistererWith(prometheus.Labels{"target": "b"}, reg)
	newTestReporter(t, newFake(nil), ReporterOptions{Registerer: b})
	if got := len(gather(t, reg)); got != 2*21 {
		t.Fatalf("%d series, want 2 reporters x (2 gauges + 5 outcomes + retries + 2 answers + 10 attempt results + the attempt histogram)", got)
	}
}

// ReporterOptions.Registerer: beside a Reporter registered unwrapped, one
// wrapped with a label fails too (Prometheus takes one metric name with
// one set of label names), so each must be wrapped; a prefix works.
func TestSecondReporterBesideAnUnwrappedOne(t *testing.T) {
	reg := prometheus.NewRegistry()
	newTestReporter(t, newFake(nil), ReporterOptions{Registerer: reg})
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"target": "b"}, reg)
	if _, err := NewReporter(newFake(nil), ReporterOptions{Registerer: wrapped}); err == nil {
		t.Fatal("a wrapped Reporter beside an unwrapped one registered: ReporterOptions.Registerer says it fails")
	}
	newTestReporter(t, newFake(nil), ReporterOptions{Registerer: prometheus.WrapRegistererWithPrefix("b_", reg)})
	if got := len(gather(t, reg)); got != 2*21 {
		t.Fatalf("%d series, want 2 reporters x 21", got)
	}
}

// Close takes the gauge off the Registerer, however it returns, so a
// Reporter that replaces a closed one can register on the same Registerer;
// the counters stay, so a scrape after a Close that gave up still sees its
// drops, and the new Reporter counts on in them. A later Close of the old
// one leaves the new one's gauge alone.
func TestCloseLeavesTheCountersForTheNextReporter(t *testing.T) {
	reg := prometheus.NewRegistry()
	const depth = "combo_reporter_queue_depth"

	// A Close that flushes.
	a := newTestReporter(t, newFake(nil), ReporterOptions{Registerer: reg, Linger: time.Hour})
	mustReport(t, a, 1)
	closeWithin(t, a)
	if err := a.Report(context.Background(), contribution(2)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Report after Close = %v, want ErrClosed", err)
	}
	m := gather(t, reg)
	if _, ok := m["combo_reporter_oldest_held_seconds"]; ok {
		t.Fatalf("after Close the registry exports %v, with the oldest-held gauge", m)
	}
	if _, ok := m[depth]; ok || m["combo_reporter_reports_total{outcome=sent}"] != 1 ||
		m["combo_reporter_reports_total{outcome=closed}"] != 1 {
		t.Fatalf("after Close the registry exports %v, want no gauge, 1 sent, 1 closed", m)
	}

	// A Close that gives up, with a contribution held.
	f := newFake(func(ctx context.Context, _ int, _ []*combo.Contribution) error {
		<-ctx.Done()
		return ctx.Err()
	})
	b := newTestReporter(t, f, ReporterOptions{
		Registerer: reg, BatchSize: 1, RPCTimeout: time.Hour, OnDrop: newDropLog().onDrop,
	})
	mustReport(t, b, 1)
	f.recv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v, want context.Canceled", err)
	}
	m = gather(t, reg)
	if _, ok := m[depth]; ok || m["combo_reporter_reports_total{outcome=dropped}"] != 1 ||
		m["combo_reporter_reports_total{outcome=sent}"] != 1 {
		t.Fatalf("after a Close that gave up the registry exports %v, want no gauge, 1 dropped, 1 sent", m)
	}

	c := newTestReporter(t, newFake(nil), ReporterOptions{Registerer: reg, Linger: time.Hour})
	mustReport(t, c, 3)
	closeWithin(t, a) // again: must not unregister c's gauge
	_ = b.Close(context.Background())
	m = gather(t, reg)
	if len(m) != 21 || m[depth] != 1 || m["combo_reporter_reports_total{outcome=dropped}"] != 1 ||
		m["combo_reporter_attempts_total{result=ok}"] != 1 {
		t.Fatalf("metrics %v, want the new Reporter's 21 series, holding 1, counting on from 1 dropped "+
			"and 1 attempt ok", m)
	}
	closeWithin(t, c)
	if m = gather(t, reg); m["combo_reporter_reports_total{outcome=sent}"] != 2 {
		t.Fatalf("after the new Reporter's Close: %v, want 2 sent", m)
	}
}

// combo_reporter_oldest_held_seconds is the age of the oldest contribution
// held, queued or in flight, and 0 when nothing is: the sign that reports
// wait (a retried batch, a service down) long enough to miss their window.
func TestOldestHeldGaugeIsTheAgeOfTheOldestContributionHeld(t *testing.T) {
	const oldest = "combo_reporter_oldest_held_seconds"
	// check reads the gauge on reg against the times around the one
	// Report: at least the age of its return, at most that of its call.
	check := func(t *testing.T, reg *prometheus.Registry, called, returned time.Time, what string) {
		t.Helper()
		least := time.Since(returned).Seconds()
		age := gather(t, reg)[oldest]
		if most := time.Since(called).Seconds(); age <= 0 || age < least || age > most {
			t.Fatalf("%s: %s = %v, want its age, in [%v, %v] and above 0", what, oldest, age, least, most)
		}
	}

	t.Run("queued", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		r := newTestReporter(t, newFake(nil), ReporterOptions{Registerer: reg, BatchSize: 2, Linger: time.Hour})
		if age := gather(t, reg)[oldest]; age != 0 {
			t.Fatalf("holding nothing: %s = %v, want 0", oldest, age)
		}
		called := time.Now()
		mustReport(t, r, 1)
		check(t, reg, called, time.Now(), "one queued, none in flight")
	})

	// The ordering cases: the oldest of several, with reports apart in
	// time (gap) so that the youngest's age is below the oldest's least.
	const gap = 50 * time.Millisecond
	// blocking is a sender whose calls wait for release (refusing the
	// first's first item if told to); register release with t.Cleanup
	// after the Reporter, so that it runs before the Reporter's Close.
	blocking := func(refuseFirst bool) (f *fakeSender, release func()) {
		ch := make(chan struct{})
		return newFake(func(_ context.Context, attempt int, _ []*combo.Contribution) error {
			if refuseFirst && attempt == 1 {
				return &combo.ComboError{Code: CodeInvalidArgument, Message: "contributions[0].item_id: must be > 0, got 0"}
			}
			<-ch
			return nil
		}), sync.OnceFunc(func() { close(ch) })
	}
	t.Run("two_queued", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		r := newTestReporter(t, newFake(nil), ReporterOptions{Registerer: reg, BatchSize: 3, Linger: time.Hour})
		called := time.Now()
		mustReport(t, r, 1)
		returned := time.Now()
		time.Sleep(gap)
		mustReport(t, r, 2)
		check(t, reg, called, returned, "two queued: the first")
	})
	t.Run("one_batch_of_three", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		f, release := blocking(false)
		r := newTestReporter(t, f, ReporterOptions{Registerer: reg, BatchSize: 3, Linger: time.Hour})
		t.Cleanup(release)
		called := time.Now()
		mustReport(t, r, 1)
		returned := time.Now()
		time.Sleep(gap)
		mustReport(t, r, 2, 3) // the third cuts the batch
		f.recv(t)
		check(t, reg, called, returned, "a batch of three in flight: its first")
	})
	t.Run("two_batches_in_flight", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		f, release := blocking(false)
		r := newTestReporter(t, f, ReporterOptions{Registerer: reg, BatchSize: 1, Concurrency: 2})
		t.Cleanup(release)
		called := time.Now()
		mustReport(t, r, 1)
		returned := time.Now()
		f.recv(t)
		time.Sleep(gap)
		mustReport(t, r, 2)
		f.recv(t)
		check(t, reg, called, returned, "two batches in flight: the first's")
	})
	t.Run("first_item_refused", func(t *testing.T) {
		// The service refuses the batch's first item, the oldest; the rest
		// is sent again and held: the age is the second's, not the
		// dropped one's.
		reg := prometheus.NewRegistry()
		f, release := blocking(true)
		r := newTestReporter(t, f, ReporterOptions{Registerer: reg, BatchSize: 2, Linger: time.Hour,
			OnDrop: func([]*combo.Contribution, error) {}})
		t.Cleanup(release)
		mustReport(t, r, 1)
		time.Sleep(gap)
		called := time.Now()
		mustReport(t, r, 2) // cuts the batch
		returned := time.Now()
		f.recv(t) // refused
		f.recv(t) // the second alone, held
		check(t, reg, called, returned, "the first refused, the second in flight")
	})

	t.Run("in_flight", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		release := make(chan struct{})
		f := newFake(func(context.Context, int, []*combo.Contribution) error {
			<-release
			return nil
		})
		r := newTestReporter(t, f, ReporterOptions{Registerer: reg, BatchSize: 1})
		releaseOnce := sync.OnceFunc(func() { close(release) })
		t.Cleanup(releaseOnce) // before the Reporter's own cleanup closes it
		called := time.Now()
		mustReport(t, r, 1)
		returned := time.Now()
		f.recv(t) // in flight, its sender waiting; nothing queued
		check(t, reg, called, returned, "one in flight, none queued")

		releaseOnce()
		deadline := time.Now().Add(waitFor)
		for r.Stats().Sent != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("not sent: %+v", r.Stats())
			}
			time.Sleep(time.Millisecond)
		}
		if age := gather(t, reg)[oldest]; age != 0 {
			t.Fatalf("after it was sent: %s = %v, want 0", oldest, age)
		}
	})
}

// A collector of another shape under one of the metrics' names is not
// taken for a closed Reporter's: NewReporter fails, naming the metric, and
// leaves the Registerer as it was: what it registered before the conflict
// (the gauge, the counters before it) is taken off again, whichever
// metric the conflict is on.
func TestNewReporterRefusesAForeignCollectorOfAMetricsName(t *testing.T) {
	for _, name := range []string{metricQueueDepth, metricOldestHeld, metricReportsTotal, metricRetriesTotal,
		metricAnswersTotal, metricAttempts, metricAttemptTime} {
		t.Run(name, func(t *testing.T) {
			reg := &recordingRegisterer{Registry: prometheus.NewRegistry(), held: map[prometheus.Collector]bool{}}
			foreign := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: "someone else's"}, []string{"x", "y"})
			reg.MustRegister(foreign)
			_, err := NewReporter(newFake(nil), ReporterOptions{Registerer: reg})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("NewReporter = %v, want an error naming %s", err, name)
			}
			if len(reg.held) != 1 || !reg.held[foreign] {
				t.Fatalf("after the failed NewReporter the Registerer holds %d collectors, want the foreign one only", len(reg.held))
			}
		})
	}
}

// recordingRegisterer knows which collectors it holds.
type recordingRegisterer struct {
	*prometheus.Registry
	held map[prometheus.Collector]bool
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	err := r.Registry.Register(c)
	if err == nil {
		r.held[c] = true
	}
	return err
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recordingRegisterer) Unregister(c prometheus.Collector) bool {
	ok := r.Registry.Unregister(c)
	if ok {
		delete(r.held, c)
	}
	return ok
}

// The error OnDrop gets tells why, with errors.Is: retries exhausted, or
// a Close that gave up; each wraps the underlying cause too.
func TestDropErrorsTellWhy(t *testing.T) {
	errDown := errors.New("service down")
	f := newFake(func(context.Context, int, []*combo.Contribution) error { return errDown })
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 1, MaxRetries: 1, InitialBackoff: time.Millisecond,
		OnDrop: drops.onDrop})
	mustReport(t, r, 1)
	drops.recv(t)
	_, errs := drops.snapshot()
	if !errors.Is(errs[0], ErrRetriesExhausted) || !errors.Is(errs[0], errDown) || errors.Is(errs[0], ErrClosed) {
		t.Fatalf("drop after retries = %v, want ErrRetriesExhausted wrapping the last error", errs[0])
	}

	g := newFake(func(ctx context.Context, _ int, _ []*combo.Contribution) error {
		<-ctx.Done()
		return ctx.Err()
	})
	drops = newDropLog()
	r = newTestReporter(t, g, ReporterOptions{BatchSize: 1, RPCTimeout: time.Hour, OnDrop: drops.onDrop})
	mustReport(t, r, 1)
	g.recv(t)
	closeGivingUp(t, r)
	_, errs = drops.snapshot()
	if len(errs) != 1 || !errors.Is(errs[0], ErrClosed) || !errors.Is(errs[0], context.Canceled) ||
		errors.Is(errs[0], ErrRetriesExhausted) {
		t.Fatalf("drops at Close = %v, want one ErrClosed wrapping context.Canceled", errs)
	}
}

// Close(nil) is Close(context.Background()): it flushes and returns nil,
// where it used to panic with the Reporter half closed.
func TestCloseWithANilContextFlushes(t *testing.T) {
	f := newFake(nil)
	r := newTestReporter(t, f, ReporterOptions{Linger: time.Hour})
	mustReport(t, r, 1)
	//lint:ignore SA1012 a nil ctx is what this test is about
	if err := r.Close(nil); err != nil { //nolint:staticcheck
		t.Fatalf("Close(nil) = %v", err)
	}
	if s := r.Stats(); s.Sent != 1 {
		t.Fatalf("after Close(nil): %+v, want 1 sent", s)
	}
}

// closeGivingUp closes r with a ctx already canceled: Close gives up on
// whatever is held, and says so.
func closeGivingUp(t *testing.T, r *Reporter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with its ctx canceled = %v, want context.Canceled", err)
	}
}

// Once a Close gives up, every other Close returns the same at once: one
// called after it, and one already waiting for the sends. Neither waits
// for a send whose sender ignores its canceled ctx (as in
// TestCloseExpiredDropsRemainder, where the giving-up Close does not).
func TestCloseAfterOneGaveUpDoesNotWaitForStuckSend(t *testing.T) {
	for _, waiting := range []bool{false, true} {
		t.Run(fmt.Sprintf("already_waiting=%v", waiting), func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			f := newFake(func(context.Context, int, []*combo.Contribution) error {
				<-release // ignores ctx
				return nil
			})
			r := newTestReporter(t, f, ReporterOptions{BatchSize: 1, Linger: time.Hour, RPCTimeout: time.Hour,
				OnDrop: func([]*combo.Contribution, error) {}})
			mustReport(t, r, 1)
			f.recv(t)
			other := make(chan error, 1)
			closeOther := func() { other <- r.Close(context.Background()) }
			if waiting {
				go closeOther()
				// It has begun, and waits for the send.
				for deadline := time.Now().Add(waitFor); !r.closed.Load(); runtime.Gosched() {
					if time.Now().After(deadline) {
						t.Fatal("the other Close never began")
					}
				}
			}
			closeGivingUp(t, r)
			if !waiting {
				go closeOther()
			}
			select {
			case err := <-other:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("other Close = %v, want the giving-up one's context.Canceled", err)
				}
			case <-time.After(waitFor):
				t.Fatal("a Close waited for the stuck send after another gave up")
			}
		})
	}
}

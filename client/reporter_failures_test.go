package client

import (
	"bytes"
	"context"
	"encoding/json"
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

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testkitex"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// slowService answers ReportContributions after delay, over real Kitex.
type slowService struct {
	delay time.Duration
	stop  chan struct{} // closed by the test's cleanup: answer at once
}

var _ combo.ComboService = (*slowService)(nil)

func (s *slowService) ReportContribution(context.Context, *combo.ReportContributionRequest) (*combo.ReportContributionResponse, error) {
	return nil, &combo.ComboError{Code: CodeInternal, Message: "not used"}
}

func (s *slowService) ReportContributions(_ context.Context, req *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stop:
	}
	resp := &combo.ReportContributionsResponse{Results: make([]*combo.ReportContributionResponse, len(req.GetContributions()))}
	for i, c := range req.GetContributions() {
		resp.Results[i] = &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity}
	}
	return resp, nil
}

func (s *slowService) MergeLatest(context.Context, *combo.MergeLatestRequest) (*combo.MergeLatestResponse, error) {
	return nil, &combo.ComboError{Code: CodeInternal, Message: "not used"}
}

// A Reporter's RPCTimeout above NewClient's 1 s default must take effect:
// the server answers after 1.5 s, within the Reporter's 3 s.
func TestRPCTimeoutOverridesClientDefault(t *testing.T) {
	const delay = 1500 * time.Millisecond
	if delay <= DefaultClientRPCTimeout {
		t.Fatalf("delay %v must exceed the client default %v", delay, DefaultClientRPCTimeout)
	}
	svc := &slowService{delay: delay, stop: make(chan struct{})}
	addr := testkitex.Serve(t, svc)
	t.Cleanup(func() { close(svc.stop) }) // runs before the server stops
	cli, err := NewClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	drops := newDropLog()
	r := newTestReporter(t, cli, ReporterOptions{
		BatchSize: 2, Linger: time.Hour, MaxRetries: -1, RPCTimeout: 3 * time.Second, OnDrop: drops.onDrop,
	})

	start := time.Now()
	mustReport(t, r, 1, 2)
	closeWithin(t, r)
	if got, errs := drops.snapshot(); len(got) != 0 {
		t.Fatalf("after %v, OnDrop got %v: %v; want the batch sent", time.Since(start), got, errs)
	}
	if s := r.Stats(); s.Sent != 2 || s.Dropped != 0 {
		t.Fatalf("stats %+v, want 2 sent", s)
	}
	if d := time.Since(start); d < delay {
		t.Fatalf("sent after %v, before the server's %v delay", d, delay)
	}
}

// syncBuffer is a zapcore.WriteSyncer the test can read while a Reporter
// writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Sync() error { return nil }

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// captureDefaultDropLog makes the default drop logger write to the
// returned buffer until the test ends.
func captureDefaultDropLog(t *testing.T) *syncBuffer {
	out := &syncBuffer{}
	old := defaultDropLogOutput
	defaultDropLogOutput = out
	t.Cleanup(func() { defaultDropLogOutput = old })
	return out
}

// With no OnDrop and no Logger, a drop is still logged, at error level, by
// the default logger (stderr in production; a buffer here).
func TestDefaultLoggerReportsDrops(t *testing.T) {
	out := captureDefaultDropLog(t)

	f := newFake(func(context.Context, int, []*combo.Contribution) error { return errTransport })
	// No OnDrop, no Logger; no retries, whose default budget is seconds.
	r := newTestReporter(t, f, ReporterOptions{MaxRetries: -1})
	// Concurrent callers interleave: the batch's ids are no range.
	mustReport(t, r, 1, 5, 2)
	closeWithin(t, r) // flushes, retries, drops

	if s := r.Stats(); s.Dropped != 3 {
		t.Fatalf("stats %+v, want 3 dropped", s)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 || lines[0] == "" {
		t.Fatalf("default logger wrote %q, want one line for the one dropped batch", out.String())
	}
	var entry struct {
		Level string  `json:"level"`
		Msg   string  `json:"msg"`
		Count int     `json:"count"`
		First int64   `json:"first_id"`
		Last  int64   `json:"last_id"`
		IDs   []int64 `json:"ids"`
		Error string  `json:"error"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
		t.Fatalf("log line %q: %v", lines[0], err)
	}
	// Without OnDrop, this line is all that names the dropped
	// contributions: it must name each, not only the first and last.
	if entry.Level != "error" || entry.Count != 3 || entry.First != 1 || entry.Last != 2 ||
		!slices.Equal(entry.IDs, []int64{1, 5, 2}) ||
		!strings.Contains(entry.Error, errTransport.Error()) || !strings.Contains(entry.Msg, "dropped") {
		t.Fatalf("log entry %+v, want an error-level drop naming ids 1, 5, 2 and the transport error", entry)
	}
}

// A dropped batch of 600 long ids is logged in lines of at most 256 ids,
// each well under the 16 KB at which container runtimes split a line,
// and together naming every id once.
func TestDropLinesStayShort(t *testing.T) {
	out := captureDefaultDropLog(t)

	f := newFake(func(context.Context, int, []*combo.Contribution) error { return errTransport })
	r := newTestReporter(t, f, ReporterOptions{MaxRetries: -1, BatchSize: 600, QueueSize: 600, Linger: time.Hour})
	const base = int64(1_000_000_000_000_000_000) // 19 digits
	var want []int64
	for i := range int64(600) {
		c := contribution(base + i)
		c.CreatedAt = 1_732_950_000_000 + i
		mustReportPtr(t, r, c)
		want = append(want, c.Id)
	}
	closeWithin(t, r) // one batch of 600, dropped

	var got []int64
	for line := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
		var entry struct {
			Count int     `json:"count"`
			IDs   []int64 `json:"ids"`
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("log line of %d bytes: %v", len(line), err)
		}
		if len(entry.IDs) > 256 || entry.Count != len(entry.IDs) || len(line) > 8<<10 {
			t.Errorf("a drop line of %d bytes names %d ids (count %d), want at most 256 and a few KB", len(line), len(entry.IDs), entry.Count)
		}
		got = append(got, entry.IDs...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("drop lines named %d ids, want the 600 reported, each once, in order", len(got))
	}
}

// The fallback applies only when nothing else would see a drop: a caller's
// Logger or OnDrop is used as given.
func TestDefaultLoggerOnlyWhenUnobserved(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	for _, tc := range []struct {
		name    string
		opts    ReporterOptions
		wantAny bool // some Logger in effect
	}{
		{"zero options", ReporterOptions{}, true},
		{"OnDrop only", ReporterOptions{OnDrop: func([]*combo.Contribution, error) {}}, false},
		{"Logger given", ReporterOptions{Logger: zap.New(core)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestReporter(t, newFake(nil), tc.opts)
			if got := r.opts.Logger != nil; got != tc.wantAny {
				t.Fatalf("Logger set = %v, want %v", got, tc.wantAny)
			}
			if tc.opts.Logger != nil && r.opts.Logger != tc.opts.Logger {
				t.Fatal("the caller's Logger was replaced")
			}
		})
	}
	// The caller's Logger receives the drop.
	f := newFake(func(context.Context, int, []*combo.Contribution) error { return errTransport })
	r := newTestReporter(t, f, ReporterOptions{MaxRetries: -1, Logger: zap.New(core)})
	mustReport(t, r, 5)
	closeWithin(t, r)
	if es := logs.FilterMessageSnippet("dropped").All(); len(es) != 1 || es[0].Level != zapcore.ErrorLevel {
		t.Fatalf("caller's logger got %v, want one error-level drop", logs.All())
	}
}

// With both a Logger and OnDrop, a drop reaches both: the Logger logs every
// drop "in addition to OnDrop", so a caller's OnDrop (a re-report, a
// counter) does not take the drop lines out of its logs. (Mutant: drop logs
// to Logger only when OnDrop is nil.)
func TestLoggerAndOnDropBothGetADrop(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	f := newFake(func(context.Context, int, []*combo.Contribution) error { return errTransport })
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{MaxRetries: -1, Logger: zap.New(core), OnDrop: drops.onDrop})
	mustReport(t, r, 5)
	closeWithin(t, r)
	if got, _ := drops.snapshot(); !slices.Equal(got, []int64{5}) {
		t.Fatalf("OnDrop got %v, want [5]", got)
	}
	es := logs.FilterMessageSnippet("dropped").All()
	if len(es) != 1 || es[0].Level != zapcore.ErrorLevel {
		t.Fatalf("Logger got %v, want one error-level drop besides OnDrop's", logs.All())
	}
	if ids, ok := es[0].ContextMap()["ids"].([]any); !ok || len(ids) != 1 || ids[0] != int64(5) {
		t.Fatalf("drop line ids %v, want [5]", es[0].ContextMap()["ids"])
	}
}

// refuseIDs is a sender that refuses, like combo-service's validation, any
// batch holding one of bad, naming the first such item by its index.
func refuseIDs(field string, bad ...int64) *fakeSender {
	return newFake(func(_ context.Context, _ int, items []*combo.Contribution) error {
		for i, c := range items {
			if slices.Contains(bad, c.Id) {
				return &combo.ComboError{Code: CodeInvalidArgument, Message: fmt.Sprintf("contributions[%d]%s", i, field)}
			}
		}
		return nil
	})
}

// A batch refused for one item drops only that item, with the server's
// error, and sends the rest again at once, without counting a retry.
func TestInvalidItemDroppedAlone(t *testing.T) {
	cases := []struct {
		name         string
		field        string
		bad          []int64
		wantAttempts [][]int64
	}{
		{"one bad field", ".quantity: must be 1..100000, got 0", []int64{4}, [][]int64{ids(1, 6), {1, 2, 3, 5, 6}}},
		{"nil item", ": required", []int64{1}, [][]int64{ids(1, 6), ids(2, 6)}},
		{"two bad items", ".created_at: must be unix milliseconds", []int64{2, 6}, [][]int64{ids(1, 6), {1, 3, 4, 5, 6}, {1, 3, 4, 5}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := refuseIDs(tc.field, tc.bad...)
			drops := newDropLog()
			r := newTestReporter(t, f, ReporterOptions{
				BatchSize: 6, Linger: time.Hour, InitialBackoff: time.Hour, OnDrop: drops.onDrop,
			})
			mustReport(t, r, ids(1, 6)...)
			closeWithin(t, r) // an hour's backoff would time this out: resends are at once

			attempts, _ := f.snapshot()
			if !slices.EqualFunc(attempts, tc.wantAttempts, slices.Equal) {
				t.Fatalf("attempts %v, want %v", attempts, tc.wantAttempts)
			}
			got, errs := drops.snapshot()
			if !slices.Equal(got, tc.bad) {
				t.Fatalf("OnDrop got %v, want only %v", got, tc.bad)
			}
			for _, err := range errs {
				ce, ok := IsComboError(err)
				if !ok || ce.Code != CodeInvalidArgument || !strings.HasSuffix(ce.Message, tc.field) {
					t.Fatalf("OnDrop err %v, want the server's INVALID_ARGUMENT", err)
				}
			}
			s := r.Stats()
			checkConsistent(t, s)
			want := ReporterStats{Accepted: 6, Sent: uint64(6 - len(tc.bad)), Dropped: uint64(len(tc.bad))}
			if s != want {
				t.Fatalf("stats %+v, want %+v", s, want)
			}
		})
	}
}

// A refusal that names no item of the batch still drops the whole batch.
func TestInvalidBatchWithoutIndexDroppedWhole(t *testing.T) {
	for _, msg := range []string{
		"contributions: must hold 1..1000 items, got 0",
		"contributions[9].id: must be > 0, got 0", // out of range
		"contributions[-1].id: must be > 0, got 0",
		"contributions[x].id: must be > 0, got 0",
		"contribution.id: must be > 0, got 0",
		"",
	} {
		t.Run(msg, func(t *testing.T) {
			refusal := &combo.ComboError{Code: CodeInvalidArgument, Message: msg}
			f := newFake(func(context.Context, int, []*combo.Contribution) error { return refusal })
			drops := newDropLog()
			r := newTestReporter(t, f, ReporterOptions{BatchSize: 3, Linger: time.Hour, OnDrop: drops.onDrop})
			mustReport(t, r, 1, 2, 3)
			closeWithin(t, r)
			if attempts, _ := f.snapshot(); len(attempts) != 1 {
				t.Fatalf("%d attempts, want 1", len(attempts))
			}
			got, errs := drops.snapshot()
			if !slices.Equal(got, []int64{1, 2, 3}) || len(errs) != 1 || !errors.Is(errs[0], refusal) {
				t.Fatalf("OnDrop(%v, %v), want the whole batch once", got, errs)
			}
		})
	}
}

// A refusal during a retry drops the named item and resends the rest at
// once: the retry before it is counted, the resend is not.
func TestInvalidItemThenRetryCounts(t *testing.T) {
	// Attempt 1 fails in transport; the retry is refused for id 2; the rest
	// goes again at once and succeeds.
	f := newFake(func(_ context.Context, attempt int, items []*combo.Contribution) error {
		switch {
		case attempt == 1:
			return errTransport
		case slices.ContainsFunc(items, func(c *combo.Contribution) bool { return c.Id == 2 }):
			return &combo.ComboError{Code: CodeInvalidArgument, Message: "contributions[1].item_id: must be > 0, got 0"}
		}
		return nil
	})
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{
		BatchSize: 3, Linger: time.Hour, InitialBackoff: time.Millisecond, OnDrop: drops.onDrop,
	})
	mustReport(t, r, 1, 2, 3)
	closeWithin(t, r)
	attempts, _ := f.snapshot()
	if want := [][]int64{{1, 2, 3}, {1, 2, 3}, {1, 3}}; !slices.EqualFunc(attempts, want, slices.Equal) {
		t.Fatalf("attempts %v, want %v", attempts, want)
	}
	if got, _ := drops.snapshot(); !slices.Equal(got, []int64{2}) {
		t.Fatalf("OnDrop got %v, want [2]", got)
	}
	if s := r.Stats(); s != (ReporterStats{Accepted: 3, Sent: 2, Dropped: 1, Retried: 3}) {
		t.Fatalf("stats %+v, want 2 sent, 1 dropped, one retry of 3", s)
	}
}

// The other way round: after a refusal dropped an item and the rest went
// again at once, a transport failure of the rest is a retry like any other,
// waited for (a backoff drawn) and counted; the resend does not leave the
// batch retrying at once, which would spend its MaxRetries in milliseconds
// instead of riding out the outage. (Mutant: the send loop no longer
// resets resend.)
func TestRetryAfterARefusedItemBacksOff(t *testing.T) {
	// Attempt 1 is refused for id 2; the rest fails in transport once, then
	// goes through.
	f := newFake(func(_ context.Context, attempt int, items []*combo.Contribution) error {
		switch attempt {
		case 1:
			return &combo.ComboError{Code: CodeInvalidArgument, Message: "contributions[1].item_id: must be > 0, got 0"}
		case 2:
			return errTransport
		}
		return nil
	})
	var draws atomic.Int32
	drops := newDropLog()
	r, err := newReporter(f, ReporterOptions{
		BatchSize: 3, Linger: time.Hour, InitialBackoff: time.Millisecond, OnDrop: drops.onDrop,
	}, func(time.Duration) time.Duration { draws.Add(1); return 0 })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // if it fails before closeWithin
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = r.Close(ctx)
	})
	mustReport(t, r, 1, 2, 3)
	closeWithin(t, r)
	attempts, _ := f.snapshot()
	if want := [][]int64{{1, 2, 3}, {1, 3}, {1, 3}}; !slices.EqualFunc(attempts, want, slices.Equal) {
		t.Fatalf("attempts %v, want %v", attempts, want)
	}
	if n := draws.Load(); n != 1 {
		t.Fatalf("%d backoff draws, want 1: the retry after the transport failure waits", n)
	}
	if s := r.Stats(); s != (ReporterStats{Accepted: 3, Sent: 2, Dropped: 1, Retried: 2}) {
		t.Fatalf("stats %+v, want 2 sent, 1 dropped, one retry of 2", s)
	}
}

// Under random failures (before or after the service commits), refusals
// naming one item, and batches of several keys at once, each combo key's
// contributions are first delivered in Report order, every one ends sent
// or dropped exactly once, and the stats stay consistent throughout.
func TestStressKeepsPerKeyOrder(t *testing.T) {
	const producers, keysEach, reportsEach = 4, 4, 250
	var inFlight, maxInFlight atomic.Int32 // the order must not come from sending one batch at a time
	for round := range 3 {
		var mu sync.Mutex
		delivered := map[int64]bool{} // ids the service counted, at least once
		var firstOrder []int64        // ids in the order the service first counted them
		sent := map[int64]int{}       // ids of acknowledged attempts
		dropped := map[int64]int{}
		bad := func(id int64) bool { return id%53 == 0 }

		s := senderFunc(func(ctx context.Context, req *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
			items := req.GetContributions()
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			if m := maxInFlight.Load(); n > m {
				maxInFlight.CompareAndSwap(m, n)
			}
			if rand.IntN(4) == 0 {
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			}
			for i, c := range items { // validated whole first: nothing counted
				if bad(c.Id) {
					return nil, &combo.ComboError{Code: CodeInvalidArgument, Message: fmt.Sprintf("contributions[%d].quantity: bad", i)}
				}
			}
			fate := rand.IntN(10) // 0..1 fail before the commit, 2 after it
			if fate < 2 {
				return nil, errTransport
			}
			mu.Lock()
			defer mu.Unlock()
			for _, c := range items {
				if !delivered[c.Id] {
					delivered[c.Id] = true
					firstOrder = append(firstOrder, c.Id)
				}
			}
			if fate == 2 {
				return nil, errTransport // committed, but the answer was lost
			}
			for _, c := range items {
				sent[c.Id]++
			}
			return &combo.ReportContributionsResponse{Results: make([]*combo.ReportContributionResponse, len(items))}, nil
		})
		opts := ReporterOptions{
			QueueSize: 64, BatchSize: 4, Linger: 200 * time.Microsecond, Concurrency: 4,
			MaxRetries: 2, InitialBackoff: 100 * time.Microsecond, MaxBackoff: time.Millisecond,
			OnDrop: func(b []*combo.Contribution, _ error) {
				mu.Lock()
				defer mu.Unlock()
				for _, c := range b {
					dropped[c.Id]++
				}
			},
		}
		r := newTestReporter(t, s, opts)

		stop := make(chan struct{})
		watched := make(chan error, 1)
		go func() {
			for {
				select {
				case <-stop:
					watched <- nil
					return
				default:
				}
				st := r.Stats()
				if st.Accepted != st.Sent+st.Dropped+uint64(st.Queued)+uint64(st.InFlight) || st.Queued+st.InFlight > opts.QueueSize {
					watched <- fmt.Errorf("inconsistent stats %+v", st)
					return
				}
				runtime.Gosched()
			}
		}()

		// Each producer owns its keys, so its Report order is each key's.
		// Ids encode producer, key and sequence; user ids tell keys apart.
		order := make([][]int64, producers*keysEach) // accepted ids per key, in Report order
		var wg sync.WaitGroup
		for p := range producers {
			wg.Go(func() {
				for i := range reportsEach {
					k := p*keysEach + i%keysEach
					id := int64(round*100_000 + p*10_000 + i + 1)
					c := &combo.Contribution{
						Id: id, ActivityId: 7, UserId: int64(5000 + k), ItemId: 3, ItemType: "rose",
						Quantity: 1, CreatedAt: 1_732_950_000_000 + id,
					}
					for deadline := time.Now().Add(waitFor); ; {
						err := r.Report(context.Background(), c)
						if errors.Is(err, ErrQueueFull) && time.Now().Before(deadline) {
							time.Sleep(50 * time.Microsecond)
							continue
						}
						if err != nil {
							t.Errorf("Report(%d): %v", id, err)
							return
						}
						order[k] = append(order[k], id) // only this producer writes order[k]
						break
					}
				}
			})
		}
		wg.Wait()
		closeWithin(t, r)
		close(stop)
		if err := <-watched; err != nil {
			t.Fatal(err)
		}

		mu.Lock()
		keyOfID := map[int64]int{}
		for k, accepted := range order {
			for _, id := range accepted {
				keyOfID[id] = k
				if sent[id]+dropped[id] != 1 {
					t.Fatalf("round %d: id %d sent %d times and dropped %d times, want one of them once", round, id, sent[id], dropped[id])
				}
				if bad(id) && dropped[id] != 1 {
					t.Fatalf("round %d: refused id %d not dropped", round, id)
				}
			}
		}
		// Per key, first deliveries follow Report order (a dropped id may be
		// missing: it was never counted, or counted in its place).
		pos := map[int64]int{}
		for _, accepted := range order {
			for i, id := range accepted {
				pos[id] = i
			}
		}
		last := make([]int, len(order))
		for i := range last {
			last[i] = -1
		}
		for _, id := range firstOrder {
			k := keyOfID[id]
			if pos[id] < last[k] {
				t.Fatalf("round %d: key %d: id %d first delivered after a later report of its key", round, k, id)
			}
			last[k] = pos[id]
		}
		st := r.Stats()
		checkConsistent(t, st)
		var nSent, nDropped int
		for _, n := range sent {
			nSent += n
		}
		for _, n := range dropped {
			nDropped += n
		}
		if st.Accepted != producers*reportsEach || st.Sent != uint64(nSent) || st.Dropped != uint64(nDropped) ||
			st.Queued != 0 || st.InFlight != 0 {
			t.Fatalf("round %d: stats %+v; service acknowledged %d, OnDrop got %d", round, st, nSent, nDropped)
		}
		mu.Unlock()
	}
	if m := maxInFlight.Load(); m < 2 {
		t.Fatalf("at most %d batch in flight at once: the test did not exercise concurrency", m)
	}
}

// With the default options a batch outlives a short outage (a replica
// restarting, a Redis failover): its retries last seconds, not the
// half-second they once did, after which a second-long outage lost it.
func TestDefaultRetriesRideOutAnOutage(t *testing.T) {
	const outage = 1500 * time.Millisecond
	up := time.Now().Add(outage)
	f := newFake(func(context.Context, int, []*combo.Contribution) error {
		if time.Now().Before(up) {
			return errTransport
		}
		return nil
	})
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{OnDrop: drops.onDrop}) // default retries
	mustReport(t, r, 1, 2)
	waitStats(t, r, func(s ReporterStats) bool { return s.Sent == 2 || s.Dropped > 0 })
	if s := r.Stats(); s.Sent != 2 || s.Retried == 0 {
		t.Fatalf("stats %+v, want both sent after retrying through a %s outage", s, outage)
	}
}

// The service warns when its window.dedupe is shorter than the default
// retries can last (conf.ReporterRetryHorizon): each wait at most its full
// backoff, each attempt at most RPCTimeout.
func TestDefaultRetriesEndWithinTheServicesHorizon(t *testing.T) {
	var o ReporterOptions
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	worst := time.Duration(o.MaxRetries+1) * o.RPCTimeout
	for i, b := 0, o.InitialBackoff; i < o.MaxRetries; i, b = i+1, min(2*b, o.MaxBackoff) {
		worst += b
	}
	if worst > conf.ReporterRetryHorizon {
		t.Fatalf("default retries last up to %s, past conf.ReporterRetryHorizon (%s)", worst, conf.ReporterRetryHorizon)
	}
	// The service's dedupe warning and README say "up to about 32 s".
	if worst.Round(time.Second) != 32*time.Second {
		t.Fatalf("default retries last up to %s: update the 32 s in conf's window.dedupe warning and in README", worst)
	}
	t.Logf("default retries last up to %s", worst)
}

// A BatchSender that panics fails its attempt, which is retried and then
// dropped like any other failure: the panic must not escape the Reporter's
// goroutine, which would kill the caller's process.
func TestPanickingSenderFailsTheAttempt(t *testing.T) {
	f := newFake(func(_ context.Context, attempt int, _ []*combo.Contribution) error {
		if attempt <= 2 {
			panic("sender bug")
		}
		return nil
	})
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 2, Linger: time.Hour, MaxRetries: 1,
		InitialBackoff: time.Millisecond, OnDrop: drops.onDrop})
	mustReport(t, r, 1, 2) // attempts 1 and 2 panic: dropped
	drops.recv(t)
	_, errs := drops.snapshot()
	if !errors.Is(errs[0], ErrSenderPanicked) || !strings.Contains(errs[0].Error(), "sender bug") {
		t.Fatalf("OnDrop err %v, want ErrSenderPanicked naming the panic", errs[0])
	}
	mustReport(t, r, 3, 4) // attempt 3 succeeds: the Reporter goes on
	closeWithin(t, r)
	if s := r.Stats(); s.Sent != 2 || s.Dropped != 2 || s.Retried != 2 {
		t.Fatalf("stats %+v, want 2 sent, 2 dropped after 1 retry", s)
	}
}

// An OnDrop that panics is recovered, counted and logged with the ids it
// was handed (on the default logger, where the caller gave no Logger), and
// the Reporter goes on sending.
func TestPanickingOnDropIsLoggedAndCounted(t *testing.T) {
	out := captureDefaultDropLog(t)

	f := newFake(func(_ context.Context, _ int, items []*combo.Contribution) error {
		if items[0].Id < 10 {
			return errTransport
		}
		return nil
	})
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 2, Linger: time.Hour, MaxRetries: -1,
		OnDrop: func(batch []*combo.Contribution, _ error) {
			// A handler that hands its copies on (they are its own), then
			// fails: the Reporter must not read them again.
			done := make(chan struct{})
			go func() { batch[0].Id = -1; close(done) }()
			<-done
			panic("handler bug")
		}})
	mustReport(t, r, 1, 2)
	waitStats(t, r, func(s ReporterStats) bool { return s.OnDropPanics == 1 })
	mustReport(t, r, 11, 12)
	closeWithin(t, r)
	if s := r.Stats(); s.Sent != 2 || s.Dropped != 2 || s.OnDropPanics != 1 {
		t.Fatalf("stats %+v, want 2 sent, 2 dropped, 1 OnDrop panic", s)
	}
	logged := out.String()
	for _, want := range []string{`"ids":[1,2]`, "OnDrop panicked", "handler bug"} {
		if !strings.Contains(logged, want) {
			t.Errorf("default logger wrote %q, want it to hold %s", logged, want)
		}
	}
	if strings.Contains(logged, "-1") {
		t.Errorf("default logger wrote %q: ids read from OnDrop's copies after it changed them", logged)
	}
}

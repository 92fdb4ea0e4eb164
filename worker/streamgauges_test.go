package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// statsFailing is the real store whose StreamStats fails: two calls of
// every three while flaky is set, every call while down is.
type statsFailing struct {
	*repo.Repo
	flaky, down atomic.Bool
	calls, ok   atomic.Int64 // all calls; those that succeeded
	downCalls   atomic.Int64
	// atFourth, if set, is called at the fourth call while down; then
	// fourthDone is set.
	atFourth   func()
	fourthDone atomic.Bool
}

func (s *statsFailing) StreamStats(ctx context.Context, shard int) (repo.StreamStats, error) {
	n := s.calls.Add(1)
	if s.down.Load() && s.downCalls.Add(1) == 4 && s.atFourth != nil {
		s.atFourth()
		s.fourthDone.Store(true)
	}
	if s.down.Load() || s.flaky.Load() && n%3 != 0 {
		return repo.StreamStats{}, errors.New("i/o timeout")
	}
	s.ok.Add(1)
	return s.Repo.StreamStats(ctx, shard)
}

// A replica that cannot sample its streams stops exporting their length
// and pending count after a few failed samples in a row, not its last
// sample for good: the alerts take the highest value over replicas, and
// a replica cut off from Redis kept a cleared backlog on them. Two failed
// samples in a row (a slow Redis, when a backlog is real) keep them: a
// series missing at a scrape restarts the alerts' for: countdown.
func TestStreamGaugesGoWhenSamplingFails(t *testing.T) {
	r, _, _, m := setup(t)
	store := &statsFailing{Repo: r}
	exported := func() bool {
		return testutil.CollectAndCount(m.StreamLength) == 1 && testutil.CollectAndCount(m.StreamPending) == 1 &&
			testutil.CollectAndCount(m.StreamOverdue) == 1 && testutil.CollectAndCount(m.StreamIDsAhead) == 1
	}
	gone := func() bool {
		return testutil.CollectAndCount(m.StreamLength) == 0 && testutil.CollectAndCount(m.StreamPending) == 0 &&
			testutil.CollectAndCount(m.StreamOverdue) == 0 && testutil.CollectAndCount(m.StreamIDsAhead) == 0
	}
	// The third failure in a row takes them away: by the fourth sample
	// they are gone.
	var goneByFourth atomic.Bool
	store.atFourth = func() {
		goneByFourth.Store(gone())
	}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: 20 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	waitFor(t, "a first sample", exported)

	store.flaky.Store(true)
	from := store.calls.Load()
	for store.calls.Load() < from+20 { // two samples of every three fail
		if !exported() {
			t.Fatalf("the gauges went while two samples in a row failed, then one succeeded (%d samples)", store.calls.Load()-from)
		}
		time.Sleep(5 * time.Millisecond)
	}
	store.flaky.Store(false)
	// A sample that succeeds first: the failures in a row start from 0.
	oks := store.ok.Load()
	waitFor(t, "a sample after the flaky ones", func() bool { return store.ok.Load() > oks })

	store.down.Store(true)
	waitFor(t, "the gauges to go once every sample fails", gone)
	waitFor(t, "a fourth sample while every sample fails", store.fourthDone.Load)
	if !goneByFourth.Load() {
		t.Fatal("the gauges were still there at the fourth failed sample in a row, want gone after the third")
	}
	store.down.Store(false)
	waitFor(t, "a sample again", exported)
}

// flushRefused is the real store whose flushes Redis refuses while refuse
// is set, as it refuses the scripts of a slot stuck half-moved (TRYAGAIN).
type flushRefused struct {
	*repo.Repo
	refuse atomic.Bool
}

func (s *flushRefused) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	if s.refuse.Load() {
		return nil, errors.New("TRYAGAIN Multiple keys request during rehashing of slot")
	}
	return s.Repo.Flush(ctx, ws)
}

// A shard whose windows are not published shows it in
// combo_stream_oldest_overdue_seconds, growing from the oldest window's
// due time, before any window is dropped stale: push lag is observed only
// on a publish, so a slot stuck half-moved paged only once its windows
// were dropped. Once they are published it is 0 again.
func TestOverdueGaugeTellsWindowsNotPublished(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &flushRefused{Repo: r}
	store.refuse.Store(true)
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: 20 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	defer store.refuse.Store(false) // first: Shutdown waits for the held window's publish
	overdue := func() float64 { return testutil.ToFloat64(m.StreamOverdue.WithLabelValues("0")) }
	waitFor(t, "a first sample", func() bool { return testutil.CollectAndCount(m.StreamOverdue) == 1 })
	if got := overdue(); got != 0 {
		t.Fatalf("overdue %v s with no window, want 0", got)
	}

	opened := time.Now()
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	// Due W + grace after it opened, refused every flush since: the gauge
	// grows past 300 ms, and by no more than the time since it came due.
	waitFor(t, "the gauge past 300 ms", func() bool { return overdue() >= 0.3 })
	if got, most := overdue(), time.Since(opened)-w; got > most.Seconds() {
		t.Fatalf("overdue %v s, more than the %v since the window came due", got, most)
	}
	if n := testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(metrics.FlushedPublished)); n != 0 {
		t.Fatalf("%v windows published while every flush was refused", n)
	}

	store.refuse.Store(false)
	if p, err := push.Decode([]byte(nextPush(t, sub).Payload)); err != nil || p.ActivityID != 5 {
		t.Fatalf("pushed %+v (%v), want activity 5's window", p, err)
	}
	waitFor(t, "the gauge back to 0 once the window is published", func() bool { return overdue() == 0 })
}

// skewedStats is the real store whose stream samples say the oldest
// window comes due shift from what Redis says, and whose clock readings
// fail while noClock is set; samples counts the samples.
type skewedStats struct {
	*repo.Repo
	shift   time.Duration
	noClock atomic.Bool
	samples atomic.Int64
}

func (s *skewedStats) StreamStats(ctx context.Context, shard int) (repo.StreamStats, error) {
	st, err := s.Repo.StreamStats(ctx, shard)
	if st.OldestDue != 0 {
		st.OldestDue += s.shift.Milliseconds()
	}
	s.samples.Add(1)
	return st, err
}

func (s *skewedStats) Time(ctx context.Context, shard int) (time.Time, error) {
	if s.noClock.Load() {
		return time.Time{}, errors.New("i/o timeout")
	}
	return s.Repo.Time(ctx, shard)
}

// A window due ahead of the node's clock (its id ahead of the clock after
// the clock jumped back) is not overdue: the gauge says 0, not a negative
// time.
func TestOverdueGaugeOfAWindowDueAheadIsZero(t *testing.T) {
	r, _, _, m := setup(t)
	store := &skewedStats{Repo: r, shift: time.Hour}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: 20 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	from := store.samples.Load()
	waitFor(t, "three samples with the window in the stream", func() bool { return store.samples.Load() >= from+3 })
	if got := testutil.ToFloat64(m.StreamOverdue.WithLabelValues("0")); got != 0 {
		t.Fatalf("overdue %v s for a window due an hour ahead, want 0", got)
	}
}

// Before a first reading of the node's clock the gauge is not set from
// this host's clock, which may be off the node's by any amount: a replica
// whose every reading failed exports no overdue time for a window in the
// stream.
func TestOverdueGaugeWaitsForTheNodesClock(t *testing.T) {
	r, _, _, m := setup(t)
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	store := &skewedStats{Repo: r, shift: -time.Hour} // an hour overdue by any clock
	store.noClock.Store(true)
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: 20 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	defer store.noClock.Store(false) // first: Shutdown waits for the window's publish
	waitFor(t, "three samples", func() bool { return store.samples.Load() >= 3 })
	if n := testutil.CollectAndCount(m.StreamOverdue); n != 0 {
		t.Fatalf("overdue exported (%v s) with no reading of the node's clock", testutil.ToFloat64(m.StreamOverdue.WithLabelValues("0")))
	}
	store.noClock.Store(false)
	// Read, the clock lets the window be flushed too: the gauge then says
	// an hour, or 0 once it is gone, but is exported.
	waitFor(t, "the gauge once the clock is read", func() bool { return testutil.CollectAndCount(m.StreamOverdue) == 1 })
}

// hungShards is the real store whose StreamStats and Time never answer
// for shards below hung (they wait out the call's deadline), as a Redis
// Cluster master that hangs; sampled counts the others' samples.
type hungShards struct {
	*repo.Repo
	hung    int
	sampled atomic.Int64
}

func (s *hungShards) StreamStats(ctx context.Context, shard int) (repo.StreamStats, error) {
	if shard < s.hung {
		<-ctx.Done()
		return repo.StreamStats{}, ctx.Err()
	}
	s.sampled.Add(1)
	return s.Repo.StreamStats(ctx, shard)
}

func (s *hungShards) Time(ctx context.Context, shard int) (time.Time, error) {
	if shard < s.hung {
		<-ctx.Done()
		return time.Time{}, ctx.Err()
	}
	return s.Repo.Time(ctx, shard)
}

// On a Redis Cluster (NodePerShard) a master that does not answer delays
// the stream gauges of the other masters' shards by one OpTimeout a round,
// not one per hung shard: sampled in turn, 8 hung shards made each round
// take 8 × OpTimeout (and with them the other shards' clock readings and
// consumer removal; about 20 s with 128 shards over 3 masters).
func TestHungShardsDoNotSlowTheOthersSamples(t *testing.T) {
	const shards, hung, opTimeout = 10, 8, 300 * time.Millisecond
	r, _, _, m := setupShards(t, shards)
	store := &hungShards{Repo: r, hung: hung}
	wk := worker.New(store, worker.Config{Consumer: "c1", Shards: shards, ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		NodePerShard: true, OpTimeout: opTimeout, SampleEvery: 20 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	// Five rounds: each about 2 × 300 ms now (the clocks read, then the
	// samples), 300 ms + 8 × 300 ms sampled in turn.
	const rounds = 5
	const within = rounds * hung * opTimeout * 3 / 5
	deadline := time.Now().Add(within)
	for store.sampled.Load() < rounds*(shards-hung) {
		if time.Now().After(deadline) {
			t.Fatalf("the live shards were sampled %d times in %v, want %d: the hung shards held up each round",
				store.sampled.Load(), within, rounds*(shards-hung))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

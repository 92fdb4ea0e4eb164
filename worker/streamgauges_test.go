package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

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

func (s *statsFailing) StreamStats(ctx context.Context, shard int) (int64, int64, error) {
	n := s.calls.Add(1)
	if s.down.Load() && s.downCalls.Add(1) == 4 && s.atFourth != nil {
		s.atFourth()
		s.fourthDone.Store(true)
	}
	if s.down.Load() || s.flaky.Load() && n%3 != 0 {
		return 0, 0, errors.New("i/o timeout")
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
		return testutil.CollectAndCount(m.StreamLength) == 1 && testutil.CollectAndCount(m.StreamPending) == 1
	}
	// The third failure in a row takes them away: by the fourth sample
	// they are gone.
	var goneByFourth atomic.Bool
	store.atFourth = func() {
		goneByFourth.Store(testutil.CollectAndCount(m.StreamLength) == 0 && testutil.CollectAndCount(m.StreamPending) == 0)
	}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: 20 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	defer wk.Shutdown(context.Background())
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
	waitFor(t, "the gauges to go once every sample fails", func() bool {
		return testutil.CollectAndCount(m.StreamLength) == 0 && testutil.CollectAndCount(m.StreamPending) == 0
	})
	waitFor(t, "a fourth sample while every sample fails", store.fourthDone.Load)
	if !goneByFourth.Load() {
		t.Fatal("the gauges were still there at the fourth failed sample in a row, want gone after the third")
	}
	store.down.Store(false)
	waitFor(t, "a sample again", exported)
}

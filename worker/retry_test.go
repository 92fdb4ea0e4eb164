package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// earlyCounting counts the flush replies that said a window was early.
type earlyCounting struct {
	*repo.Repo
	early atomic.Int64
}

func (s *earlyCounting) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	res, err := s.Repo.Flush(ctx, ws)
	for _, r := range res {
		if r.Err == nil && r.Status == repo.Early {
			s.early.Add(1)
		}
	}
	return res, err
}

// A window flushed before it is due by Redis's clock (this replica's
// estimate of it ran ahead) is flushed again when due, and published on
// time: not forgotten until the claimer takes it back after claim_idle,
// long past W + grace.
func TestEarlyWindowIsFlushedAgainWhenDue(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &earlyCounting{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond, SampleEvery: time.Hour},
		zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	waitFor(t, "the worker reading Redis's clock", wk.ClockRead)
	wk.SkewClock(2000) // every window looks due at once
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	if store.early.Load() == 0 {
		t.Fatal("no flush was early: the test did not test anything")
	}
}

// unanswered loses its first flush: Redis may or may not have run it (a
// timeout, a reset connection).
type unanswered struct {
	*repo.Repo
	failed atomic.Bool
}

func (s *unanswered) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	if s.failed.CompareAndSwap(false, true) {
		return nil, errors.New("repo.Flush: read tcp: i/o timeout")
	}
	return s.Repo.Flush(ctx, ws)
}

// A window whose flush got no answer stays held and is flushed again
// soon: the script publishes it at most once, so retrying is safe, and
// dropping it would leave it to the claimer, after claim_idle.
func TestUnansweredFlushIsRetried(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &unanswered{Repo: r}
	wk := startReported(t, store, r, m)
	defer stop(t, wk)
	waitPushes(t, sub, 1)
	if !store.failed.Load() {
		t.Fatal("no flush failed: the test did not test anything")
	}
}

// unreachable answers no flush while down, as a Redis the client cannot
// reach (refused, reset, timed out), and counts them.
type unreachable struct {
	*repo.Repo
	up    atomic.Bool
	calls atomic.Int64
}

func (s *unreachable) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	s.calls.Add(1)
	if !s.up.Load() {
		return nil, errors.New("repo.Flush: dial tcp: connection refused")
	}
	return s.Repo.Flush(ctx, ws)
}

// While Redis does not answer, the flusher backs off between flushes (50
// ms doubling to 2 s), however many batches are due: trying every due
// batch in a row every 200 ms, a backlog of held windows was a storm of
// pipelines against a Redis coming back. Each window is published once
// Redis answers again.
func TestUnansweredFlushesBackOff(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &unreachable{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		BatchSize: 1}, zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	// Before stop's: on a failure while Redis is down, the drain would
	// retry the held windows to stop's 30 s bound.
	t.Cleanup(func() { store.up.Store(true) })
	const windows = 10
	var cs []*combo.Contribution
	for i := range int64(windows) {
		cs = append(cs, contribution(i+1, i+1))
	}
	if _, err := r.Report(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a flush of a window", func() bool { return store.calls.Load() > 0 })
	first := store.calls.Load()
	// A second of an unreachable Redis: waits of 25-50, 50-100, 100-200,
	// 200-400 and 400-800 ms, half a dozen flushes; without backing off,
	// all ten batches every 200 ms.
	time.Sleep(time.Second)
	if n := store.calls.Load() - first; n > 2*windows {
		t.Fatalf("%d flushes in a second of an unreachable Redis, %d windows held: want a few, backing off", n, windows)
	}
	store.up.Store(true)
	waitPushes(t, sub, windows)
}

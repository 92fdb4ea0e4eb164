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

// clockFirst fails the first timeFails readings of Redis's clock and
// notes whether a flush went before any reading succeeded.
type clockFirst struct {
	*repo.Repo
	timeFails        atomic.Int32
	timeFailed       atomic.Int32
	timeRead         atomic.Bool
	flushBeforeClock atomic.Bool
}

func (s *clockFirst) Time(ctx context.Context, shard int) (time.Time, error) {
	if s.timeFails.Add(-1) >= 0 {
		s.timeFailed.Add(1)
		return time.Time{}, errors.New("i/o timeout (injected)")
	}
	t, err := s.Repo.Time(ctx, shard)
	if err == nil {
		s.timeRead.Store(true)
	}
	return t, err
}

func (s *clockFirst) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	if !s.timeRead.Load() {
		s.flushBeforeClock.Store(true)
	}
	return s.Repo.Flush(ctx, ws)
}

// A flush's deadline (NotAfter) is on the node's clock as estimated; with
// no reading yet, that is this host's clock, maybe ahead of the node's,
// and the deadline as late. So no flush goes before a reading: when the
// housekeeper's first one failed, the flusher reads the clock itself.
func TestNoFlushBeforeTheNodesClockIsRead(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &clockFirst{Repo: r}
	store.timeFails.Store(1) // the housekeeper's first round; the next is an hour away
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: time.Hour}, zaptest.NewLogger(t), m)
	wk.Start()
	defer wk.Shutdown(context.Background())
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	if store.timeFailed.Load() != 1 {
		t.Fatal("the housekeeper's reading was not the one that failed: the test did not test")
	}
	if store.flushBeforeClock.Load() {
		t.Fatal("a window was flushed before any reading of Redis's clock")
	}
}

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

// statsFailing is the real store whose StreamStats fails while fail is set.
type statsFailing struct {
	*repo.Repo
	fail atomic.Bool
}

func (s *statsFailing) StreamStats(ctx context.Context, shard int) (int64, int64, error) {
	if s.fail.Load() {
		return 0, 0, errors.New("i/o timeout")
	}
	return s.Repo.StreamStats(ctx, shard)
}

// A replica that cannot sample its streams exports no length or pending
// count for them, not its last sample: the alerts take the highest value
// over replicas, and a replica cut off from Redis kept a cleared backlog
// on them for as long as it was cut off.
func TestStreamGaugesGoWhenSamplingFails(t *testing.T) {
	r, _, _, m := setup(t)
	store := &statsFailing{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: 50 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	defer wk.Shutdown(context.Background())
	waitFor(t, "a first sample", func() bool {
		return testutil.CollectAndCount(m.StreamLength) == 1 && testutil.CollectAndCount(m.StreamPending) == 1
	})
	store.fail.Store(true)
	waitFor(t, "the gauges to go once sampling fails", func() bool {
		return testutil.CollectAndCount(m.StreamLength) == 0 && testutil.CollectAndCount(m.StreamPending) == 0
	})
	store.fail.Store(false)
	waitFor(t, "a sample again", func() bool { return testutil.CollectAndCount(m.StreamLength) == 1 })
}

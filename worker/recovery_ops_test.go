package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// failsFirst answers the first call of each retried op other than read
// with an error, then passes every call to Redis.
type failsFirst struct {
	*repo.Repo
	ensure, claim, flush, stats, prune atomic.Bool // set once each has failed
}

var errLoading = errors.New("LOADING Redis is loading the dataset in memory")

func (s *failsFirst) EnsureGroup(ctx context.Context, shard int) error {
	if s.ensure.CompareAndSwap(false, true) {
		return errLoading
	}
	return s.Repo.EnsureGroup(ctx, shard)
}

func (s *failsFirst) Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) ([]repo.Window, []repo.BadEntry, []string, string, error) {
	if s.claim.CompareAndSwap(false, true) {
		return nil, nil, nil, "", errLoading
	}
	return s.Repo.Claim(ctx, shard, consumer, minIdle, start, count)
}

func (s *failsFirst) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	if s.flush.CompareAndSwap(false, true) {
		return nil, errLoading
	}
	return s.Repo.Flush(ctx, ws)
}

func (s *failsFirst) StreamStats(ctx context.Context, shard int) (repo.StreamStats, error) {
	if s.stats.CompareAndSwap(false, true) {
		return repo.StreamStats{}, errLoading
	}
	return s.Repo.StreamStats(ctx, shard)
}

func (s *failsFirst) PruneConsumers(ctx context.Context, shard int, self string, idle time.Duration) ([]string, error) {
	if s.prune.CompareAndSwap(false, true) {
		return nil, errLoading
	}
	return s.Repo.PruneConsumers(ctx, shard, self, idle)
}

// Every retried op's run of failures ends in a line of its own, not only
// the read's and the flush script's: a prepare, claim, flush, stream
// sample or consumer prune that failed once and then went through says so.
func TestRecoveryOfEveryRetriedOpIsLogged(t *testing.T) {
	r, _, sub, _ := setup(t)
	store := &failsFirst{Repo: r}
	core, logs := observer.New(zapcore.InfoLevel)
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: 200 * time.Millisecond, Block: 50 * time.Millisecond,
		SampleEvery: 50 * time.Millisecond, ConsumerIdleDelete: time.Second}, zap.New(core), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		wk.Shutdown(ctx)
	}()
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1) // its first flush failed
	for _, op := range []string{metrics.OpPrepare, metrics.OpClaim, metrics.OpFlush, metrics.OpStreamStats, metrics.OpPruneConsumers} {
		waitFor(t, op+" failed", func() bool { return logs.FilterMessage("redis "+op+" failed; retrying").Len() == 1 })
		waitFor(t, op+"'s recovery logged", func() bool { return logs.FilterMessage("redis "+op+" recovered").Len() == 1 })
		f := logs.FilterMessage("redis " + op + " recovered").All()[0].ContextMap()
		if f["failures"] != int64(1) || f["last_error"] != errLoading.Error() || f["op"] != op {
			t.Errorf("%s's recovery line: %v; want 1 failure, last error %q", op, f, errLoading)
		}
	}
}

// slowTime's Time waits for its context: the housekeeper's first reading
// of the clock is under way when Shutdown cancels it.
type slowTime struct {
	*repo.Repo
	called chan struct{}
	once   atomic.Bool
}

func (s *slowTime) Time(ctx context.Context, shard int) (time.Time, error) {
	if s.once.CompareAndSwap(false, true) {
		close(s.called)
	}
	<-ctx.Done()
	return time.Time{}, ctx.Err()
}

// A reading of the clock cut short by Shutdown is not a Redis failure:
// no "redis time failed; retrying" line, no count in
// combo_redis_errors_total, and no run of failures that never recovers.
func TestRecoveryNoTimeFailureForAReadingShutdownCut(t *testing.T) {
	r, _, _, m := setup(t)
	store := &slowTime{Repo: r, called: make(chan struct{})}
	core, logs := observer.New(zapcore.InfoLevel)
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		OpTimeout: time.Minute}, zap.New(core), m)
	wk.Start()
	select {
	case <-store.called:
	case <-time.After(10 * time.Second):
		t.Fatal("the housekeeper never read the clock")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wk.Shutdown(ctx)
	if n := logs.FilterMessage("redis time failed; retrying").Len(); n != 0 {
		t.Errorf("%d time failure lines for a reading Shutdown cut short: %v", n, logs.FilterMessage("redis time failed; retrying").All()[0].ContextMap())
	}
	if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpTime)); n != 0 {
		t.Errorf("%v time errors counted for a reading Shutdown cut short", n)
	}
}

// refusingClock fails every reading of shard 1's clock until allowed, and
// counts shard 0's readings.
type refusingClock struct {
	*repo.Repo
	allowed atomic.Bool
	zeroOK  atomic.Int32
}

func (s *refusingClock) Time(ctx context.Context, shard int) (time.Time, error) {
	if shard == 1 && !s.allowed.Load() {
		return time.Time{}, errors.New("i/o timeout")
	}
	t, err := s.Repo.Time(ctx, shard)
	if shard == 0 && err == nil {
		s.zeroOK.Add(1)
	}
	return t, err
}

// With NodePerShard each shard's clock is its own node's: one master's
// clock failing keeps op time failing while the other masters' readings
// go through, and its recovery is logged once it answers.
func TestRecoveryOfTimeWaitsForEveryNodesClock(t *testing.T) {
	r, _, _, _ := setupShards(t, 2)
	store := &refusingClock{Repo: r}
	core, logs := observer.New(zapcore.InfoLevel)
	wk := worker.New(store, worker.Config{Consumer: "c1", Shards: 2, NodePerShard: true, ClaimIdle: time.Hour,
		Block: 50 * time.Millisecond, SampleEvery: 50 * time.Millisecond}, zap.New(core), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		wk.Shutdown(ctx)
	}()
	waitFor(t, "shard 1's clock failed", func() bool { return logs.FilterMessage("redis time failed; retrying").Len() > 0 })
	after := store.zeroOK.Load()
	waitFor(t, "shard 0's clock read since, twice", func() bool { return store.zeroOK.Load() >= after+2 })
	if n := logs.FilterMessage("redis time recovered").Len(); n != 0 {
		t.Fatalf("%d time recovery lines while shard 1's clock still failed", n)
	}
	store.allowed.Store(true)
	waitFor(t, "time's recovery logged", func() bool { return logs.FilterMessage("redis time recovered").Len() == 1 })
}

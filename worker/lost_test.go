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
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// A Redis that loses its data (FLUSHALL here; a restart without
// persistence or an evicted stream alike) takes the windows waiting in the
// stream with it. Their flushes then find neither data nor entry, as for a
// window another replica published: counted gone, no lost-window alert,
// and no line in the log said anything was lost. The consumer group found
// missing is the one sign: it is counted and logged at error level, and
// the worker goes on reading the recreated stream.
func TestLostStreamIsCountedAndReadAgain(t *testing.T) {
	r, rdb, sub, m := setup(t)
	ctx := context.Background()
	wk := worker.New(r, worker.Config{Consumer: "a", ClaimIdle: time.Hour, Block: 50 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)

	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 7)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the window held", func() bool { return wk.Held() == 1 })
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lost group counted", func() bool { return testutil.ToFloat64(m.GroupsRecreated) >= 1 })

	// Reading goes on: a window opened now is published.
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(2, 8)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	if n := testutil.ToFloat64(m.GroupsRecreated); n != 1 {
		t.Fatalf("groups recreated %v, want 1 (one loss)", n)
	}
}

// unprepared is a Store whose EnsureGroup fails, as while Redis cannot be
// reached since the worker started: the shard is never prepared. Once
// allowed, Claim lets the reader prepare the shard before it answers.
type unprepared struct {
	*repo.Repo
	allowed  atomic.Bool
	prepared chan struct{}
}

func (u *unprepared) EnsureGroup(ctx context.Context, shard int) error {
	if !u.allowed.Load() {
		return errors.New("dial tcp: connect: connection refused")
	}
	err := u.Repo.EnsureGroup(ctx, shard)
	if err == nil {
		select {
		case u.prepared <- struct{}{}:
		default:
		}
	}
	return err
}

func (u *unprepared) Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) ([]repo.Window, []repo.BadEntry, []string, string, error) {
	ws, bad, deleted, next, err := u.Repo.Claim(ctx, shard, consumer, minIdle, start, count)
	if errors.Is(err, repo.ErrGroupRecreated) && !u.allowed.Swap(true) {
		// Redis is back: the reader's prepare lands before this answer.
		select {
		case <-u.prepared:
		case <-time.After(5 * time.Second):
		}
	}
	return ws, bad, deleted, next, err
}

// A new Redis (the service started before it could be reached) has no
// group: the worker's shutdown read, for a shard never prepared, creates
// it. No stream was lost, so nothing is counted.
func TestGroupMissingBeforePrepareAtShutdownIsNoLoss(t *testing.T) {
	r, rdb, _, m := setup(t)
	if err := rdb.Del(context.Background(), r.Keys().Stream(0)).Err(); err != nil { // a new Redis
		t.Fatal(err)
	}
	u := &unprepared{Repo: r, prepared: make(chan struct{}, 1)}
	wk := worker.New(u, worker.Config{Consumer: "a", ClaimIdle: time.Hour, Block: 50 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	waitFor(t, "a failed prepare", func() bool {
		return testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpPrepare)) >= 1
	})
	if err := wk.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(m.GroupsRecreated); n != 0 {
		t.Fatalf("groups recreated %v for a shard never prepared, want 0 (a new Redis, nothing lost)", n)
	}
}

// The claimer can find a new Redis's group missing just as the reader
// prepares the shard: whether that is a loss depends on whether the shard
// was prepared before the claim, not after it answered.
func TestGroupMissingBeforePrepareAtClaimIsNoLoss(t *testing.T) {
	r, rdb, sub, m := setup(t)
	if err := rdb.Del(context.Background(), r.Keys().Stream(0)).Err(); err != nil { // a new Redis
		t.Fatal(err)
	}
	u := &unprepared{Repo: r, prepared: make(chan struct{}, 1)}
	wk := worker.New(u, worker.Config{Consumer: "a", ClaimIdle: 200 * time.Millisecond, Block: 50 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	waitFor(t, "Redis reached by the claimer", u.allowed.Load)
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 7)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	if n := testutil.ToFloat64(m.GroupsRecreated); n != 0 {
		t.Fatalf("groups recreated %v on a new Redis, want 0 (nothing lost)", n)
	}
}

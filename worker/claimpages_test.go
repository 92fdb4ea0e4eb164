package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// pagedClaims is the real store but for the first page of every claim
// scan, which it answers with nothing taken and a cursor to go on from,
// as XAUTOCLAIM does when the entries it may look at in one call (COUNT
// times 10) are all still busy on a live consumer.
type pagedClaims struct {
	*repo.Repo
	mu     sync.Mutex
	starts []string
}

const pagedCursor = "7-0"

func (s *pagedClaims) Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) ([]repo.Window, []repo.BadEntry, []string, string, error) {
	s.mu.Lock()
	s.starts = append(s.starts, start)
	s.mu.Unlock()
	if start != pagedCursor {
		return nil, nil, nil, pagedCursor, nil
	}
	return s.Repo.Claim(ctx, shard, consumer, minIdle, "0-0", count)
}

// A claim scan goes on from the cursor XAUTOCLAIM returns: with more busy
// entries pending than one call looks at (ReadCount x 10), a scan that
// started over at 0-0 looked at the same busy entries for ever, and a
// dead replica's windows behind them went stale unpublished.
func TestClaimScanGoesOnFromTheCursor(t *testing.T) {
	store := &pagedClaims{Repo: deadReplicasWindow(t, 1, 0)}
	takeOver(t, store, 1, false)
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.starts) < 2 || store.starts[0] != "0-0" || store.starts[1] != pagedCursor {
		t.Fatalf("claims started at %v, want 0-0 then %s", store.starts, pagedCursor)
	}
}

// A dead replica's entries that cannot be flushed are dropped by the
// claimer that takes them over (acknowledged, deleted, counted, logged),
// as the reader drops its own: left pending, they went from claimer to
// claimer every claim_idle for ever, kept the pending count up and kept
// the dead consumer from being removed.
func TestClaimedBadEntriesAreDropped(t *testing.T) {
	r, rdb, _, m := setup(t)
	ctx := context.Background()
	stream := r.Keys().Stream(0)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"junk", "1"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, bad, _, err := r.Read(ctx, 0, "dead", ">", 10, -1); err != nil || len(bad) != 1 {
		t.Fatalf("dead's read: %v %v, want the junk entry", bad, err)
	}
	wk := worker.New(r, worker.Config{Consumer: "live", ClaimIdle: 300 * time.Millisecond, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	waitFor(t, "the claimed junk entry dropped", func() bool {
		return rdb.XPending(ctx, stream, repo.Group).Val().Count == 0 && rdb.XLen(ctx, stream).Val() == 0
	})
	if n := testutil.ToFloat64(m.BadEntries); n != 1 {
		t.Fatalf("bad entries counted %v, want 1", n)
	}
}

// returnedBlockingReads is the real store, counting the blocking reads of new
// entries that returned.
type returnedBlockingReads struct {
	*repo.Repo
	n atomic.Int64
}

func (s *returnedBlockingReads) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	defer func() {
		if start == ">" && block > 0 {
			s.n.Add(1)
		}
	}()
	return s.Repo.Read(ctx, shard, consumer, start, count, block)
}

// A blocking read may take Block and still be answered: its deadline is
// OpTimeout past Block. With Block beyond OpTimeout (worker.block may be
// up to 30 s, OpTimeout is 2 s), a read of an idle shard timed out on
// the client each time, counted a Redis error, and backed off.
func TestABlockLongerThanOpTimeoutIsNoError(t *testing.T) {
	// A client as the service's, which bounds a call by its context.
	srv := testredis.Start(t, testredis.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	r, _ := prepare(t, rdb, w, 1)
	m := metrics.New(prometheus.NewRegistry())
	store := &returnedBlockingReads{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 600 * time.Millisecond,
		OpTimeout: 300 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	waitFor(t, "three blocked reads of the idle shard returned", func() bool { return store.n.Load() >= 3 })
	if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpRead)); n != 0 {
		t.Fatalf("combo_redis_errors_total{op=\"read\"} = %v on an idle shard, want 0", n)
	}
}

// stats panics in every sample of the streams.
type statsPanic struct{ *repo.Repo }

func (statsPanic) StreamStats(context.Context, int) (repo.StreamStats, error) { panic("stats") }

// A panic in the housekeeper's round (a stream sample) is counted and
// the loop goes on: it ended the process.
func TestAHousekeepingPanicIsSurvived(t *testing.T) {
	r, _, _, _ := setup(t)
	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(statsPanic{r}, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: 20 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	waitFor(t, "three housekeeping rounds panicked and survived", func() bool {
		return testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopHousekeeping)) >= 3
	})
}

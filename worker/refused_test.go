package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// refusedFlushes signals each flush of a window of activity 666.
type refusedFlushes struct {
	*repo.Repo
	n   atomic.Int64
	sig chan struct{}
}

func (s *refusedFlushes) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	res, err := s.Repo.Flush(ctx, ws)
	for _, win := range ws {
		if win.ActivityID == 666 {
			s.n.Add(1)
			select {
			case s.sig <- struct{}{}:
			default:
			}
			break
		}
	}
	return res, err
}

// One window Redis keeps refusing (its ACL user may not PUBLISH on that
// activity's channel: the flush script fails NOPERM for it alone) waits
// its own growing delays, and holds up no other window of its shard. The
// flusher once backed off whenever a batch failed whole, as that window's
// batches of one did, and a healthy window falling due meanwhile waited
// out the back-off: pushed about a second late after six refusals.
func TestARefusedWindowDelaysNoOther(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	admin := srv.Client()
	ctx := context.Background()
	r, sub := prepare(t, admin, w, 1) // reports go through the admin user
	if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "on", ">pw", "~combo:*", "&act:5:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	limited := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw"})
	t.Cleanup(func() { limited.Close() })
	store := &refusedFlushes{Repo: repo.New(limited, repo.Settings{Window: w, Grace: 20 * time.Millisecond,
		Dedupe: time.Minute, Stale: time.Minute, Timeout: time.Second, Shards: 1, StreamMaxLen: 100000}),
		sig: make(chan struct{}, 1)}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond, SampleEvery: time.Hour},
		zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_ = wk.Shutdown(sctx)
	}()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 666)}); err != nil {
		t.Fatal(err)
	}
	for store.n.Load() < 6 { // the old back-off is then 0.8-1.6 s
		select {
		case <-store.sig:
		case <-time.After(15 * time.Second):
			t.Fatalf("only %d refused flushes", store.n.Load())
		}
	}
	start := time.Now()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(10, 5)}); err != nil {
		t.Fatal(err)
	}
	msg := nextPush(t, sub)
	due := w + 20*time.Millisecond
	if took := time.Since(start); msg.Channel != "act:5:contributions" || took > due+500*time.Millisecond {
		t.Fatalf("healthy window pushed on %s %s after its report, due after %s: held up by another window's refusals",
			msg.Channel, took.Round(time.Millisecond), due)
	}
}

// countingFlushes counts the flush calls the worker makes, and the
// windows in them, once open is closed; until then a flush waits for it.
type countingFlushes struct {
	*repo.Repo
	open    chan struct{}
	calls   atomic.Int64
	windows atomic.Int64
}

func (s *countingFlushes) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	<-s.open
	s.calls.Add(1)
	s.windows.Add(int64(len(ws)))
	return s.Repo.Flush(ctx, ws)
}

// A Redis refusing every write (here NOREPLICAS: min-replicas-to-write 1,
// no replica) refuses each window's flush alike, and the flusher backs off
// as a whole: its calls come 50 ms apart, doubling to 2 s. Retrying each
// window only on its own delays (fa83b3d), it flushed a backlog of 20,000
// as fast as those came due: 25-33 calls in 5 s, against 3 backing off.
// Counted in calls, not windows a second: the windows the bug flushed
// fell to 973 a second with the machine loaded, under a bound of 1,000.
func TestARedisRefusingWritesIsNotHammered(t *testing.T) {
	r, rdb, _, m := setup(t)
	ctx := context.Background()
	const n = 20000
	for i := int64(0); i < n; i += 500 {
		batch := make([]*combo.Contribution, 0, 500)
		for j := i; j < i+500; j++ {
			batch = append(batch, contribution(j+1, 1000+j))
		}
		if _, err := r.Report(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	// Held first: the reader's XREADGROUP is a write, refused too.
	store := &countingFlushes{Repo: r, open: make(chan struct{})}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond, SampleEvery: time.Hour},
		zap.NewNop(), m)
	wk.Start()
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_ = wk.Shutdown(sctx)
	}()
	waitFor(t, "every window held", func() bool { return wk.Held() == n })
	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	close(store.open)
	// Six calls: backing off, the next waits 1.6 s, then 2 s each.
	waitFor(t, "six flush calls", func() bool { return store.calls.Load() >= 6 })
	before, windows := store.calls.Load(), store.windows.Load()
	time.Sleep(3 * time.Second) // the span counted
	calls := store.calls.Load() - before
	t.Logf("%d flush calls of %d windows in 3 s", calls, store.windows.Load()-windows)
	if calls > 5 {
		t.Fatalf("%d flush calls in 3 s against a Redis refusing every write, want 2 or so: the flusher backing off", calls)
	}
}

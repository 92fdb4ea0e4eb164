package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
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
	startWorker(t, store, m)
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

// Before its first reading of Redis's clock the worker has only this
// host's, which may be ahead of Redis's or behind it by any amount: it
// must schedule nothing by it. When the node's clock could not be read at
// first (a Redis just restarted), windows retried were put back at this
// host's time + a backoff, and with the host ahead by 30 s every window
// past the first batch waited those 30 s once the clock was read; with
// the host behind, no window was popped until the host's clock reached
// its due time. The embedded Redis here runs its clock 30 s off this
// host's, and its first three readings fail.
func TestWindowsAreOnTimeWhateverTheHostsClockBeforeAReading(t *testing.T) {
	for _, skew := range []time.Duration{-30 * time.Second, 30 * time.Second} {
		t.Run(fmt.Sprint("Redis's clock ", skew), func(t *testing.T) {
			mr := miniredis.RunT(t)
			offsetClock(t, mr, skew)
			rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			r, sub := prepare(t, rdb, w, 1)
			store := &clockFirst{Repo: r}
			store.timeFails.Store(3) // the housekeeper's, then the flusher's first two
			const n = 12
			for i := int64(1); i <= n; i++ {
				c := contribution(i, 5)
				c.UserId = i
				if _, err := r.Report(context.Background(), []*combo.Contribution{c}); err != nil {
					t.Fatal(err)
				}
			}
			wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
				SampleEvery: time.Hour, BatchSize: 4}, zaptest.NewLogger(t), metrics.New(prometheus.NewRegistry()))
			wk.Start()
			defer stop(t, wk)
			got := 0
			deadline := time.After(10 * time.Second) // far short of the skew, far past W
			for got < n {
				select {
				case <-sub.Channel():
					got++
				case <-deadline:
					t.Fatalf("%d of %d windows pushed within 10 s (clock readings failed: %d)", got, n, store.timeFailed.Load())
				}
			}
			if store.timeFailed.Load() != 3 {
				t.Fatalf("%d clock readings failed, want 3: the test did not test", store.timeFailed.Load())
			}
		})
	}
}

// offsetClock runs mr's clock (TIME, stream ids, the scripts' TIME) at
// this host's clock + offset until the test ends.
func offsetClock(t *testing.T, mr *miniredis.Miniredis, offset time.Duration) {
	mr.SetTime(time.Now().Add(offset))
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				mr.SetTime(time.Now().Add(offset))
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
}

// While the node's clock cannot be read, a flusher with windows waiting
// reads it again after its backoff (50 ms doubling, half of it jitter),
// not in a tight loop: without it a flusher made 175,000 readings in 2 s.
func TestAnUnreadableClockIsReadAgainAfterABackoff(t *testing.T) {
	r, _, _, m := setup(t)
	store := &clockFirst{Repo: r}
	store.timeFails.Store(1 << 30)
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: time.Hour}, zaptest.NewLogger(t), m)
	start := time.Now()
	wk.Start()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = wk.Shutdown(ctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for store.timeFailed.Load() < 6 { // the housekeeper's, then the flusher's
		if time.Now().After(deadline) {
			t.Fatalf("%d clock readings in 10 s, want 6", store.timeFailed.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The flusher's four waits before its fifth reading: at least 25, 50,
	// 100 and 200 ms.
	if took := time.Since(start); took < 375*time.Millisecond {
		t.Fatalf("6 readings failed within %v: the flusher did not back off", took)
	}
}

// clockPanics panics on every reading of Redis's clock until allowed.
type clockPanics struct {
	*repo.Repo
	allowed atomic.Bool
}

func (s *clockPanics) Time(ctx context.Context, shard int) (time.Time, error) {
	if !s.allowed.Load() {
		panic("a clock reading in an odd state")
	}
	return s.Repo.Time(ctx, shard)
}

// A reading of Redis's clock that panics is counted, as the housekeeper's
// or the flusher's, and both go on: once readings work, the window is
// pushed. The flusher, which reads the clock itself before its first
// reading, had no recover there, and such a panic ended the process.
func TestAClockReadingThatPanicsIsSurvived(t *testing.T) {
	r, _, sub, m := setup(t)
	store := &clockPanics{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: time.Hour}, zaptest.NewLogger(t), m)
	wk.Start()
	defer func() { // bounded: on a failure the window is still held, its clock unread
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = wk.Shutdown(ctx)
	}()
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	panics := func(loop string) float64 { return testutil.ToFloat64(m.LoopPanics.WithLabelValues(loop)) }
	for deadline := time.Now().Add(10 * time.Second); panics(metrics.LoopFlush) == 0 || panics(metrics.LoopHousekeeping) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("in 10 s, %v of the flusher's readings and %v of the housekeeper's panicked; want both",
				panics(metrics.LoopFlush), panics(metrics.LoopHousekeeping))
		}
	}
	store.allowed.Store(true)
	waitPushes(t, sub, 1)
}

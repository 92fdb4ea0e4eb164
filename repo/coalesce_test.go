package repo_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// pipelineHook runs before each pipeline reaches Redis: it adds a round
// trip's delay, or holds the pipeline until released.
type pipelineHook struct{ before func() }

func (h pipelineHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (h pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.before()
		return next(ctx, cmds)
	}
}

func hookedRepo(t *testing.T, before func()) *repo.Repo {
	t.Helper()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r := repo.New(rdb, settings())
	if err := r.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(pipelineHook{before: before}) // for the reports' pipelines only
	return r
}

// Under steady load from many callers, no call waits for more than its own
// pipeline and the one before it: the caller that runs a pipeline hands the
// next one to a waiting caller once its own reports are answered, instead
// of running pipelines for as long as the load lasts.
func TestNoCallerRunsPipelinesForOthersForLong(t *testing.T) {
	r := hookedRepo(t, func() { time.Sleep(2 * time.Millisecond) })
	const callers = 16
	var id atomic.Int64
	var worst atomic.Int64
	var failed atomic.Value
	stop := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				n := id.Add(1)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				start := time.Now()
				_, err := r.Report(ctx, []*combo.Contribution{contribution(n, "rose", base+n)})
				took := time.Since(start)
				cancel()
				if err != nil {
					failed.Store(err)
					return
				}
				for {
					w := worst.Load()
					if int64(took) <= w || worst.CompareAndSwap(w, int64(took)) {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("a report failed: %v", err)
	}
	// Each pipeline takes about 2 ms here; a leader held until the load
	// ended would take the whole 1.5 s.
	if w := time.Duration(worst.Load()); w > 300*time.Millisecond {
		t.Fatalf("slowest report took %s over %d reports: a caller ran others' pipelines", w, id.Load())
	}
}

// A caller that gives up while its report waits gets ErrCallerGone, not
// ErrUnavailable (Redis is fine), and the calls behind it still go through.
// A call whose ctx has ended before any pipeline takes it (here: before it
// is made, so the caller runs its own pipeline and skips it) is the caller
// gone too, not Redis down.
func TestCallerGoneBeforePipelineIsNotUnavailable(t *testing.T) {
	r := hookedRepo(t, func() {})
	for _, n := range []int{1, 50} { // a shared pipeline, and a big call's own
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		cs := make([]*combo.Contribution, n)
		for i := range cs {
			cs[i] = contribution(int64(100*n+i), "rose", base)
		}
		_, err := r.Report(ctx, cs)
		if !errors.Is(err, repo.ErrCallerGone) || errors.Is(err, repo.ErrUnavailable) {
			t.Fatalf("%d reports, ctx ended: %v, want ErrCallerGone and not ErrUnavailable", n, err)
		}
	}
}

func TestCallerGoneIsNotUnavailable(t *testing.T) {
	release := make(chan struct{})
	var held atomic.Bool
	r := hookedRepo(t, func() {
		if held.CompareAndSwap(false, true) {
			<-release // the first pipeline waits until released
		}
	})
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)})
		first <- err
	}()
	for !held.Load() {
		time.Sleep(time.Millisecond)
	}
	// Queued behind the held pipeline: one that gives up, one that waits.
	gone, cancel := context.WithCancel(ctx)
	goneErr := make(chan error, 1)
	go func() {
		_, err := r.Report(gone, []*combo.Contribution{contribution(2, "lily", base)})
		goneErr <- err
	}()
	patient := make(chan error, 1)
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(3, "tulip", base)})
		patient <- err
	}()
	cancel()
	if err := <-goneErr; !errors.Is(err, repo.ErrCallerGone) || errors.Is(err, repo.ErrUnavailable) {
		t.Fatalf("abandoned call: %v, want ErrCallerGone and not ErrUnavailable", err)
	}
	close(release)
	for _, ch := range []chan error{first, patient} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("report: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a report queued behind an abandoned one never finished")
		}
	}
}

package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// A flush Redis runs past its deadline answers Late and changes nothing
// (its sender had stopped waiting). Here the worker's estimate of Redis's
// clock is 1.5 s behind, more than the 300 ms a flush's sender waits, so
// the window's first flush is sent with a deadline already past: it is
// counted in combo_flushes_late_total, the reply corrects the clock, and
// the window is sent again and pushed once.
func TestLateFlushIsCountedAndSentAgain(t *testing.T) {
	r, _, sub, m := setup(t)
	wk := worker.New(r, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: time.Hour, OpTimeout: 300 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	waitFor(t, "the worker reading Redis's clock", wk.ClockRead)
	wk.SkewClock(-1500)

	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	// The push reaches the subscriber before the worker reads the flush's
	// answer and counts it: wait for the count, not just the push.
	waitFor(t, "the published window counted", func() bool {
		return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(metrics.FlushedPublished)) >= 1
	})
	if late := testutil.ToFloat64(m.FlushesLate); late != 1 {
		t.Errorf("combo_flushes_late_total = %v, want 1", late)
	}
	for status, want := range map[string]float64{metrics.FlushedPublished: 1, metrics.FlushedGone: 0} {
		if got := testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(status)); got != want {
			t.Errorf("combo_windows_flushed_total{status=%q} = %v, want %v", status, got, want)
		}
	}
	if errs := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpFlush)); errs != 0 {
		t.Errorf("combo_redis_errors_total{op=\"flush\"} = %v, want 0: a late flush is not a Redis error", errs)
	}
}

// flushedElsewhereFirst flushes each batch once itself, as another replica
// would, before the worker's own flush of it.
type flushedElsewhereFirst struct{ *repo.Repo }

func (s flushedElsewhereFirst) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	if _, err := s.Repo.Flush(ctx, ws); err != nil {
		return nil, err
	}
	return s.Repo.Flush(ctx, ws)
}

// A window another replica published first is counted gone, not
// published: this replica pushed nothing.
func TestWindowPublishedElsewhereIsCountedGone(t *testing.T) {
	r, _, sub, m := setup(t)
	wk := startWorker(t, flushedElsewhereFirst{r}, m)
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	flushed := func(s string) float64 { return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(s)) }
	waitFor(t, "the window counted", func() bool { return flushed(metrics.FlushedGone)+flushed(metrics.FlushedPublished) >= 1 })
	if gone, published := flushed(metrics.FlushedGone), flushed(metrics.FlushedPublished); gone != 1 || published != 0 {
		t.Fatalf("a window published elsewhere counted gone %v, published %v; want 1 and 0", gone, published)
	}
	// And let go: held on, every window another replica published first
	// would count toward MaxHeld for good, and keep the drain at shutdown
	// waiting to its bound.
	waitFor(t, "the gone window let go", func() bool { return wk.Held() == 0 })
}

// slowLink answers each flush a round trip later, as a Redis across a
// network does: the flush runs at the far end of the trip out.
type slowLink struct{ *repo.Repo }

func (s slowLink) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Repo.Flush(ctx, ws)
}

// A flush's deadline leaves it the wait for its answer (redis.timeout),
// not the instant it was sent: over a link of a few ms, one due at once
// would run past it every time, answer Late, and never publish.
func TestFlushOverASlowLinkIsPublishedOnce(t *testing.T) {
	r, _, sub, m := setup(t)
	startWorker(t, slowLink{r}, m)
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	waitFor(t, "the published window counted", func() bool {
		return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(metrics.FlushedPublished)) >= 1
	})
	if late := testutil.ToFloat64(m.FlushesLate); late != 0 {
		t.Errorf("combo_flushes_late_total = %v over a 20 ms link, want 0", late)
	}
}

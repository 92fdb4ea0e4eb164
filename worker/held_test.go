package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/worker"
)

// combo_held_windows counts the windows a replica holds as soon as it
// reads them, not only at its next flush: windows a minute from due (or a
// replica at MaxHeld with nothing due) would read 0 on the gauge the
// alerts watch for a replica at its cap, though it holds them all.
func TestHeldGaugeCountsWindowsAsTheyAreRead(t *testing.T) {
	r, _ := windowsDueInAMinute(t, 3)
	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(r, worker.Config{Consumer: "c1", Shards: 1, ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: time.Hour}, zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { // leaves the windows pending: they are a minute from due
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = wk.Shutdown(ctx)
	})
	waitFor(t, "the three windows read", func() bool { return wk.Held() == 3 })
	waitFor(t, "combo_held_windows at 3", func() bool { return testutil.ToFloat64(m.HeldWindows) == 3 })
}

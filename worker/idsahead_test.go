package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/worker"
)

// After Redis's clock steps back, XADD still gives ids after the last
// one, so a window opened then takes an id ahead of the clock and comes
// due that much late, while its push lag reads 0 and it is not overdue.
// combo_stream_ids_ahead_seconds shows it: 0 for a window opened now, the
// step's size for one opened after it. The step is made as Redis sees
// one: an id 8 s ahead given to the stream (then deleted), as the last
// id of a node whose clock was 8 s ahead of the one now serving it.
func TestIDsAheadGaugeShowsAClockStepBack(t *testing.T) {
	r, rdb, _, m := setup(t)
	ctx := context.Background()
	wk := worker.New(r, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: 20 * time.Millisecond}, zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() {
		// Not waiting for the window the step holds 8 s back.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = wk.Shutdown(ctx)
	})
	ahead := func() float64 { return testutil.ToFloat64(m.StreamIDsAhead.WithLabelValues("0")) }

	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a sample", func() bool { return testutil.CollectAndCount(m.StreamIDsAhead) == 1 })
	if a := ahead(); a > 0.5 {
		t.Fatalf("ids ahead %v s with the clock in step, want about 0", a)
	}

	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	stream := r.Keys().Stream(0)
	id := fmt.Sprintf("%d-0", now.UnixMilli()+8000)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: id, Values: []any{"k", "step"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XDel(ctx, stream, id).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(2, 6)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the gauge to show the step", func() bool { return ahead() > 7 })
	if a := ahead(); a > 8.1 {
		t.Fatalf("ids ahead %v s after an 8 s step, want at most 8", a)
	}
}

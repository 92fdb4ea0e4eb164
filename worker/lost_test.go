package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/kitex_gen/combo"
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
	defer wk.Shutdown(context.Background())

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

package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/worker"
)

// FLUSHALL or DEL of the stream answers a read blocked on it with
// "UNBLOCKED the stream key no longer exists": the group is gone with the
// stream. That is the loss itself, counted once as the group missing, not
// also as a failed read (a warning and combo_redis_errors_total{op="read"}
// for what is no fault of Redis's).
func TestWipeUnderABlockedReadIsOnlyAGroupLoss(t *testing.T) {
	for _, wipe := range []string{"FLUSHALL", "DEL"} {
		t.Run(wipe, func(t *testing.T) {
			r, rdb, _, m := setup(t)
			ctx := context.Background()
			core, logs := observer.New(zapcore.InfoLevel)
			wk := worker.New(r, worker.Config{Consumer: "a", ClaimIdle: time.Hour, Block: 2 * time.Second}, zap.New(core), m)
			wk.Start()
			defer wk.Shutdown(context.Background())
			waitFor(t, "the reader blocked", func() bool {
				list, err := rdb.ClientList(ctx).Result()
				if err != nil {
					return false
				}
				for _, c := range strings.Split(list, "\n") {
					if strings.Contains(c, "cmd=xreadgroup") && strings.Contains(c, "flags=b") {
						return true
					}
				}
				return false
			})
			var err error
			if wipe == "FLUSHALL" {
				err = rdb.FlushAll(ctx).Err()
			} else {
				err = rdb.Del(ctx, r.Keys().Stream(0)).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the lost group counted", func() bool { return testutil.ToFloat64(m.GroupsRecreated) >= 1 })
			// Reading goes on.
			if _, err := r.Report(ctx, []*combo.Contribution{contribution(2, 8)}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the new window read", func() bool { return wk.Held() == 1 })
			if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpRead)); n != 0 {
				t.Errorf("redis read errors %v, want 0 (the wipe is counted as the group lost)", n)
			}
			for _, e := range logs.FilterMessageSnippet("failed").All() {
				t.Errorf("logged %q: %v", e.Message, e.ContextMap()["error"])
			}
			if n := testutil.ToFloat64(m.GroupsRecreated); n != 1 {
				t.Errorf("groups recreated %v, want 1", n)
			}
		})
	}
}

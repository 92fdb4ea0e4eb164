package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// A recovery line the sampler held back just before Shutdown is still
// written: the housekeeper, its one writer while the worker runs, stops
// with the takers, before the drain, and the drain's own flushes and final
// reads may hold more.
func TestRecoveryLineHeldAtShutdownIsWritten(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	r := repo.New(rdb, repo.Settings{Window: 150 * time.Millisecond, Grace: 20 * time.Millisecond, Dedupe: time.Minute,
		Stale: time.Minute, Timeout: time.Second, Shards: 1, StreamMaxLen: 100000})
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	w := New(r, Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond}, zap.NewNop(),
		metrics.New(prometheus.NewRegistry()))
	w.log = logging.Sampled(zap.New(core), nil)
	w.Start()
	const op = "test_op" // no loop's: nothing else ends its runs
	w.redisError(op, 0, errors.New("i/o timeout"))
	w.redisOK(op, 0) // written
	w.redisError(op, 0, errors.New("i/o timeout"))
	w.redisOK(op, 0) // under a second later: held
	if n := logs.FilterMessage("redis " + op + " recovered").Len(); n != 1 {
		t.Fatalf("%d recovery lines before Shutdown, want 1 (the second held): nothing to test", n)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessage("redis " + op + " recovered").Len(); n != 2 {
		t.Errorf("%d recovery lines after Shutdown, want 2: the held one was never written, so the log's last word on %s is that it fails", n, op)
	}
}

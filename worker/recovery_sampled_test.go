package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// The recovery line goes through the worker's sampled logger: an op that
// fails and recovers twice, the recoveries under a second apart and the
// failures over a second apart, had "failed; retrying" as its last line
// though it succeeded since: the second recovery was thinned away. The
// housekeeper writes it at one of its next rounds, once the sampler lets
// it through: here prepare, which runs once per shard, so no later
// success of its own could. The line says how long the run lasted, to the
// success that ended it, not to when the line was written.
func TestRecoveryLineIsNotThinnedAway(t *testing.T) {
	w, logs := sampledWorker(zapcore.InfoLevel, 20*time.Millisecond, nil)
	w.redisError(metrics.OpPrepare, 0, errors.New("i/o timeout"))
	time.Sleep(900 * time.Millisecond)
	w.redisOK(metrics.OpPrepare, 0)
	time.Sleep(150 * time.Millisecond)
	before := time.Now()
	w.redisError(metrics.OpPrepare, 1, errors.New("i/o timeout")) // over 1 s after the first failure line: written
	w.redisOK(metrics.OpPrepare, 1)                               // under 1 s after the first recovery line: held
	span := time.Since(before)                                    // the run's length, however loaded the host
	last := func() string { all := logs.All(); return all[len(all)-1].Message }
	if got := last(); got != "redis prepare failed; retrying" {
		t.Fatalf("the last line is %q, want the failure's: the sampler let the recovery through, nothing to test", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.housekeepingLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testwait.For(t, "the held recovery line written by the housekeeper", func() bool {
		return logs.FilterMessage("redis prepare recovered").Len() == 2
	})
	held := logs.FilterMessage("redis prepare recovered").All()[1].ContextMap()
	// Written at least 850 ms after the run ended (the sampler's second
	// since the first recovery line); the run itself lasted span.
	if d, _ := held["failing_for"].(time.Duration); d > span+time.Millisecond {
		t.Errorf("the held line says failing_for %s: measured to its writing, want to the success that ended the run (%s)", d, span)
	}
}

// quietStore answers the housekeeper's calls with nothing to report.
type quietStore struct{ Store }

func (quietStore) Time(context.Context, int) (time.Time, error) { return time.Now(), nil }
func (quietStore) StreamStats(context.Context, int) (repo.StreamStats, error) {
	return repo.StreamStats{}, nil
}
func (quietStore) PruneConsumers(context.Context, int, string, time.Duration) ([]string, error) {
	return nil, nil
}

// A recovery line the sampler held back is no line left out: it is
// written later. Tried again at exit every 100 ms while the sampler's
// second ran, each refusal counted one more in
// combo_log_lines_suppressed_total{logger="worker"}, and the line, once
// written, said suppressed_since_last 11: one held line read as a flood
// of eleven left out. Only the first refusal, when the run ended, may
// count (the sampler counts every refused Check).
func TestHeldRecoveryLineIsNotCountedAsLeftOutAgain(t *testing.T) {
	var mu sync.Mutex
	leftOut := 0
	w, logs := sampledWorker(zapcore.InfoLevel, time.Hour, func(_ string, n int) { mu.Lock(); leftOut += n; mu.Unlock() })
	w.redisError(metrics.OpPrepare, 0, errors.New("i/o timeout"))
	w.redisOK(metrics.OpPrepare, 0)                               // its recovery line: written
	w.redisError(metrics.OpPrepare, 1, errors.New("i/o timeout")) // a failure line under 1 s after the first: left out
	w.redisOK(metrics.OpPrepare, 1)                               // its recovery line: held
	if n := logs.FilterMessage("redis prepare recovered").Len(); n != 1 {
		t.Fatalf("%d recovery lines before exit, want 1: the sampler let the second through, nothing to test", n)
	}
	w.writeHeldAtExit(context.Background())
	lines := logs.FilterMessage("redis prepare recovered").All()
	if len(lines) != 2 {
		t.Fatalf("%d recovery lines after exit, want 2: the held one written", len(lines))
	}
	mu.Lock()
	defer mu.Unlock()
	if leftOut > 2 { // the failure line, and the held line's one refusal
		t.Errorf("%d lines counted left out, want at most 2: the held line's retries counted as lines left out", leftOut)
	}
	if n, _ := lines[1].ContextMap()["suppressed_since_last"].(int64); n > 1 {
		t.Errorf("the held line, once written, says suppressed_since_last %d, want at most 1", n)
	}
}

// The held line waits for the sampler's second since the op's last
// recovery line was written, not a second since its own run ended: the
// sampler lets it through from then on. Waiting for the run's end plus a
// second lost the line at an exit whose drain had run out (writeHeldAtExit
// then tries once) when the run had ended under a second before, though
// the last line written was over a second old: the log's last word on the
// op was its failure.
func TestHeldRecoveryLineIsWrittenAtAnExitCutShort(t *testing.T) {
	w, logs := sampledWorker(zapcore.InfoLevel, time.Hour, nil)
	w.redisError(metrics.OpPrepare, 0, errors.New("i/o timeout"))
	w.redisOK(metrics.OpPrepare, 0) // its recovery line: written
	written := time.Now()
	time.Sleep(500 * time.Millisecond)
	w.redisError(metrics.OpPrepare, 1, errors.New("i/o timeout"))
	w.redisOK(metrics.OpPrepare, 1) // under 1 s after the first recovery line: held
	ended := time.Now()
	if n := logs.FilterMessage("redis prepare recovered").Len(); n != 1 || ended.Sub(written) >= time.Second {
		t.Skipf("%d recovery lines before exit, the run ended %s after the first line: the sampler let the second through, nothing to test", n, ended.Sub(written))
	}
	time.Sleep(time.Until(written.Add(1100 * time.Millisecond)))
	if time.Since(ended) >= time.Second {
		t.Skipf("the exit came %s after the run ended, not under a second: nothing to test", time.Since(ended))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the drain's bound has run out: one try
	w.writeHeldAtExit(ctx)
	if n := logs.FilterMessage("redis prepare recovered").Len(); n != 2 {
		t.Errorf("%d recovery lines after an exit %s after the last one was written, want 2: the held line lost",
			n, time.Since(written).Round(time.Millisecond))
	}
}

// sampledWorker is a worker of two shards on quietStore whose log goes
// through a sampled logger observed from lvl, as the service's does, its
// lines left out counted by leftOut (nil: not counted).
func sampledWorker(lvl zapcore.Level, sampleEvery time.Duration, leftOut logging.Suppressed) (*Worker, *observer.ObservedLogs) {
	core, logs := observer.New(lvl)
	w := New(quietStore{}, Config{Consumer: "c1", Shards: 2, SampleEvery: sampleEvery}, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	w.log = logging.Sampled(zap.New(core), leftOut)
	return w, logs
}

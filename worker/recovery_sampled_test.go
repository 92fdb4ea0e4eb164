package worker

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/metrics"
)

// The recovery line goes through the worker's sampled logger: an op that
// fails and recovers twice, the recoveries under a second apart and the
// failures over a second apart, had "failed; retrying" as its last line
// though it succeeded since: the second recovery was thinned away. It is
// written at one of the op's next successes (a reader's next read), once
// the sampler lets it through.
func TestRecoveryLineIsNotThinnedAway(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	w := &Worker{log: logging.Sampled(zap.New(core), nil), metrics: metrics.New(prometheus.NewRegistry())}
	w.redisError(metrics.OpRead, 0, errors.New("i/o timeout"))
	time.Sleep(900 * time.Millisecond)
	w.redisOK(metrics.OpRead, 0)
	time.Sleep(150 * time.Millisecond)
	w.redisError(metrics.OpRead, 0, errors.New("i/o timeout")) // over 1 s after the first failure line: written
	w.redisOK(metrics.OpRead, 0)                               // under 1 s after the first recovery line: held
	last := func() string { all := logs.All(); return all[len(all)-1].Message }
	if got := last(); got != "redis read failed; retrying" {
		t.Fatalf("the last line is %q, want the failure's: the sampler let the recovery through, nothing to test", got)
	}
	testwait.For(t, "the held recovery line written at a later read's success", func() bool {
		w.redisOK(metrics.OpRead, 0) // the reader's next reads
		return last() == "redis read recovered"
	})
	if n := logs.FilterMessage("redis read recovered").Len(); n != 2 {
		t.Errorf("%d recovery lines, want 2 (one per run)", n)
	}
}

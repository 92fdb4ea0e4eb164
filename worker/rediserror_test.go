package worker

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/metrics"
)

// The worker's log is sampled by message: reads timing out without end
// (a dead master) must not hide a different op's failure, here each of
// the others', in the same second.
func TestRedisErrorOfOneOpHidesNoOther(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	w := &Worker{log: logging.Sampled(zap.New(core), nil), metrics: metrics.New(prometheus.NewRegistry())}
	for range 100 {
		w.redisError(metrics.OpRead, 0, errors.New("i/o timeout"))
	}
	others := []string{metrics.OpPrepare, metrics.OpDrop, metrics.OpRetire, metrics.OpClaim, metrics.OpFlush,
		metrics.OpFlushScript, metrics.OpFinalRead, metrics.OpTime, metrics.OpStreamStats, metrics.OpPruneConsumers}
	for _, op := range others {
		w.redisError(op, 0, errors.New("NOPERM this user has no permissions to access the 'act:1:contributions' channel"))
	}
	byOp := map[any]int{}
	for _, e := range logs.All() {
		byOp[e.ContextMap()["op"]]++
	}
	if byOp[metrics.OpRead] != 1 {
		t.Errorf("%d read failures written in one second, want 1", byOp[metrics.OpRead])
	}
	for _, op := range others {
		if byOp[op] != 1 {
			t.Errorf("op %s: %d lines, want 1 (lines by op: %v)", op, byOp[op], byOp)
		}
	}
}

package worker

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/metrics"
)

// A drop's or a retire's failure is logged and counted but opens no run
// of failures: nothing retries it in a loop, so no success would end the
// run, and every later success of any op would take the lock for good.
func TestRecoveryOneOffErrorOpensNoRun(t *testing.T) {
	w := &Worker{log: zap.NewNop(), metrics: metrics.New(prometheus.NewRegistry())}
	w.oneOffError(metrics.OpDrop, 0, errors.New("i/o timeout"))
	w.oneOffError(metrics.OpRetire, 1, errors.New("i/o timeout"))
	if n := w.failing.open.Load(); n != 0 || len(w.failing.runs) != 0 {
		t.Fatalf("%d runs open (%v) after one-off failures, want none", n, w.failing.runs)
	}
}

package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/combo-service/combo-service/metrics"
)

// At log.level warn the recovery line (info) is not thinned away but not
// wanted: there is nothing to hold. Held, the run stayed open for good
// (every later success taking failingOps' lock, its failures adding up
// across outages) and each exit spent writeHeldAtExit's 1.1 s on it.
func TestRecoveryLineBelowLogLevelIsNotHeld(t *testing.T) {
	w, logs := sampledWorker(zapcore.WarnLevel, time.Hour, nil)
	w.redisError(metrics.OpRead, 0, errors.New("i/o timeout"))
	w.redisOK(metrics.OpRead, 0)
	if n := w.failing.open.Load(); n != 0 {
		t.Errorf("%d runs open after the op recovered at log.level warn, want 0", n)
	}
	start := time.Now()
	w.writeHeldAtExit(context.Background())
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("the exit waited %s for a line log.level leaves out, want no wait", took)
	}
	if n := logs.FilterMessage("redis read recovered").Len(); n != 0 {
		t.Errorf("%d recovery lines at log.level warn, want 0", n)
	}
}

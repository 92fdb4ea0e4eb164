package worker

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// A window dropped at window.stale is logged with the quantity it held,
// or, when its data had expired first (it waited past its keys' time to
// live: a slot half-moved for over a minute), saying that the quantity
// is not known: flush.lua then answers 0, which the line gave as the
// quantity, as if the window had held nothing.
func TestStaleWindowSaysWhenItsQuantityIsUnknown(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	w := &Worker{log: zap.New(core), metrics: metrics.New(prometheus.NewRegistry())}
	win := repo.Window{ID: "1-0", Shard: 3, ActivityID: 7, UserID: 42, ItemType: "rose"}
	w.stale(win, repo.FlushResult{Status: repo.Stale, Age: time.Minute, Quantity: 5}, zapcore.WarnLevel, "dropped")
	w.stale(win, repo.FlushResult{Status: repo.Stale, Age: 78 * time.Second}, zapcore.WarnLevel, "dropped")
	lines := logs.All()
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	if f := lines[0].ContextMap(); f["quantity"] != int64(5) || f["quantity_unknown"] != nil {
		t.Errorf("a window that held 5: fields %v, want quantity 5 and nothing said unknown", f)
	}
	if f := lines[1].ContextMap(); f["quantity"] != nil || f["quantity_unknown"] == nil {
		t.Errorf("a window whose data expired: fields %v, want no quantity, and why it is unknown", f)
	}
}

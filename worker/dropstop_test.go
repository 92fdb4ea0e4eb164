package worker

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// stoppingStore's Read finds pending entries deleted from the stream, and
// the worker stops (its ctx ends) as it answers; its Drop then fails with
// that ctx, as go-redis does.
type stoppingStore struct {
	Store
	stop context.CancelFunc
}

func (s stoppingStore) Read(ctx context.Context, _ int, _, _ string, _ int, _ time.Duration) ([]repo.Window, []repo.BadEntry, []string, error) {
	s.stop()
	return nil, nil, []string{"1-0"}, nil
}

func (stoppingStore) Drop(ctx context.Context, _ int, _ []string) error { return ctx.Err() }

// A drop of deleted entries cut short by the worker's own stop is no
// Redis failure: counted in combo_redis_errors_total{op="drop"} it paged
// ComboRedisErrors for a shutdown, as the drop of unparsable entries
// (dropBad) already did not.
func TestDropOfDeletedEntriesCutByStopIsNoRedisError(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := New(stoppingStore{stop: cancel}, Config{Consumer: "c1", Shards: 1}, zap.NewNop(), m)
	if _, err := w.readOnce(ctx, 0, "0", -1); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(m.ClaimDeleted); n != 1 {
		t.Fatalf("claim_deleted_entries_total %v, want 1: the read's deleted entry not seen, nothing to test", n)
	}
	if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpDrop)); n != 0 {
		t.Errorf(`redis_errors_total{op="drop"} = %v after a drop cut short by the stop, want 0`, n)
	}
}

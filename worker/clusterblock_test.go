package worker

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// On a Redis Cluster the BLOCK is at most half the client's reply timeout
// (see clusterBlock), said once; elsewhere, and when shorter
// already, it is as configured.
func TestBlockOnAClusterIsShortenedBelowTheReplyTimeout(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: 500 * time.Millisecond}) // never dialed
	t.Cleanup(func() { rdb.Close() })
	store := repo.New(rdb, repo.Settings{Window: time.Second, Grace: 200 * time.Millisecond, Dedupe: time.Minute,
		Stale: time.Minute, Timeout: 500 * time.Millisecond, Shards: 1, StreamMaxLen: 1000})
	for _, tc := range []struct {
		cluster     bool
		block, want time.Duration
	}{
		{true, time.Second, 250 * time.Millisecond},
		{true, 100 * time.Millisecond, 100 * time.Millisecond},
		{false, time.Second, time.Second},
	} {
		core, logs := observer.New(zapcore.InfoLevel)
		w := New(store, Config{Consumer: "c", Block: tc.block, NodePerShard: tc.cluster}, zap.New(core), metrics.New(prometheus.NewRegistry()))
		if w.cfg.Block != tc.want {
			t.Errorf("cluster %v, block %s: the worker blocks %s, want %s", tc.cluster, tc.block, w.cfg.Block, tc.want)
		}
		lines := logs.FilterMessageSnippet("worker.block shortened").All()
		if shortened := tc.want != tc.block; len(lines) != map[bool]int{true: 1, false: 0}[shortened] {
			t.Errorf("cluster %v, block %s: %d lines saying the block was shortened", tc.cluster, tc.block, len(lines))
		}
	}
}

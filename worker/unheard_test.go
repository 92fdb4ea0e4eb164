package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/worker"
)

// A window published while no gateway is subscribed is counted in
// combo_windows_unheard_total as well as published: every flush succeeds,
// and nothing else shows that no viewer saw the push. Once a subscriber
// listens, published windows are not counted there.
func TestPushNoSubscriberHeardIsCountedUnheard(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r := newRepo(t, rdb, w, 1) // no subscriber
	m := metrics.New(prometheus.NewRegistry())
	startWorker(t, r, m)
	published := func(n float64) func() bool {
		return func() bool {
			return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(metrics.FlushedPublished)) >= n
		}
	}

	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, 5)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the window published", published(1))
	if n := testutil.ToFloat64(m.WindowsUnheard); n != 1 {
		t.Fatalf("combo_windows_unheard_total = %v after a push no one subscribed to, want 1", n)
	}

	sub := rdb.PSubscribe(context.Background(), push.ChannelPattern)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Report(context.Background(), []*combo.Contribution{contribution(2, 6)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	waitFor(t, "the second window counted", published(2))
	if n := testutil.ToFloat64(m.WindowsUnheard); n != 1 {
		t.Errorf("combo_windows_unheard_total = %v after a push a subscriber heard, want still 1", n)
	}
}

// On a Redis Cluster a node's PUBLISH counts only its own subscribers, so
// the repo answers Heard -1 (not known) and the worker counts no window
// unheard, heard or not: counting Heard <= 0 would count every push there
// and fire ComboPushesUnheard on a cluster whose gateways all listen.
func TestPushOnAClusterIsNeverCountedUnheard(t *testing.T) {
	c := newClusterCase(t)
	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(c.r, worker.Config{Consumer: "c1", Shards: clusterShards, ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: time.Hour}, zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	for s := range clusterShards {
		c.report(s)
	}
	waitFor(t, "every shard's window published", func() bool {
		return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(metrics.FlushedPublished)) >= clusterShards
	})
	if n := testutil.ToFloat64(m.WindowsUnheard); n != 0 {
		t.Errorf("combo_windows_unheard_total = %v after %d pushes on a cluster, want 0 (not known there)", n, clusterShards)
	}
}

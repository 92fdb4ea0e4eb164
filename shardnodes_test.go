package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/metrics"
)

// The loop that reads the slot map again survives a reading that panics
// (logged and counted) and one that fails (logged, the bounds kept), goes
// on reading, and stops when told, cutting short a reading under way.
func TestShardNodeWatchSurvivesABadReadingAndStops(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	core, logs := observer.New(zap.InfoLevel)
	calls := make(chan int, 100)
	n := 0
	refresh := func(ctx context.Context) (bool, error) {
		n++
		calls <- n
		switch n {
		case 1:
			panic("a bad reading")
		case 2:
			return false, errors.New("CLUSTERDOWN")
		case 3:
			return true, nil
		case 4:
			if _, ok := ctx.Deadline(); !ok {
				t.Error("a reading has no deadline")
			}
			return false, nil
		default:
			<-ctx.Done() // under way when Stop comes
			return false, ctx.Err()
		}
	}
	w := newShardNodeWatch(refresh, 5*time.Millisecond, time.Minute, zap.New(core), m)
	w.Start()
	for want := 1; want <= 5; want++ {
		select {
		case got := <-calls:
			if got != want {
				t.Fatalf("reading %d, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("reading %d never came: the loop stopped", want)
		}
	}
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not end a reading under way")
	}

	if got := testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopShardNodes)); got != 1 {
		t.Errorf("loop_panics_total{loop=%q} = %v, want 1", metrics.LoopShardNodes, got)
	}
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Level.String()+": "+e.Message)
	}
	want := []string{
		"error: recovered panic in the shard node loop",
		"warn: could not read which node serves each shard; the batch pipelines' bounds stay as they were",
		"info: which node serves each shard changed, or was read for the first time; batch pipelines are now bounded by each node's own shards",
	}
	if len(msgs) != len(want) {
		t.Fatalf("logged %q, want %q (nothing for an unchanged map or a reading cut short by Stop)", msgs, want)
	}
	for i := range want {
		if msgs[i] != want[i] {
			t.Errorf("log %d: %q, want %q", i, msgs[i], want[i])
		}
	}
}

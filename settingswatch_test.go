package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// The settings watch warns once of each replica found with other
// settings, counts those that differ, forgets one that agrees again or is
// gone, keeps what it knew through a failed reading, and survives a panic.
func TestSettingsWatchCountsTheReplicasThatDiffer(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	core, logs := observer.New(zap.WarnLevel)
	answers := make(chan func() (map[string]string, error), 1)
	share := func(context.Context) (map[string]string, error) { return (<-answers)() }
	w := newSettingsWatch(share, func(context.Context) error { return nil }, "mine", time.Hour, time.Second, zap.New(core), m)
	for i, step := range []struct {
		answer func() (map[string]string, error)
		want   float64
		warned int // warnings so far
	}{
		{func() (map[string]string, error) { return map[string]string{"b": "mine"}, nil }, 0, 0},
		{func() (map[string]string, error) { return map[string]string{"b": "mine", "c": "other"}, nil }, 1, 1},
		{func() (map[string]string, error) { return map[string]string{"c": "other", "d": "other"}, nil }, 2, 2},
		{func() (map[string]string, error) { return nil, errors.New("connection refused") }, 2, 2},
		{func() (map[string]string, error) { panic("boom") }, 2, 2},
		{func() (map[string]string, error) { return map[string]string{"c": "third", "d": "other"}, nil }, 2, 3},
		{func() (map[string]string, error) { return map[string]string{"c": "mine"}, nil }, 0, 3},
	} {
		answers <- step.answer
		w.once(context.Background())
		if got := testutil.ToFloat64(m.ReplicasSettingsDiffer); got != step.want {
			t.Fatalf("step %d: gauge %v, want %v", i, got, step.want)
		}
		if n := logs.FilterMessageSnippet("another replica runs with other settings").Len(); n != step.warned {
			t.Fatalf("step %d: %d warnings, want %d: %v", i, n, step.warned, logs.All())
		}
	}
	if n := testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopSettingsWatch)); n != 1 {
		t.Fatalf("panics counted %v, want 1", n)
	}
}

// The settings compared are redis.shards and window.*, whatever form the
// configuration wrote a duration in.
func TestReplicaSettingsAreShardsAndWindow(t *testing.T) {
	a, b := conf.Default(), conf.Default()
	b.Window.Size = 3000 * time.Millisecond
	if replicaSettings(a) != replicaSettings(b) {
		t.Fatalf("%q and %q differ for the same window", replicaSettings(a), replicaSettings(b))
	}
	for name, change := range map[string]func(*conf.Config){
		"redis.shards":  func(c *conf.Config) { c.Redis.Shards++ },
		"window.size":   func(c *conf.Config) { c.Window.Size++ },
		"window.grace":  func(c *conf.Config) { c.Window.Grace++ },
		"window.dedupe": func(c *conf.Config) { c.Window.Dedupe++ },
		"window.stale":  func(c *conf.Config) { c.Window.Stale++ },
	} {
		c := conf.Default()
		change(&c)
		if replicaSettings(c) == replicaSettings(a) || !strings.Contains(replicaSettings(c), name+"=") {
			t.Errorf("%s changed: %q, want it to differ, naming %s", name, replicaSettings(c), name)
		}
	}
}

// Two replicas on one Redis with other window.dedupe: the one started
// second warns at start naming the first, and counts it; stopped cleanly,
// it deletes its settings key.
func TestAReplicaWithOtherSettingsIsNamed(t *testing.T) {
	first := startService(t, options{mutate: func(c *conf.Config) { c.Worker.Consumer = "first" }})
	ctx := context.Background()
	stream := repo.NewKeys(first.cfg.Redis.Shards).Stream(0)
	waitUntil(t, 10*time.Second, "the first replica's worker in shard 0's group", func() bool {
		cs, _ := first.rdb.XInfoConsumers(ctx, stream, repo.Group).Result()
		return len(cs) == 1
	})
	core, logs := observer.New(zap.WarnLevel)
	second := startService(t, options{redis: first.redis, log: zap.New(core), mutate: func(c *conf.Config) {
		c.Worker.Consumer = "second"
		c.Window.Dedupe = time.Minute
	}})
	warned := logs.FilterMessageSnippet("another replica runs with other settings").FilterField(zap.String("replica", "first"))
	if warned.Len() != 1 || !strings.Contains(warned.All()[0].ContextMap()["settings"].(string), "window.dedupe=1m0s") {
		t.Fatalf("warnings %v, want one naming the first replica", logs.All())
	}
	if !strings.Contains(scrape(t, second), "\ncombo_replicas_settings_differ 1\n") {
		t.Fatal("combo_replicas_settings_differ is not 1 with one replica of other settings")
	}
	key := repo.NewKeys(1).ReplicaSettings("second")
	if n := first.rdb.Exists(ctx, key).Val(); n != 1 {
		t.Fatalf("%s missing while the second replica runs", key)
	}
	if err := second.stop(); err != nil {
		t.Fatal(err)
	}
	if err := first.rdb.Get(ctx, key).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("%s after a clean stop: %v, want it deleted", key, err)
	}
}

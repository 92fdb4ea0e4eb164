package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// The settings watch warns once of the replicas found with other
// settings, in one line a reading, counts those that differ, forgets one that agrees again or is gone,
// keeps what it knew through a failed reading, and survives a panic.
func TestSettingsWatchCountsTheReplicasThatDiffer(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	core, logs := observer.New(zap.InfoLevel)
	answers := make(chan func() (map[string]string, error), 1)
	share := func(context.Context) (map[string]string, error) {
		return testwait.Receive(t, "a step's answer", answers)()
	}
	w := newSettingsWatch(share, noClaim(), forgetNothing, "mine", time.Hour, time.Second,
		zap.New(core), m)
	named := func() []string { // the replicas each warning named, in order
		var out []string
		for _, e := range logs.FilterMessageSnippet("other replicas run with other settings").All() {
			out = append(out, fmt.Sprint(e.ContextMap()["replica_settings"]))
		}
		return out
	}
	for i, step := range []struct {
		answer func() (map[string]string, error)
		want   float64
		named  []string // every warning so far
	}{
		{func() (map[string]string, error) { return map[string]string{"b": "mine"}, nil }, 0, nil},
		{func() (map[string]string, error) {
			return map[string]string{"b": "mine", "c": "other", "e": "other"}, nil
		}, 2,
			[]string{"map[c:other e:other]"}},
		{func() (map[string]string, error) { return map[string]string{"c": "other", "d": "other"}, nil }, 2,
			[]string{"map[c:other e:other]", "map[d:other]"}},
		{func() (map[string]string, error) { return nil, errors.New("connection refused") }, 2,
			[]string{"map[c:other e:other]", "map[d:other]"}},
		{func() (map[string]string, error) { panic("boom") }, 2, []string{"map[c:other e:other]", "map[d:other]"}},
		{func() (map[string]string, error) { return map[string]string{"c": "third", "d": "other"}, nil }, 2,
			[]string{"map[c:other e:other]", "map[d:other]", "map[c:third]"}},
		{func() (map[string]string, error) { return map[string]string{"c": "mine"}, nil }, 0,
			[]string{"map[c:other e:other]", "map[d:other]", "map[c:third]"}},
	} {
		testwait.Send(t, fmt.Sprintf("step %d's answer (the last one unread)", i), answers, step.answer)
		w.once(context.Background())
		if got := testutil.ToFloat64(m.ReplicasSettingsDiffer); got != step.want {
			t.Fatalf("step %d: gauge %v, want %v", i, got, step.want)
		}
		if got := named(); !slices.Equal(got, step.named) {
			t.Fatalf("step %d: warnings named %v, want %v", i, got, step.named)
		}
	}
	if n := testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopSettingsWatch)); n != 1 {
		t.Fatalf("panics counted %v, want 1", n)
	}
	if n := logs.FilterMessageSnippet("now agree or are gone").Len(); n != 2 {
		t.Fatalf("%d lines of replicas that agree or are gone, want 2 (e; then c and d)", n)
	}
}

// Every replica found differing in one reading is named, through the
// sampled logger main gives the watch: a line a replica, all with one
// message, named only the first (a rolling update shows a new replica
// every old one at once).
func TestSettingsWatchNamesEveryReplicaThroughTheSampledLog(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	core, logs := observer.New(zap.InfoLevel)
	share := func(context.Context) (map[string]string, error) {
		return map[string]string{"c": "other", "d": "third", "e": "mine"}, nil
	}
	w := newSettingsWatch(share, noClaim(), forgetNothing, "mine", time.Hour, time.Second,
		logging.Sampled(zap.New(core), m.LogSuppressed), m)
	w.once(context.Background())
	warned := logs.FilterMessageSnippet("other replicas run with other settings").All()
	if len(warned) != 1 || fmt.Sprint(warned[0].ContextMap()["replica_settings"]) != "map[c:other d:third]" {
		t.Fatalf("warnings %v, want one naming c and d with their settings", warned)
	}
}

// A first reading that fails is said at warn (a user denied SMEMBERS
// would otherwise leave the check off unseen), later ones at debug only.
func TestSettingsWatchWarnsOnceThatItCannotCompare(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	core, logs := observer.New(zap.DebugLevel)
	share := func(context.Context) (map[string]string, error) { return nil, errors.New("NOPERM smembers") }
	w := newSettingsWatch(share, noClaim(), forgetNothing, "mine", time.Hour, time.Second, zap.New(core), m)
	for range 3 {
		w.once(context.Background())
	}
	failed := logs.FilterMessageSnippet("could not compare")
	if warns, debugs := failed.FilterLevelExact(zap.WarnLevel).Len(), failed.FilterLevelExact(zap.DebugLevel).Len(); warns != 1 || debugs != 2 {
		t.Fatalf("%d warnings and %d debug lines of 3 failed readings, want 1 and 2", warns, debugs)
	}
}

// forgetNothing is a watch's forget at Stop that deletes nothing, and
// says it did.
func forgetNothing(context.Context, string) (bool, error) { return true, nil }

// noClaim is a claim of the consumer that finds no other process.
func noClaim() *consumerClaim {
	return newConsumerClaim(func(context.Context, string) (string, error) { return "", nil }, zap.NewNop(), testGauge())
}

// The settings watch claims the consumer at every reading (the first
// claim that succeeds is discounted, so a watch claiming only at start
// would never warn), each claim in time of its own: the sharing after it
// may take four round trips, and a slow claim must not leave it less.
func TestSettingsWatchClaimsAtEveryReading(t *testing.T) {
	var claimEnds, shareEnds []time.Time // each call's context's deadline
	start := time.Now()
	claim := newConsumerClaim(func(ctx context.Context, _ string) (string, error) {
		end, ok := ctx.Deadline()
		if !ok || end.Sub(start) > 2*time.Second {
			t.Errorf("a claim given deadline %v (set: %v), want within the watch's one second", end, ok)
		}
		claimEnds = append(claimEnds, end)
		time.Sleep(5 * time.Millisecond) // a claim that takes a while
		return "", nil
	}, zap.NewNop(), testGauge())
	share := func(ctx context.Context) (map[string]string, error) {
		end, ok := ctx.Deadline()
		if !ok {
			t.Error("a sharing given no deadline")
		}
		shareEnds = append(shareEnds, end)
		return map[string]string{}, nil
	}
	w := newSettingsWatch(share, claim, forgetNothing, "mine", time.Hour, time.Second,
		zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	for range 3 {
		w.once(context.Background())
	}
	if len(claimEnds) != 3 || len(shareEnds) != 3 {
		t.Fatalf("%d claims and %d sharings in 3 readings, want 3 of each", len(claimEnds), len(shareEnds))
	}
	for i := range 3 {
		if got := shareEnds[i].Sub(claimEnds[i]); got < 5*time.Millisecond {
			t.Fatalf("reading %d: the sharing's time ends %v after the claim's, want its own full second (at least the claim's 5ms later)", i, got)
		}
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
	// As Redis is given them: window.dedupe rounded up to whole seconds
	// (the buckets it makes), window.stale in whole milliseconds.
	c, d := conf.Default(), conf.Default()
	c.Window.Dedupe, d.Window.Dedupe = 1500*time.Millisecond, 2*time.Second
	c.Window.Stale, d.Window.Stale = 60*time.Second+500*time.Microsecond, 60*time.Second
	if replicaSettings(c) != replicaSettings(d) {
		t.Fatalf("%q and %q differ, for the same dedupe buckets and stale milliseconds", replicaSettings(c), replicaSettings(d))
	}
	for name, change := range map[string]func(*conf.Config){
		"redis.shards":  func(c *conf.Config) { c.Redis.Shards++ },
		"window.size":   func(c *conf.Config) { c.Window.Size++ },
		"window.grace":  func(c *conf.Config) { c.Window.Grace++ },
		"window.dedupe": func(c *conf.Config) { c.Window.Dedupe++ },
		"window.stale":  func(c *conf.Config) { c.Window.Stale += time.Millisecond },
	} {
		c := conf.Default()
		change(&c)
		if replicaSettings(c) == replicaSettings(a) || !strings.Contains(replicaSettings(c), name+"=") {
			t.Errorf("%s changed: %q, want it to differ, naming %s", name, replicaSettings(c), name)
		}
	}
}

// Three replicas on one Redis: one started with the first's settings
// warns of nothing; one with other window.dedupe warns at start naming
// both others with their settings, and counts them; its settings live
// 90 s unless refreshed, and are deleted on a clean stop.
func TestAReplicaWithOtherSettingsIsNamed(t *testing.T) {
	ctx := context.Background()
	first := startService(t, options{mutate: func(c *conf.Config) { c.Worker.Consumer = "first" }})
	const warning = "other replicas run with other settings"
	core, logs := observer.New(zap.WarnLevel)
	startService(t, options{redis: first.redis, log: zap.New(core), mutate: func(c *conf.Config) { c.Worker.Consumer = "same" }})
	if n := logs.FilterMessageSnippet(warning).Len(); n != 0 {
		t.Fatalf("a replica with the same settings warned: %v", logs.All())
	}
	core, logs = observer.New(zap.WarnLevel)
	second := startService(t, options{redis: first.redis, log: zap.New(core), mutate: func(c *conf.Config) {
		c.Worker.Consumer = "second"
		c.Window.Dedupe = time.Minute
	}})
	warned := logs.FilterMessageSnippet(warning).All()
	if len(warned) == 1 && warned[0].ContextMap()["consumer"] != "second" {
		t.Fatalf("the warning names consumer %v, want the replica's own, second", warned[0].ContextMap()["consumer"])
	}
	theirs := replicaSettings(first.cfg)
	if len(warned) != 1 || fmt.Sprint(warned[0].ContextMap()["replica_settings"]) != fmt.Sprint(map[string]string{"first": theirs, "same": theirs}) ||
		!strings.Contains(warned[0].ContextMap()["settings"].(string), "window.dedupe=1m0s") {
		t.Fatalf("warnings %v, want one naming first and same with their settings", logs.All())
	}
	if !strings.Contains(scrape(t, second), "\ncombo_replicas_settings_differ 2\n") {
		t.Fatal("combo_replicas_settings_differ is not 2 with two replicas of other settings")
	}
	keys := repo.NewKeys(1)
	if ttl := first.rdb.PTTL(ctx, keys.ReplicaSettings("second")).Val(); ttl < 60*time.Second || ttl > 90*time.Second {
		t.Fatalf("the second replica's settings live %s, want 90 s (three readings) at most, and more than 60", ttl)
	}
	if err := second.stop(); err != nil {
		t.Fatal(err)
	}
	if err := first.rdb.Get(ctx, keys.ReplicaSettings("second")).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("the second replica's settings after a clean stop: %v, want them deleted", err)
	}
	if first.rdb.SIsMember(ctx, keys.Replicas(), "second").Val() {
		t.Fatal("the second replica, stopped cleanly, is still named among the replicas")
	}
	// Each replica claims its consumer for its process, named by host and
	// pid, for as long as its settings; a clean stop deletes the claim.
	host, _ := os.Hostname()
	claimed := first.rdb.Get(ctx, keys.ConsumerInstance("first")).Val()
	if want := fmt.Sprintf("%s pid %d ", host, os.Getpid()); !strings.HasPrefix(claimed, want) {
		t.Fatalf("the first replica's consumer claimed by %q, want %q and random bytes", claimed, want)
	}
	if ttl := first.rdb.PTTL(ctx, keys.ConsumerInstance("first")).Val(); ttl < 60*time.Second || ttl > 90*time.Second {
		t.Fatalf("the first replica's claim lives %s, want 90 s at most, and more than 60", ttl)
	}
	if n := first.rdb.Exists(ctx, keys.ConsumerInstance("second")).Val(); n != 0 {
		t.Fatal("the second replica's claim of its consumer is still there after a clean stop")
	}
}

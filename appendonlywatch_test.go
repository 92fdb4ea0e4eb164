package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// Each node watch reads its setting again while the service runs: a
// node turned unsafe after the start (a Redis restarted with another
// policy, or turned to appendonly no; the start check alone said nothing
// of it) is warned of once however many readings, counted in its gauge
// only, and its return is said once and clears it. Each reads through
// the reader main gives it on one Redis (not the Sentinels' reading,
// which, with no Sentinel, reads no node and fails none).
func TestNodeWatchesFollowTheirSetting(t *testing.T) {
	for _, c := range []struct {
		name                string
		watch               func(func(context.Context) (map[string]string, error), time.Duration, time.Duration, map[string]string, *zap.Logger, *metrics.Metrics) *nodeWatch
		reader              func(conf.Redis, *repo.Repo) (func(context.Context) (map[string]string, error), time.Duration)
		param, unsafe, safe string // the CONFIG SET parameter, and its values
		field, value        string // the warning's field naming the unsafe value
		gauge, other        func(*metrics.Metrics) prometheus.Gauge
		warned, back        string // snippets of the warning and of the line saying it is safe again
	}{
		{"eviction", newEvictionWatch, policyReader, "maxmemory-policy", "allkeys-lru", "noeviction",
			"maxmemory_policy", "allkeys-lru",
			func(m *metrics.Metrics) prometheus.Gauge { return m.RedisNodesEvicting },
			func(m *metrics.Metrics) prometheus.Gauge { return m.RedisNodesNotAppendOnly },
			"maxmemory-policy must be noeviction", "no longer evicts"},
		{"append-only", newAppendOnlyWatch, appendOnlyReader, "appendonly", "no", "yes",
			"aof_enabled", "0",
			func(m *metrics.Metrics) prometheus.Gauge { return m.RedisNodesNotAppendOnly },
			func(m *metrics.Metrics) prometheus.Gauge { return m.RedisNodesEvicting },
			"appendonly no", "keeps an append-only file now"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := testredis.Start(t, testredis.Options{AppendOnly: true})
			rdb := rs.Client()
			store := repo.New(rdb, repo.Settings{Shards: 1})
			m := metrics.New(prometheus.NewRegistry())
			core, logs := observer.New(zap.InfoLevel)
			cfg := conf.Default()
			cfg.Redis.Addr = rs.Addr
			read, budget := c.reader(cfg.Redis, store)
			if budget != cfg.Redis.Timeout {
				t.Fatalf("a reading's budget %v on one Redis, want redis.timeout %v", budget, cfg.Redis.Timeout)
			}
			w := c.watch(read, 20*time.Millisecond, time.Second, nil, zap.New(core), m)
			w.Start()
			defer w.Stop()
			counted := func(want float64) func() bool {
				return func() bool { return testutil.ToFloat64(c.gauge(m)) == want }
			}
			ctx := context.Background()
			if err := rdb.ConfigSet(ctx, c.param, c.unsafe).Err(); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 10*time.Second, "the node counted", counted(1))
			warned := logs.FilterMessageSnippet(c.warned).FilterField(zap.String("node", rs.Addr)).
				FilterField(zap.String(c.field, c.value))
			if warned.Len() != 1 || warned.All()[0].Level != zap.WarnLevel {
				t.Fatalf("logs %v, want one warning naming %s, once however many readings", logs.All(), rs.Addr)
			}
			if err := rdb.ConfigSet(ctx, c.param, c.safe).Err(); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 10*time.Second, "the node no longer counted", counted(0))
			if logs.FilterMessageSnippet(c.back).FilterField(zap.String("node", rs.Addr)).Len() != 1 {
				t.Fatalf("logs %v, want the return said once", logs.All())
			}
			if n := testutil.ToFloat64(c.other(m)); n != 0 {
				t.Fatalf("the other watch's gauge is %v: this watch set it", n)
			}
			aofRewritten(t, rdb)
		})
	}
}

// The append-only watch starts from what the start check found, keeps a
// node it cannot read as last read, forgets one no longer among the nodes,
// counts its own panics, and leaves a refused login to the eviction
// watch, which reads the same nodes and warns of it each minute: it would
// otherwise be said twice.
func TestAppendOnlyWatchKeepsWhatItCannotRead(t *testing.T) {
	refusals := loginRefusals(t)
	m := metrics.New(prometheus.NewRegistry())
	core, logs := observer.New(zap.WarnLevel)
	answers := make(chan func() (map[string]string, error), 1)
	read := func(context.Context) (map[string]string, error) {
		return testwait.Receive(t, "a step's answer", answers)()
	}
	w := newAppendOnlyWatch(read, time.Hour, time.Second, map[string]string{"a:6379": "0"}, zap.New(core), m)
	if got := testutil.ToFloat64(m.RedisNodesNotAppendOnly); got != 1 {
		t.Fatalf("gauge %v, want the start check's 1", got)
	}
	for _, step := range []struct {
		answer func() (map[string]string, error)
		want   float64
	}{
		{func() (map[string]string, error) { return nil, errors.New("connection refused") }, 1},
		{func() (map[string]string, error) { panic("boom") }, 1},
		{func() (map[string]string, error) {
			return map[string]string{"b:6379": "0"}, fmt.Errorf("a:6379: repo.AOFEnabled: %w", refusals.wrongpass)
		}, 2},
		{func() (map[string]string, error) {
			return map[string]string{"a:6379": "1", "b:6379": "0"}, errors.New("c:6379: timeout")
		}, 1},
		{func() (map[string]string, error) { return map[string]string{"c:6379": "1"}, nil }, 1},
		{func() (map[string]string, error) { return map[string]string{"c:6379": "1"}, nil }, 0},
	} {
		testwait.Send(t, "a step's answer (the last one unread)", answers, step.answer)
		w.once(context.Background())
		if got := testutil.ToFloat64(m.RedisNodesNotAppendOnly); got != step.want {
			t.Fatalf("gauge %v, want %v", got, step.want)
		}
		if n := testutil.ToFloat64(m.RedisLoginsRefused.WithLabelValues("node")); n != 0 {
			t.Fatalf("combo_redis_logins_refused %v, want 0: the eviction watch counts refusals", n)
		}
	}
	if n := testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopAppendOnlyWatch)); n != 1 {
		t.Fatalf("panics counted %v under %s, want 1", n, metrics.LoopAppendOnlyWatch)
	}
	if n := logs.FilterMessage("recovered panic in the append-only watch loop").Len(); n != 1 {
		t.Fatalf("logs %v, want the panic said naming the watch in words, as its siblings do", logs.All())
	}
	if n := logs.FilterMessageSnippet("refuse").Len(); n != 0 {
		t.Fatalf("%d warnings of a refused login, want none (the eviction watch's): %v", n, logs.All())
	}
	if n := logs.FilterMessageSnippet("appendonly no").FilterField(zap.String("node", "b:6379")).Len(); n != 1 {
		t.Fatalf("logs %v, want b:6379 warned of once", logs.All())
	}
}

// The watches run starts read what each is for, each logging under its
// own name (as logs and combo_loop_panics_total tell them apart), and go on
// from what the start checks found: the start check's nodes without AOF
// are handed on as "0", so the first reading does not warn again.
func TestStartNodeWatchesReadEachItsOwnSetting(t *testing.T) {
	rs := testredis.Start(t, testredis.Options{AppendOnly: true})
	rdb := rs.Client()
	store := repo.New(rdb, repo.Settings{Shards: 1})
	m := metrics.New(prometheus.NewRegistry())
	core, logs := observer.New(zap.InfoLevel)
	cfg := conf.Default()
	cfg.Redis.Addr = rs.Addr
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	found := warnNotAppendOnly(ctx, cfg, store, zap.New(core))
	if want := map[string]string{rs.Addr: "0"}; !maps.Equal(found, want) {
		t.Fatalf("the start check found %v, want %v", found, want)
	}
	before := tickingLoops()
	stop := startNodeWatches(cfg.Redis, store, 20*time.Millisecond, nil, found, zap.New(core), m)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	var started []string
	for id := range tickingLoops() {
		if !before[id] {
			started = append(started, id)
		}
	}
	if len(started) != 2 {
		t.Fatalf("%d loops started, want 2: one per watch", len(started))
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the node counted evicting", func() bool {
		return testutil.ToFloat64(m.RedisNodesEvicting) == 1
	})
	if n := testutil.ToFloat64(m.RedisNodesNotAppendOnly); n != 1 {
		t.Fatalf("combo_redis_nodes_not_appendonly %v, want 1", n)
	}
	// The append-only watch has read (and not warned again) once it
	// finds AOF back.
	if err := rdb.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the node no longer counted without AOF", func() bool {
		return testutil.ToFloat64(m.RedisNodesNotAppendOnly) == 0
	})
	aofRewritten(t, rdb)
	if back := logs.FilterMessageSnippet("keeps an append-only file now").All(); len(back) != 1 || back[0].LoggerName != "appendonly_watch" {
		t.Errorf("lines saying AOF is back: %v, want one logged by appendonly_watch", back)
	}
	for _, c := range []struct{ snippet, logger string }{
		{"maxmemory-policy must be noeviction", "eviction_watch"},
		{"appendonly no", "appendonly_watch"},
	} {
		var names []string
		for _, e := range logs.FilterMessageSnippet(c.snippet).All() {
			names = append(names, e.LoggerName)
		}
		// The start check's line (no logger name), then the watch's,
		// once for the policy and none for AOF, handed on.
		want := map[string][]string{"eviction_watch": {"eviction_watch"}, "appendonly_watch": {""}}[c.logger]
		if !slices.Equal(names, want) {
			t.Errorf("lines with %q logged by %q, want %q", c.snippet, names, want)
		}
	}
	// What it returns stops both watches (run calls it once, at its end).
	stop()
	stopped = true
	// A loop's goroutine outlives the close of its done channel by its
	// last deferred calls, so this waits for both to be gone (an
	// immediate count failed once in CI with one still returning).
	waitUntil(t, 10*time.Second, "both watches' loops ended", func() bool {
		now := tickingLoops()
		return !slices.ContainsFunc(started, func(id string) bool { return now[id] })
	})
}

// tickingLoops is the goroutine ids of the startTicking loops running now,
// so a test counts its own loops and not another test's, still ending.
func tickingLoops() map[string]bool {
	ids := map[string]bool{}
	for g := range strings.SplitSeq(string(goroutines()), "\n\n") {
		if strings.Contains(g, "combo-service.startTicking.func") {
			id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
			ids[id] = true
		}
	}
	return ids
}

// aofRewritten waits until rdb's node has no AOF rewrite under way: one
// that appendonly yes started makes redis-server slow to stop (the
// test's cleanup waited out its 10 s and killed it).
func aofRewritten(t *testing.T, rdb *redis.Client) {
	t.Helper()
	waitUntil(t, 10*time.Second, "the AOF rewrite done", func() bool {
		return strings.Contains(rdb.Info(context.Background(), "persistence").Val(), "aof_rewrite_in_progress:0")
	})
}

// Every node that turns unsafe (or safe again) in one reading is named:
// their lines share a message, and a logger sampled by message wrote the
// first node's alone, so the others went unnamed for good (the gauge
// counting them all), as it did on a Cluster two nodes changed on within
// a minute.
func TestNodeWatchesNameEveryNodeOfOneReading(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	ctx := context.Background()
	cc := c.Client(t)
	store := repo.New(cc, repo.Settings{Shards: 1})
	m := metrics.New(prometheus.NewRegistry())
	core, logs := observer.New(zap.InfoLevel)
	cfg := conf.Default()
	cfg.Redis.Addrs = c.Addrs
	unsafe := c.Addrs[:2]
	set := func(param, value string, nodes ...string) {
		for _, a := range nodes {
			n := redis.NewClient(&redis.Options{Addr: a})
			err := n.ConfigSet(ctx, param, value).Err()
			n.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	set("appendonly", "yes", c.Addrs[2]) // the nodes start without AOF
	set("maxmemory-policy", "allkeys-lru", unsafe...)
	stop := startNodeWatches(cfg.Redis, store, 20*time.Millisecond, nil, nil, zap.New(core), m)
	defer stop()
	named := func(snippet string) []string {
		var nodes []string
		for _, e := range logs.FilterMessageSnippet(snippet).All() {
			nodes = append(nodes, e.ContextMap()["node"].(string))
		}
		return slices.Sorted(slices.Values(nodes))
	}
	want := slices.Sorted(slices.Values(unsafe))
	waitUntil(t, 10*time.Second, "both nodes counted by both watches", func() bool {
		return testutil.ToFloat64(m.RedisNodesEvicting) == 2 && testutil.ToFloat64(m.RedisNodesNotAppendOnly) == 2
	})
	for _, snippet := range []string{"maxmemory-policy must be noeviction", "appendonly no"} {
		if got := named(snippet); !slices.Equal(got, want) {
			t.Errorf("nodes named by lines with %q: %v, want %v", snippet, got, want)
		}
	}
	set("maxmemory-policy", "noeviction", unsafe...)
	set("appendonly", "yes", unsafe...)
	waitUntil(t, 10*time.Second, "both nodes no longer counted", func() bool {
		return testutil.ToFloat64(m.RedisNodesEvicting) == 0 && testutil.ToFloat64(m.RedisNodesNotAppendOnly) == 0
	})
	for _, snippet := range []string{"no longer evicts", "keeps an append-only file now"} {
		if got := named(snippet); !slices.Equal(got, want) {
			t.Errorf("nodes named by lines with %q: %v, want %v", snippet, got, want)
		}
	}
	for _, a := range c.Addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		aofRewritten(t, n)
		n.Close()
	}
}

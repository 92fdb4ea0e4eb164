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
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// twinLines are the processes the claim's warnings named, and those its
// lines said gone, in order.
func twinLines(logs *observer.ObservedLogs) (warned, gone []string) {
	for _, e := range logs.FilterMessageSnippet("another process runs with this replica's worker.consumer").All() {
		warned = append(warned, e.ContextMap()["other_process"].(string))
	}
	for _, e := range logs.FilterMessageSnippet("no other process has run").All() {
		gone = append(gone, e.ContextMap()["other_process"].(string))
	}
	return warned, gone
}

// Another process claiming this replica's worker.consumer is warned of
// once, naming it, until three claims in a row find none (two twins'
// ticks can interleave so that one claim misses the other's), and again
// if one comes back. The first claim that succeeds counts nothing (it may
// find this replica's own from before a crash), even after failed ones (a
// replica started before its Redis), and a failed claim counts nothing,
// said at warn only before any claim succeeded. Its gauge is 1 from the
// warning until the line saying the other gone.
func TestConsumerClaimWarnsOfAnotherProcess(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	claims := make(chan func() (string, error), 1)
	shared := testGauge()
	claim := newConsumerClaim(func(context.Context, string) (string, error) { return testwait.Receive(t, "a step's claim", claims)() }, zap.New(core), shared)
	found := func(other string) func() (string, error) { return func() (string, error) { return other, nil } }
	failed := func() (string, error) { return "", errors.New("LOADING Redis is loading the dataset in memory") }
	for i, step := range []struct {
		claim        func() (string, error)
		warned, gone []string // every line so far
		shared       float64  // the gauge after it
	}{
		{failed, nil, nil, 0},
		{failed, nil, nil, 0},
		{found("before a crash"), nil, nil, 0},
		{found(""), nil, nil, 0},
		{found("b"), []string{"b"}, nil, 1},
		{found("b"), []string{"b"}, nil, 1},
		{found(""), []string{"b"}, nil, 1},
		{found(""), []string{"b"}, nil, 1},
		{failed, []string{"b"}, nil, 1},
		{found("b"), []string{"b"}, nil, 1},
		{found(""), []string{"b"}, nil, 1},
		{found(""), []string{"b"}, nil, 1},
		{failed, []string{"b"}, nil, 1},
		{found(""), []string{"b"}, []string{"b"}, 0},
		{found(""), []string{"b"}, []string{"b"}, 0},
		{found("c"), []string{"b", "c"}, []string{"b"}, 1},
	} {
		testwait.Send(t, fmt.Sprintf("step %d's claim (the last one unread)", i), claims, step.claim)
		claim.check(context.Background())
		if warned, gone := twinLines(logs); !slices.Equal(warned, step.warned) || !slices.Equal(gone, step.gone) {
			t.Fatalf("claim %d: warned of %q, said gone %q; want %q and %q", i, warned, gone, step.warned, step.gone)
		}
		if got := testutil.ToFloat64(shared); got != step.shared {
			t.Fatalf("claim %d: combo_worker_consumer_shared %v, want %v", i, got, step.shared)
		}
	}
	failures := logs.FilterMessageSnippet("could not claim")
	if w, d := failures.FilterLevelExact(zap.WarnLevel).Len(), failures.FilterLevelExact(zap.DebugLevel).Len(); w != 1 || d != 3 {
		t.Fatalf("failed claims said %d times at warn and %d at debug, want 1 and 3: %v", w, d, logs.All())
	}
	// Every line names this process.
	for _, e := range logs.All() {
		if e.ContextMap()["this_process"] != claim.instance {
			t.Fatalf("line %q names process %v, want %s", e.Message, e.ContextMap()["this_process"], claim.instance)
		}
	}
	// A claim cut short by the watch's Stop is no news; a first failure
	// after a claim succeeded is said at debug only (Redis down is said
	// by the replica's other loops).
	calls := make(chan error, 2)
	fresh := newConsumerClaim(func(context.Context, string) (string, error) {
		return "", testwait.Receive(t, "a claim's error", calls)
	}, zap.New(core), testGauge())
	for _, err := range []error{context.Canceled, nil, errors.New("connection refused")} {
		testwait.Send(t, "a claim's error (the last one unread)", calls, err)
		fresh.check(context.Background())
	}
	failures = logs.FilterMessageSnippet("could not claim")
	if w, d := failures.FilterLevelExact(zap.WarnLevel).Len(), failures.FilterLevelExact(zap.DebugLevel).Len(); w != 1 || d != 4 {
		t.Fatalf("after a claim cut short and a failure after a success: %d warnings and %d debug lines of failed claims, "+
			"want still 1 and one more: %v", w, d, logs.All())
	}
}

// On a real Redis a process claiming its consumer again and again finds
// no other (itself included), and two processes given one consumer each
// find the other from their second claim on, naming it by host and pid.
func TestConsumerClaimsOnRedis(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	store := repo.New(rdb, repo.Settings{Shards: 1})
	core, logs := observer.New(zap.WarnLevel)
	claimOf := func(consumer string) *consumerClaim {
		return newConsumerClaim(func(ctx context.Context, instance string) (string, error) {
			return store.ClaimConsumer(ctx, consumer, instance, settingsWatchEvery)
		}, zap.New(core), testGauge())
	}
	ctx := context.Background()
	alone := claimOf("alone")
	for range 4 {
		alone.check(ctx)
	}
	if logs.Len() != 0 {
		t.Fatalf("a process alone with its consumer warned: %v", logs.All())
	}
	a, b := claimOf("twin"), claimOf("twin")
	for range 2 {
		a.check(ctx)
		b.check(ctx)
	}
	host, _ := os.Hostname()
	warned, _ := twinLines(logs)
	if len(warned) != 2 || warned[0] != b.instance || warned[1] != a.instance ||
		!strings.HasPrefix(a.instance, fmt.Sprintf("%s pid %d ", host, os.Getpid())) || a.instance == b.instance {
		t.Fatalf("twins warned of %q, want b's then a's (%q, %q), each named by host and pid", warned, b.instance, a.instance)
	}
}

// The settings watch run starts names, in each claim line, the consumer
// (once) and both processes, under the settings_watch logger.
func TestReplicaSettingsWatchNamesTheConsumerInClaimLines(t *testing.T) {
	c1 := newC1Watches(t, zap.WarnLevel)
	rdb, logs, m, w := c1.rdb, c1.logs, c1.m, c1.watch()
	ctx := context.Background()
	key := repo.NewKeys(1).ConsumerInstance("c1")
	for range 2 { // the first claim's find is discounted
		if err := rdb.Set(ctx, key, "elsewhere", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		w.once(ctx)
	}
	warned := logs.FilterMessageSnippet("another process runs with this replica's worker.consumer").All()
	if len(warned) != 1 {
		t.Fatalf("logs %v, want one twin warning", logs.All())
	}
	e := warned[0]
	consumers := 0
	for _, f := range e.Context {
		if f.Key == "consumer" {
			consumers++
		}
	}
	if e.LoggerName != "settings_watch" || consumers != 1 || e.ContextMap()["consumer"] != "c1" ||
		e.ContextMap()["other_process"] != "elsewhere" || e.ContextMap()["this_process"] != w.claim.instance {
		t.Fatalf("twin warning %q by %q with %v (consumer %d times), want settings_watch naming c1 once, elsewhere and this process",
			e.Message, e.LoggerName, e.ContextMap(), consumers)
	}
	if got := testutil.ToFloat64(m.ConsumerShared); got != 1 {
		t.Fatalf("combo_worker_consumer_shared %v, want 1", got)
	}
}

// c1Watches makes settings watches as run starts them, each a process
// given worker.consumer "c1", on one real Redis, all logging to logs (at
// the level given) and counting into m.
type c1Watches struct {
	rdb   *redis.Client
	store *repo.Repo
	logs  *observer.ObservedLogs
	log   *zap.Logger
	m     *metrics.Metrics
}

func newC1Watches(t *testing.T, lvl zapcore.Level) c1Watches {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	core, logs := observer.New(lvl)
	return c1Watches{rdb: rdb, store: repo.New(rdb, repo.Settings{Shards: 1}), logs: logs, log: zap.New(core),
		m: metrics.New(prometheus.NewRegistry())}
}

// watch is one more process's settings watch, not started.
func (c c1Watches) watch() *settingsWatch {
	cfg := conf.Default()
	cfg.Worker.Consumer = "c1"
	return newReplicaSettingsWatch(cfg, c.store, c.log, c.m)
}

// sharedKept reports whether c1's settings key and its name among the
// replicas are there.
func (c c1Watches) sharedKept(ctx context.Context) bool {
	keys := repo.NewKeys(1)
	return c.rdb.Exists(ctx, keys.ReplicaSettings("c1")).Val() == 1 && c.rdb.SIsMember(ctx, keys.Replicas(), "c1").Val()
}

// testGauge is a gauge registered nowhere.
func testGauge() prometheus.Gauge { return prometheus.NewGauge(prometheus.GaugeOpts{Name: "test"}) }

// A replica stopping while another process given its worker.consumer
// holds the claim (it claimed last) leaves that one's settings, its name
// among the replicas and its claim, and says so; the last to stop deletes
// them, its claims having found no twin (b's one claim is its first, which
// counts nothing).
func TestStoppingTwinLeavesTheRunningOnesSettings(t *testing.T) {
	c1 := newC1Watches(t, zap.InfoLevel)
	rdb, logs, a, b := c1.rdb, c1.logs, c1.watch(), c1.watch()
	a.Start()
	b.Start() // b claims last
	ctx := context.Background()
	keys := repo.NewKeys(1)
	a.Stop()
	if got := rdb.Get(ctx, keys.ConsumerInstance("c1")).Val(); got != b.claim.instance {
		t.Fatalf("after a stopped the claim is %q, want b's %q", got, b.claim.instance)
	}
	if !c1.sharedKept(ctx) {
		t.Fatal("after a stopped, b's settings or its name among the replicas are gone")
	}
	if n := logs.FilterMessageSnippet("its settings and claim are left to it").Len(); n != 1 {
		t.Fatalf("logs %v, want one line saying a left them to b", logs.All())
	}
	b.Stop()
	if n := rdb.Exists(ctx, keys.ConsumerInstance("c1"), keys.ReplicaSettings("c1")).Val(); n != 0 {
		t.Fatalf("after b stopped %d of its claim and settings remain", n)
	}
}

// A replica that has found a twin running under its worker.consumer leaves
// the shared settings, name and claim when it stops, even holding the
// claim itself (it claimed last): the twin still runs, and deleting them
// left it uncompared and unprotected from removal as an idle consumer
// until its next reading.
func TestStoppingReplicaThatFoundATwinLeavesTheSettings(t *testing.T) {
	c1 := newC1Watches(t, zap.InfoLevel)
	rdb, logs, a, b := c1.rdb, c1.logs, c1.watch(), c1.watch()
	a.Start()
	b.Start()
	ctx := context.Background()
	a.once(ctx) // a's second claim finds b's, and a claims last
	if a.claim.twin != b.claim.instance {
		t.Fatalf("a found twin %q, want b %q", a.claim.twin, b.claim.instance)
	}
	keys := repo.NewKeys(1)
	a.Stop()
	if got := rdb.Get(ctx, keys.ConsumerInstance("c1")).Val(); got != a.claim.instance {
		t.Fatalf("after a stopped the claim is %q, want a's own left for b to replace (%q)", got, a.claim.instance)
	}
	if !c1.sharedKept(ctx) {
		t.Fatal("a, which had found b running under its consumer, deleted the settings or the name they share")
	}
	if n := logs.FilterMessageSnippet("its settings and claim are left to it").Len(); n != 1 {
		t.Fatalf("logs %v, want one line saying a left them to its twin", logs.All())
	}
	b.Stop()
}

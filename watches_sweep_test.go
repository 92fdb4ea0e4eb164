package main

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// Tests pinning what a mutation sweep of the root package found loose:
// each fails with the mutant its comment names.

// A node read in a reading that was not complete (another node did not
// answer) ends the row of complete readings without it: only readings in
// a row count toward nodeForgetAfter, and a Sentinel just reset, then a
// reading with a node timing out, then the Sentinel's list still short,
// forgot a live replica found unsafe (mutant: the node's count of
// readings without it reset only by complete readings).
func TestNodeWatchCountsAnIncompleteReadingThatHoldsTheNode(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	type answer struct {
		read map[string]string
		err  error
	}
	answers := make(chan answer, 1)
	read := func(context.Context) (map[string]string, error) {
		a := testwait.Receive(t, "a reading's answer", answers)
		return a.read, a.err
	}
	w := newEvictionWatch(read, time.Hour, time.Second, map[string]string{"replica:6379": "allkeys-lru"}, zap.NewNop(), m)
	master := map[string]string{"master:6379": "noeviction"}
	both := map[string]string{"master:6379": "noeviction", "replica:6379": "allkeys-lru"}
	for i, a := range []answer{
		{master, nil},
		{both, errors.New("other:6379: i/o timeout")},
		{master, nil},
	} {
		testwait.Send(t, "a reading's answer (the last one unread)", answers, a)
		w.once(context.Background())
		if got := testutil.ToFloat64(m.RedisNodesEvicting); got != 1 {
			t.Fatalf("reading %d: gauge %v, want the replica still counted (never left out of two readings in a row)", i, got)
		}
	}
}

// A Cluster node marked failed that the nodes are named by through its
// hostname (cluster-preferred-endpoint-type hostname, as go-redis names
// the nodes it asks) keeps what it was last read as (mutant: a failed
// node kept by its IP address alone, and the hostname forgotten after
// two readings, clearing its gauge and alert while it is down).
func TestNodeWatchKeepsAFailedNodeNamedByItsHostname(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	failed := errors.Join(repo.FailedNode{Addr: "10.0.0.5:6379", HostAddr: "redis-5.redis:6379", ID: "abc", Flags: "slave,fail"})
	read := func(context.Context) (map[string]string, error) {
		return map[string]string{"redis-0.redis:6379": "noeviction"}, failed
	}
	w := newEvictionWatch(read, time.Hour, time.Second, map[string]string{"redis-5.redis:6379": "allkeys-lru"}, zap.NewNop(), m)
	for range nodeForgetAfter + 1 {
		w.once(context.Background())
	}
	if got := testutil.ToFloat64(m.RedisNodesEvicting); got != 1 {
		t.Fatalf("gauge %v, want the failed node, named by its hostname, still counted (known: %v)", got, w.known)
	}
}

// Every Sentinel announces a failover: the first announcement closes the
// connections to the old master and is warned of; the others find none
// open and say nothing (mutant: a warning at every announcement, three
// lines a failover with three Sentinels, two saying 0 connections).
func TestSwitchAnnouncedByEverySentinelWarnsOnce(t *testing.T) {
	conns := pipeConns(t, "10.0.0.1:6379", 2)
	core, logs := observer.New(zap.InfoLevel)
	w := watchSentinels(conf.Redis{SentinelMaster: "combo"}, nil, nil, conns, zap.New(core), metrics.New(prometheus.NewRegistry()))
	defer w.stop()
	for _, s := range []string{"s1:26379", "s2:26379", "s3:26379"} {
		w.switched(s, "combo 10.0.0.1 6379 10.0.0.2 6379")
	}
	warned := logs.FilterMessageSnippet("announced a failover").All()
	if len(warned) != 1 || warned[0].ContextMap()["connections"] != int64(2) || warned[0].ContextMap()["sentinel"] != "s1:26379" {
		t.Fatalf("logs %v, want one warning, of s1's announcement, naming the 2 connections closed", logs.All())
	}
}

// The embedded Redis's TTLs run with the wall clock: each tick counts
// down the time since the last tick, not since the countdown began
// (mutant: last not moved on, so the n-th tick took n ticks off every
// TTL; after ten seconds' uptime a window or dedupe set with a 12 s TTL
// went within two ticks, and memory's windows were lost before their
// flush).
func TestEmbeddedTTLsRunWithTheClock(t *testing.T) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	const tick = 10 * time.Millisecond
	const ttl = time.Hour
	mr.Set("k", "v")
	mr.SetTTL("k", ttl)
	start := time.Now()
	stop := countDownTTLs(mr, tick)
	defer stop()
	testwait.For(t, "the TTL to count down 300ms", func() bool { return ttl-mr.TTL("k") >= 300*time.Millisecond })
	counted, elapsed := ttl-mr.TTL("k"), time.Since(start)
	if counted > elapsed+tick {
		t.Fatalf("the TTL counted down %v in %v of wall time, want no more than the time passed (and a tick)", counted, elapsed)
	}
}

// On a Cluster each node without AOF is warned of with the watch's words,
// which say that a replica counts too once a failover promotes it, not
// with one Redis's (mutant: the Cluster's case dropped, each node named
// as if it were the only Redis).
func TestWarnsOfClusterNodesWithoutAOFAsMastersOrReplicas(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	cfg := conf.Default()
	cfg.Redis.Addr, cfg.Redis.Addrs = "", c.Addrs
	core, logs := observer.New(zap.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	found := warnNotAppendOnly(ctx, cfg, repo.New(c.Client(t), repo.Settings{Shards: 1}), zap.New(core))
	if len(found) != len(c.Addrs) {
		t.Fatalf("found %v, want the %d nodes (appendonly no)", found, len(c.Addrs))
	}
	for _, addr := range c.Addrs {
		warned := logs.FilterField(zap.String("node", addr)).All()
		if len(warned) != 1 || warned[0].Message != appendOnlyRule.warn {
			t.Fatalf("warnings of %s: %v, want one, the append-only watch's words", addr, warned)
		}
	}
}

// A Sentinel slow to answer, each command within redis.timeout, is
// checked whole: four round trips (each of the lookup's and the
// subscription's connections sends HELLO first) of 0.7 redis.timeout each
// (with the check's time counted as two round trips, such a Sentinel was
// warned of as unreachable for the subscription it allows).
func TestSentinelCheckGivesASlowSentinelTimeForBoth(t *testing.T) {
	master := testredis.Start(t, testredis.Options{})
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	const timeout = 1500 * time.Millisecond
	slow := testredis.Proxy(t, sentinel.Addr, func(client, server net.Conn) {
		go func() { _, _ = io.Copy(server, client) }()
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if err != nil {
				client.Close()
				return
			}
			time.Sleep(timeout * 7 / 10) // each answer takes 0.7 redis.timeout
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
	})
	core, logs := observer.New(zap.WarnLevel)
	r := conf.Default().Redis
	r.Timeout = timeout
	r.SentinelAddrs, r.SentinelMaster = []string{slow}, sentinelMaster
	checkSentinels(context.Background(), r, nil, zap.New(core))
	if logs.Len() != 0 {
		t.Fatalf("logged %v of a Sentinel answering each command within redis.timeout, want nothing", logs.All())
	}
}

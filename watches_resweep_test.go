package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
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

// Tests pinning what a mutation sweep of the watches' loop, intervals,
// node clients and slot-map hook found loose: each fails with the mutant
// its comment names.

// Each call comes a whole interval after the one before it, never
// sooner: the k-th no earlier than k intervals after the start (mutant:
// the ticker run at half the interval, every watch reading twice as
// often as README says, and a first reading right after the start
// checks).
func TestTickingCallsAWholeIntervalApart(t *testing.T) {
	const every = 150 * time.Millisecond
	calls := make(chan time.Time, 3)
	start := time.Now()
	tk := startTicking(every, func(context.Context) {
		select {
		case calls <- time.Now():
		default:
		}
	})
	defer tk.stop()
	for k := 1; k <= 3; k++ {
		at := testwait.Receive(t, fmt.Sprintf("call %d", k), calls)
		if after := at.Sub(start); after < time.Duration(k)*every {
			t.Fatalf("call %d came %v after the start, want at least %v (one interval each)", k, after, time.Duration(k)*every)
		}
	}
}

// stop waits for a call of once under way to return, after cutting it
// short: run stops the watches before the Redis clients they read through
// close, and a reading still running after that met a closed client
// (mutant: stop cancelling without waiting for the loop).
func TestTickingStopWaitsForACallUnderWay(t *testing.T) {
	running := make(chan struct{}, 1)
	var finished atomic.Bool
	tk := startTicking(time.Millisecond, func(ctx context.Context) {
		select {
		case running <- struct{}{}:
		default:
		}
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // the call's own work once cut short
		finished.Store(true)
	})
	testwait.Receive(t, "a call under way", running)
	tk.stop()
	if !finished.Load() {
		t.Fatal("stop returned while a call of once was still running")
	}
}

// Once stopped, the loop calls once no more, even with a tick waiting:
// a tick that came while a call ran is still in the ticker's channel when
// stop cancels, and select, with both ready, took it half the time,
// calling once again with a cancelled context (each watch checks its
// context, so nothing was read, but every call was one too many).
func TestTickingCallsNothingOnceStopped(t *testing.T) {
	for i := range 30 {
		var calls atomic.Int32
		first := make(chan struct{})
		tk := startTicking(time.Millisecond, func(ctx context.Context) {
			if calls.Add(1) == 1 {
				close(first)
				<-ctx.Done()
				time.Sleep(5 * time.Millisecond) // ticks come meanwhile: one waits in the channel
			}
		})
		testwait.Receive(t, "the first call", first)
		tk.stop()
		if n := calls.Load(); n != 1 {
			t.Fatalf("try %d: once called %d times, want 1: a call came after stop", i, n)
		}
	}
}

// The watches read as often as README says: the settings every 30 s
// (their key living 90 s, three readings), the nodes' policy and AOF
// every minute, the slot map every 10 s (mutants: another interval,
// which a test reading the key's TTL alone let through at 25 s, or the
// settings watch run at twice its constant).
func TestWatchesReadAsOftenAsREADMESays(t *testing.T) {
	w := newReplicaSettingsWatch(conf.Default(), nil, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	if w.every != 30*time.Second || 3*settingsWatchEvery != 90*time.Second {
		t.Errorf("the settings watch reads every %v, its key living %v; README: every 30 s, 90 s", w.every, 3*settingsWatchEvery)
	}
	if nodeWatchEvery != time.Minute {
		t.Errorf("the node watches read every %v; README: every minute", nodeWatchEvery)
	}
	if shardNodesEvery != 10*time.Second {
		t.Errorf("the shard node watch reads every %v; README: every 10 s", shardNodesEvery)
	}
}

// A reading through the Sentinels is given three round trips for each
// Sentinel it may ask and two for the nodes (mutant: 2 per Sentinel and
// 3 for the nodes, the same with one Sentinel, which is all the tests
// that read the budget through a real Sentinel had).
func TestNodeReadingsBudgetEachSentinel(t *testing.T) {
	r := conf.Default().Redis
	r.Addr, r.SentinelMaster = "", sentinelMaster
	for n := 1; n <= 3; n++ {
		r.SentinelAddrs = append(r.SentinelAddrs, fmt.Sprintf("127.0.0.1:%d", 26379+n))
		_, budget := nodeReader(r, nil, nil)
		if want := time.Duration(3*n+2) * r.Timeout; budget != want {
			t.Errorf("with %d Sentinels a reading's budget is %v, want %v", n, budget, want)
		}
	}
}

// A connection the Sentinel failover clients' dialer keeps stays in
// go-redis's pool (it checks the socket before each reuse and finds it
// sound) and, once the server closes it, is found closed and dialed
// again before a command is sent on it (mutant: a tracked connection
// whose socket cannot be read, every command of the service's clients
// dialing anew; the type assertion alone let it through).
func TestTrackedConnectionsPassGoRedisCheck(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	var dials atomic.Int32
	conns := newConnsByAddr()
	o := nodeOptions(conf.Default().Redis, nil, srv.Addr, "", "")
	o.PoolSize = 1
	o.Dialer = conns.dialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	})
	c := redis.NewClient(o)
	defer c.Close()
	ctx := context.Background()
	var id int64
	for range 5 {
		var err error
		if id, err = c.ClientID(ctx).Result(); err != nil {
			t.Fatal(err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("5 commands dialed %d connections, want 1 kept in the pool", n)
	}
	admin := srv.Client()
	if err := admin.ClientKillByFilter(ctx, "ID", fmt.Sprint(id)).Err(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the server to close the connection", func() bool {
		return !strings.Contains(admin.ClientList(ctx).Val(), fmt.Sprintf("id=%d ", id))
	})
	// No retries (MaxRetries -1): the command succeeds only if the closed
	// connection was found so before it was sent.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("a command after the server closed the pooled connection: %v, want it sent on a new one", err)
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d dials, want 2: the closed connection replaced once", n)
	}
}

// A Cluster whose seed cannot be reached fails naming that, not as a node
// that serves no slot, which says the cluster is not created or the node
// was removed from it (mutant: a CLUSTER SLOTS that failed taken as an
// empty answer).
func TestClusterClientNamesAnUnreachableSeed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := conf.Default()
	cfg.Redis.Addr, cfg.Redis.Addrs = "", []string{addr}
	cfg.Redis.Timeout = 300 * time.Millisecond
	_, newClient, closeAll, err := openRedis(cfg, testLogger(t), prometheus.NewRegistry(), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	err = newClient(1).Set(context.Background(), "combo-test:k", 1, time.Minute).Err()
	if err == nil || strings.Contains(err.Error(), "serves no slot") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("SET with the only seed %s down = %v, want its connection refused, not a node serving no slot", addr, err)
	}
}

// A claim that takes all its time (a slow Redis) still leaves the
// reading its own: the settings are shared and compared after it
// (mutant: a reading given up once the claim's time ran out, the
// replicas' settings never compared while claims time out).
func TestSettingsWatchComparesAfterAClaimOutOfTime(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	claim := newConsumerClaim(func(ctx context.Context, _ string) (string, error) {
		<-ctx.Done() // the claim's time runs out
		return "", ctx.Err()
	}, zap.NewNop(), testGauge())
	share := func(context.Context) (map[string]string, error) { return map[string]string{"b": "other"}, nil }
	w := newSettingsWatch(share, claim, forgetNothing, "mine", time.Hour, 20*time.Millisecond,
		zap.NewNop(), m)
	w.once(context.Background())
	if got := testutil.ToFloat64(m.ReplicasSettingsDiffer); got != 1 {
		t.Fatalf("combo_replicas_settings_differ %v after a reading whose claim ran out of time, want the replica compared: 1", got)
	}
}

// Only complete readings in a row count toward forgetting a node: one
// that keeps a failed Cluster node (the node there, if not read) ends the
// row as a reading that reads it does (mutant: the failed node's count
// kept, and the node forgotten after two complete readings that were
// not in a row, clearing its gauge and alert while it is only down).
func TestNodeWatchCountsAFailedNodeReadingInTheRow(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	failed := errors.Join(repo.FailedNode{Addr: "replica:6379", ID: "abc", Flags: "slave,fail"})
	answers := make(chan error, 1)
	read := func(context.Context) (map[string]string, error) {
		return map[string]string{"master:6379": "noeviction"}, testwait.Receive(t, "a reading's answer", answers)
	}
	w := newEvictionWatch(read, time.Hour, time.Second, map[string]string{"replica:6379": "allkeys-lru"}, zap.NewNop(), m)
	for i, err := range []error{nil, failed, nil} {
		testwait.Send(t, "a reading's answer (the last one unread)", answers, err)
		w.once(context.Background())
		if got := testutil.ToFloat64(m.RedisNodesEvicting); got != 1 {
			t.Fatalf("reading %d: gauge %v, want the replica still counted (never left out of two readings in a row)", i, got)
		}
	}
}

// Each reading of the slot map is given the watch's timeout: a reading
// left a longer one, on a node that never answers, held back every
// later reading until Stop (mutant: a thousand times it).
func TestShardNodeWatchGivesEachReadingItsTimeout(t *testing.T) {
	start := time.Now()
	deadlines := make(chan time.Time, 1)
	refresh := func(ctx context.Context) (bool, error) {
		end, _ := ctx.Deadline()
		select {
		case deadlines <- end:
		default:
		}
		return false, nil
	}
	w := newShardNodeWatch(refresh, time.Hour, time.Second, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	w.once(context.Background())
	if end := testwait.Receive(t, "a reading", deadlines); end.IsZero() || end.Sub(start) > 2*time.Second {
		t.Fatalf("a reading given deadline %v, want within the watch's one second", end)
	}
}

// One Redis without AOF is named in one Redis's words, not as a replica
// that a failover would promote (mutant: every node but a Sentinel's
// master named a replica, one Redis included).
func TestWarnsOfOneRedisWithoutAOFAsTheRedis(t *testing.T) {
	rs := testredis.Start(t, testredis.Options{})
	cfg := conf.Default()
	cfg.Redis.Addr = rs.Addr
	core, logs := observer.New(zap.WarnLevel)
	found := warnNotAppendOnly(context.Background(), cfg, repo.New(rs.Client(), repo.Settings{Shards: 1}), zap.New(core))
	warned := logs.FilterField(zap.String("node", rs.Addr)).All()
	if len(found) != 1 || len(warned) != 1 || !strings.HasPrefix(warned[0].Message, "Redis keeps no append-only file") {
		t.Fatalf("found %v, warned %v; want %s warned of as the one Redis", found, warned, rs.Addr)
	}
}

// The embedded Redis is not asked for AOF: it keeps nothing on disk by
// design (mutant: asked, and a warning at each start that it could not
// be read, or that it keeps no file).
func TestEmbeddedRedisIsNotAskedForAOF(t *testing.T) {
	cfg := conf.Default()
	cfg.Redis.Addr, cfg.Redis.Addrs, cfg.Redis.SentinelAddrs = "", nil, nil
	core, logs := observer.New(zap.DebugLevel)
	var asked atomic.Int32
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, Dialer: func(context.Context, string, string) (net.Conn, error) {
		asked.Add(1)
		return nil, errors.New("no Redis here")
	}})
	defer rdb.Close()
	if found := warnNotAppendOnly(context.Background(), cfg, repo.New(rdb, repo.Settings{Shards: 1}), zap.New(core)); found != nil || logs.Len() != 0 || asked.Load() != 0 {
		t.Fatalf("found %v, logged %v, dialed %d times; want nothing asked of the embedded Redis", found, logs.All(), asked.Load())
	}
}

// Over TLS, the node watches read the master and replicas the Sentinels
// name through TLS, as the Sentinels themselves are asked (mutant: the
// one-off clients without the TLS configuration, every reading failing
// and both gauges stuck at the start's value, said at debug only).
func TestNodeWatchesReadTLSSentinelsNodes(t *testing.T) {
	master := testredis.Start(t, testredis.Options{TLS: true})
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	cfg := conf.Default()
	cfg.Redis.Addr = ""
	cfg.Redis.SentinelAddrs, cfg.Redis.SentinelMaster = []string{sentinel.Addr}, sentinelMaster
	dialTLS(&cfg, master.TLS)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, reader := range map[string]func(conf.Redis, *repo.Repo) (func(context.Context) (map[string]string, error), time.Duration){
		"policy": policyReader, "aof": appendOnlyReader,
	} {
		read, budget := reader(cfg.Redis, nil)
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		got, err := read(ctx)
		cancel()
		if _, ok := got[master.Addr]; err != nil || !ok {
			t.Errorf("%s: read %v, %v; want the master %s read over TLS", name, got, err, master.Addr)
		}
	}
}

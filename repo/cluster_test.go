package repo_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
)

// On a Redis Cluster, a master that stops answering fails the reports of
// its own shards only: concurrent single reports on live masters' shards
// all succeed. (A shared pipeline spanning a dead node and a live one
// fails whole in go-redis: with one pipeline queue for all shards, 47 of
// 49 live-shard reports failed here.)
func TestDeadMasterFailsOnlyItsShardsReports(t *testing.T) {
	ctx := context.Background()
	c := newClusterCase(t)
	// A live shard's report may wait its turn for a pipeline well past
	// the case's 300 ms when 16 callers share 2 busy cores: a review saw
	// one fail so. The dead master refuses connections at once, so a
	// longer redis.timeout hides no failure the test is about.
	s := settings()
	s.Shards, s.Timeout = len(c.live), 5*time.Second
	r := repo.New(c.cc, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	keys, live := r.Keys(), c.live
	c.cluster.KillMaster(t, c.cc, c.deadAddr)

	var id atomic.Int64
	var liveOK, deadFailed atomic.Int64
	var mu sync.Mutex
	var liveErr, deadErr error
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Second)
	for g := range 16 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				n := id.Add(1)
				it := fmt.Sprint("t", g)
				c := &combo.Contribution{Id: n, ActivityId: 7, UserId: n, ItemId: 1, ItemType: it, Quantity: 1,
					CreatedAt: time.Now().UnixMilli()}
				_, err := r.Report(ctx, []*combo.Contribution{c})
				onLive := live[keys.Shard(7, n, it)]
				mu.Lock()
				switch {
				case onLive && err == nil:
					liveOK.Add(1)
				case onLive:
					liveErr = err
				case err == nil:
					deadErr = errors.New("a report on the dead master's shard succeeded")
				case !errors.Is(err, repo.ErrUnavailable):
					deadErr = err
				default:
					deadFailed.Add(1)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if liveErr != nil {
		t.Errorf("a report on a live master's shard failed: %v", liveErr)
	}
	if deadErr != nil {
		t.Errorf("dead master's shard: %v, want ErrUnavailable", deadErr)
	}
	if liveOK.Load() == 0 || deadFailed.Load() == 0 {
		t.Errorf("%d reports on live shards succeeded, %d on the dead one failed: want some of each", liveOK.Load(), deadFailed.Load())
	}
	t.Logf("live shards: %d reports ok; dead shards: %d unavailable", liveOK.Load(), deadFailed.Load())
}

// On a Redis Cluster with one master dead, a live master whose script cache
// was flushed (it restarted) gets the scripts back on its own: the first
// report and the first flush of its windows succeed. Loading the scripts on
// every node fails while one is dead; before EVAL was sent on NOSCRIPT,
// every flush of a due window there failed until the window went stale.
func TestFlushedScriptCacheWhileAnotherMasterIsDead(t *testing.T) {
	ctx := context.Background()
	c := newClusterCase(t)
	r, keys, cc := c.r, c.r.Keys(), c.cc
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	liveShard := slices.Index(c.live, true)
	onLive := func(id int64) *combo.Contribution { // a contribution of liveShard
		for i := 0; ; i++ {
			if it := fmt.Sprint("t", i); keys.Shard(7, id, it) == liveShard {
				return &combo.Contribution{Id: id, ActivityId: 7, UserId: id, ItemId: 1, ItemType: it, Quantity: 1,
					CreatedAt: time.Now().UnixMilli()}
			}
		}
	}
	// A window acknowledged and read before the trouble.
	if _, err := r.Report(ctx, []*combo.Contribution{onLive(1)}); err != nil {
		t.Fatal(err)
	}
	ws, _, _, err := r.Read(ctx, liveShard, "c1", ">", 10, -1)
	if err != nil || len(ws) != 1 {
		t.Fatalf("read %v, %v; want one window", ws, err)
	}

	c.cluster.KillMaster(t, cc, c.deadAddr)
	live, err := cc.MasterForKey(ctx, keys.Stream(liveShard))
	if err != nil {
		t.Fatal(err)
	}
	if err := live.ScriptFlush(ctx).Err(); err != nil { // as by a restart
		t.Fatal(err)
	}
	if err := r.LoadScripts(ctx); err == nil {
		t.Fatal("LoadScripts succeeded with a master dead: the test no longer shows the case")
	}
	// That failed LoadScripts may have put some script back on the live
	// master (SCRIPT LOAD goes to every node at once); flush again, so the
	// report below meets NOSCRIPT too.
	if err := live.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	res, err := r.Report(ctx, []*combo.Contribution{onLive(2)})
	if err != nil {
		t.Fatalf("first report on the live master after its script cache was flushed: %v", err)
	}
	if res[0].Outcome != repo.Opened {
		t.Fatalf("report: %+v, want a window opened", res[0])
	}
	// The flush must find the window due: an early answer would run the
	// script (and cache it) before the case this test is about.
	now, err := live.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if wait := ws[0].Due - now.UnixMilli(); wait >= 0 {
		time.Sleep(time.Duration(wait+5) * time.Millisecond)
	}
	fres, err := r.Flush(ctx, ws)
	if err != nil {
		t.Fatalf("first flush on the live master after its script cache was flushed: %v", err)
	}
	if fres[0].Status != repo.Published {
		t.Fatalf("flush: %+v, want published", fres[0])
	}
	// A node's PUBLISH counts only its own subscribers: not known here.
	if fres[0].Heard != -1 {
		t.Errorf("a push on a Cluster: Heard = %d, want -1 (not known)", fres[0].Heard)
	}
}

// clusterCase is a repo of 6 shards on a 3-master cluster with its scripts
// loaded, and the master of shard 0 picked to die.
type clusterCase struct {
	cluster  *testredis.Cluster
	cc       *redis.ClusterClient
	r        *repo.Repo
	deadAddr string
	live     []bool // by shard: not on the master picked to die
}

func newClusterCase(t *testing.T) *clusterCase {
	t.Helper()
	const shards = 6
	c := &clusterCase{cluster: testredis.StartCluster(t, 3)}
	c.cc = c.cluster.Client(t)
	s := settings()
	s.Shards = shards
	s.Timeout = 300 * time.Millisecond
	c.r = repo.New(c.cc, s)
	if err := c.r.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	keys := c.r.Keys()
	c.deadAddr = c.cluster.MasterAddr(t, c.cc, keys.Stream(0))
	c.live = make([]bool, shards)
	for sh := range shards {
		c.live[sh] = c.cluster.MasterAddr(t, c.cc, keys.Stream(sh)) != c.deadAddr
	}
	if !slices.Contains(c.live, true) {
		t.Fatal("every shard on one master")
	}
	return c
}

// On a Redis Cluster, Time(shard) runs on the master holding the shard's
// keys, whose clock dates the shard's windows; TIME itself has no key and
// would go to any node.
func TestTimeRunsOnTheShardsMaster(t *testing.T) {
	ctx := context.Background()
	c := newClusterCase(t)
	for shard := range c.live {
		want := c.cluster.MasterAddr(t, c.cc, c.r.Keys().Stream(shard))
		if err := c.cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.ConfigResetStat(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.r.Time(ctx, shard); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex // ForEachMaster runs the masters at once
		var ranOn []string
		if err := c.cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			info, err := m.Info(ctx, "commandstats").Result()
			if strings.Contains(info, "cmdstat_evalsha:") || strings.Contains(info, "cmdstat_eval:") {
				mu.Lock()
				ranOn = append(ranOn, m.Options().Addr)
				mu.Unlock()
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if len(ranOn) != 1 || ranOn[0] != want {
			t.Fatalf("Time(shard %d) ran on %v; the shard's master is %s", shard, ranOn, want)
		}
	}
}

// On a Redis Cluster, one dead master fails only its own shards' reports
// when the others serve theirs (cluster-require-full-coverage no): the
// replica stays ready for the live masters' shards.
func TestReadyWithADeadMaster(t *testing.T) {
	ctx := context.Background()
	c := newClusterCase(t)
	if err := c.r.Ready(ctx); err != nil {
		t.Fatalf("Ready on a healthy cluster: %v", err)
	}
	c.cluster.KillMaster(t, c.cc, c.deadAddr)
	if err := c.r.Ready(ctx); err != nil {
		t.Fatalf("Ready with one of three masters dead: %v", err)
	}
}

// With Redis's default cluster-require-full-coverage, a lost master fails
// the whole cluster: every node refuses every key (CLUSTERDOWN) though it
// still answers PING. No report can succeed, so the replica is not ready.
func TestReadyOnAFailedCluster(t *testing.T) {
	ctx := context.Background()
	c := newClusterCase(t)
	c.cluster.FailMaster(t, c.deadAddr)
	err := c.r.Ready(ctx)
	if err == nil || !strings.Contains(err.Error(), "CLUSTERDOWN") {
		t.Fatalf("Ready on a failed cluster: %v, want CLUSTERDOWN", err)
	}
}

// With cluster-allow-reads-when-down yes, a failed cluster runs the
// scripts and refuses their first write inside. Nothing is written, so a
// report, a degraded publish and a flush all fail UNAVAILABLE, to be sent
// again once the cluster is up, as on CLUSTERDOWN; none is a script's own
// failure, which would degrade the report and fail it INTERNAL.
func TestClusterDownForWritesIsUnavailable(t *testing.T) {
	ctx := context.Background()
	c := newClusterCase(t)
	c.cluster.ConfigSet(t, c.cc, "cluster-allow-reads-when-down", "yes")
	keys := c.r.Keys()
	var onLive []*combo.Contribution
	for n := int64(1); len(onLive) < 2; n++ {
		if c.live[keys.Shard(7, n, "rose")] {
			onLive = append(onLive, &combo.Contribution{Id: n, ActivityId: 7, UserId: n, ItemId: 1, ItemType: "rose",
				Quantity: 1, CreatedAt: time.Now().UnixMilli()})
		}
	}
	shard := keys.Shard(7, onLive[0].UserId, "rose")
	if err := c.r.EnsureGroup(ctx, shard); err != nil {
		t.Fatal(err)
	}
	if res, err := c.r.Report(ctx, onLive[:1]); err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("report before the failure: %+v %v", res, err)
	}
	ws, _, _, err := c.r.Read(ctx, shard, "c1", ">", 10, -1)
	if err != nil || len(ws) != 1 {
		t.Fatalf("read %v, %v; want one window", ws, err)
	}
	live, err := c.cc.MasterForKey(ctx, keys.Stream(shard))
	if err != nil {
		t.Fatal(err)
	}

	c.cluster.FailMaster(t, c.deadAddr)
	before, err := live.DBSize(ctx).Result()
	if err != nil {
		t.Fatalf("a failed cluster with reads allowed still reads: %v", err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "cluster is down") {
			t.Fatalf("%s on a cluster down for writes: %v, want ErrUnavailable naming the cluster down", what, err)
		}
		if strings.Contains(err.Error(), "degraded") {
			t.Fatalf("%s degraded: %v", what, err)
		}
	}
	_, err = c.r.Report(ctx, onLive[1:])
	refused("a new report", err)
	same := *onLive[0] // another purchase of the open window's combo
	same.Id = 1000
	_, err = c.r.Report(ctx, []*combo.Contribution{&same})
	refused("a report into an open window", err)
	// Its dedupe set is read, not written: a copy is still known.
	if res, err := c.r.Report(ctx, onLive[:1]); err != nil || res[0].Outcome != repo.Duplicate {
		t.Fatalf("a copy of a counted report on a cluster down for writes: %+v %v, want a duplicate", res, err)
	}
	_, err = repo.PublishSingles(ctx, c.r, onLive[1:])
	refused("a degraded publish", err)
	untilDue(t, c.r, ws) // the window must be due for its flush to write
	_, err = c.r.Flush(ctx, ws)
	refused("a flush", err)
	if after, err := live.DBSize(ctx).Result(); err != nil || after != before {
		t.Fatalf("keys on the live master: %d before, %d after (%v); want nothing written", before, after, err)
	}
}

// A cluster no seed of which answers is not ready, within the caller's
// bound, and says why once, not once per shard.
func TestReadyWithNoClusterReachable(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{fmt.Sprintf("127.0.0.1:%d", testredis.FreePort(t))},
		DialTimeout: 200 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer cc.Close()
	s := settings()
	s.Shards = 64
	r := repo.New(cc, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err := r.Ready(ctx)
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("Ready = %v after %s", err, time.Since(start))
	}
	if n := strings.Count(err.Error(), "\n") + 1; n > 3 {
		t.Fatalf("%d lines of error for one unreachable seed:\n%v", n, err)
	}
}

// A batch spanning a dead master's shard and live ones fails whole
// (UNAVAILABLE), yet the live shards' reports in it were counted: go-redis
// sends each node its part of the pipeline. So a caller's retry of the
// batch (client.Reporter's) is answered duplicate for them and counts
// nothing twice, and their windows are pushed meanwhile. The failed call's
// error says how many windows it opened (repo.WindowsOpened), for
// combo_windows_opened_total: no later call opens them.
//
// So it does run as one pipeline per node (the repo knows which node
// serves each shard, as the service's does): the live node's part counts
// its reports, and the call's error says the windows that part opened.
func TestBatchSpanningADeadMasterCountsTheLiveShards(t *testing.T) {
	for _, perNode := range []bool{false, true} {
		t.Run(fmt.Sprintf("per node %v", perNode), func(t *testing.T) {
			batchSpanningADeadMaster(t, perNode)
		})
	}
}

func batchSpanningADeadMaster(t *testing.T, perNode bool) {
	ctx := context.Background()
	c := newClusterCase(t)
	keys := c.r.Keys()
	if perNode {
		s := settings()
		s.Shards, s.Timeout = keys.Shards(), 300*time.Millisecond
		var err error
		if s.ShardNodes, err = repo.ShardNodes(ctx, c.cc, keys); err != nil {
			t.Fatal(err)
		}
		c.r = repo.New(c.cc, s)
		if err := c.r.LoadScripts(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.cluster.KillMaster(t, c.cc, c.deadAddr)
	var onLive, onDead *combo.Contribution
	for n := int64(1); onLive == nil || onDead == nil; n++ {
		x := &combo.Contribution{Id: n, ActivityId: 7, UserId: n, ItemId: 1, ItemType: "rose", Quantity: 1,
			CreatedAt: time.Now().UnixMilli()}
		if c.live[keys.Shard(7, n, "rose")] {
			onLive = cmp.Or(onLive, x)
		} else {
			onDead = cmp.Or(onDead, x)
		}
	}
	_, err := c.r.Report(ctx, []*combo.Contribution{onDead, onLive})
	if !errors.Is(err, repo.ErrUnavailable) {
		t.Fatalf("batch spanning a dead master: %v, want ErrUnavailable", err)
	}
	if n := repo.WindowsOpened(err); n != 1 {
		t.Errorf("the failed batch opened %d windows by repo.WindowsOpened, want 1: the live shard's", n)
	}
	res, err := c.r.Report(ctx, []*combo.Contribution{onLive})
	if err != nil || res[0].Outcome != repo.Duplicate {
		t.Fatalf("the live shard's report sent again: %+v %v, want a duplicate (counted by the failed batch)", res, err)
	}
}

// On a Redis Cluster, a live shard's degraded reports (here: its stream
// is full) are published and answered degraded while another master does
// not answer: each PUBLISH goes to the node that has just run its report's
// script. PUBLISH names no key, so go-redis sent each to a master picked in
// turn, the silent one too, and the call failed as unavailable after
// redis.timeout.
func TestDegradedReportWhileAnotherMasterIsSilent(t *testing.T) {
	ctx := context.Background()
	c := newClusterCase(t)
	s := settings()
	s.Shards = len(c.live)
	s.Timeout = 300 * time.Millisecond
	s.StreamMaxLen = 1
	// The service's client settings: redis.timeout bounds every wait.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.cluster.Addrs, DialTimeout: s.Timeout,
		ReadTimeout: s.Timeout, WriteTimeout: s.Timeout, PoolTimeout: s.Timeout, MaxRetries: -1,
		ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { cc.Close() })
	r := repo.New(cc, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	keys := r.Keys()
	liveShard := slices.Index(c.live, true)
	onLive := func(id int64) *combo.Contribution { // a new combo key of liveShard
		for i := 0; ; i++ {
			if it := fmt.Sprint("t", i); keys.Shard(7, id, it) == liveShard {
				return &combo.Contribution{Id: id, ActivityId: 7, UserId: id, ItemId: 1, ItemType: it, Quantity: 1,
					CreatedAt: time.Now().UnixMilli()}
			}
		}
	}
	if res, err := r.Report(ctx, []*combo.Contribution{onLive(1)}); err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("filling the live shard's stream: %+v %v", res, err)
	}
	live, err := cc.MasterForKey(ctx, keys.Stream(liveShard))
	if err != nil {
		t.Fatal(err)
	}
	sub := live.Subscribe(ctx, push.Channel(7)) // a cluster's PUBLISH reaches every node
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	dead, err := cc.MasterForKey(ctx, keys.Stream(0))
	if err != nil {
		t.Fatal(err)
	}
	// The other master stops answering (a partition, a host gone).
	if err := dead.Do(ctx, "CLIENT", "PAUSE", "5000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	batch := []*combo.Contribution{onLive(2), onLive(3), onLive(4)}
	res, err := r.Report(ctx, batch)
	if err != nil {
		t.Fatalf("degraded reports on a live shard with another master silent: %v, want them answered degraded", err)
	}
	for i, rr := range res {
		if rr.Outcome != repo.Degraded {
			t.Fatalf("report %d: %+v, want degraded (the live shard's stream is full)", i, rr)
		}
	}
	for range batch {
		if _, err := receive(ctx, sub); err != nil {
			t.Fatal(err)
		}
	}
}

// While an operator moves a shard's slot to another master (CLUSTER SETSLOT
// MIGRATING/IMPORTING, MIGRATE), with the dedupe sets already moved
// (redis-cli moves the newest keys first: the sets before the stream), the
// report is refused UNAVAILABLE, to be sent again: nothing was counted,
// and whether the id was is unknown. Before the probe key, the script ran
// and Redis refused it those sets ("Script attempted to access a non local
// key"); it was answered degraded and published on its own: the retry of a
// counted report was pushed a second time, beside its window, and a new
// one was split off its window. Now Redis refuses the script before it
// runs (TRYAGAIN).
func TestReportWhileItsSlotMovesIsNotPublishedTwice(t *testing.T) {
	ctx := context.Background()
	c := newClusterCase(t)
	r, keys := c.r, c.r.Keys()
	mv := openOnShard0(t, c)
	co := func(id int64) *combo.Contribution {
		x := *mv.first
		x.Id = id
		return &x
	}
	first, from, to, node, sub := mv.first, mv.from, mv.to, mv.node, mv.sub

	m := c.cluster.BeginMigration(t, keys.Stream(0), from, to)
	var sets []string
	for _, k := range m.Keys() {
		if strings.HasPrefix(k, keys.SeenPrefix(0)) {
			sets = append(sets, k)
		}
	}
	m.Move(sets...)
	second := co(2)
	for _, x := range []*combo.Contribution{first, second} {
		res, err := r.Report(ctx, []*combo.Contribution{x})
		if err == nil && res[0].Outcome == repo.Degraded {
			t.Errorf("report %d while its dedupe set is moved: degraded (published on its own, beside its window): %v", x.Id, res[0].Cause)
		} else if err != nil && !errors.Is(err, repo.ErrUnavailable) {
			t.Errorf("report %d while its dedupe set is moved: %v, want ErrUnavailable", x.Id, err)
		}
	}
	m.Finish()

	// Sent again once the slot has moved: counted once, in one window.
	if res, err := r.Report(ctx, []*combo.Contribution{first}); err != nil || res[0].Outcome != repo.Duplicate {
		t.Errorf("first report sent again after the move: %+v %v, want a duplicate", res, err)
	}
	if res, err := r.Report(ctx, []*combo.Contribution{second}); err != nil || res[0].Outcome != repo.Joined || res[0].WindowQuantity != 2 {
		t.Errorf("second report sent again after the move: %+v %v, want joined, window quantity 2", res, err)
	}
	if err := node.Publish(ctx, push.Channel(7), "marker").Err(); err != nil {
		t.Fatal(err)
	}
	if msg, err := receive(ctx, sub); err != nil || msg.Payload != "marker" {
		t.Errorf("pushed on its own during the move: %v %v", msg, err)
	}
}

// A report whose last redirect go-redis spends on an ASK (or a MOVED) was
// not run: Redis said where its keys are now. With go-redis's three
// redirects, reports retried on TRYAGAIN while redis-cli moved a shard's
// stream got ASK as their last answer (7 of 750 reports of the shard in a
// test of a reshard under load); here the client has no redirect to
// spare, which makes that moment the test's. They were answered degraded
// and published on their own: a counted report sent again then was pushed
// twice, beside its window. They are UNAVAILABLE, to be sent again.
func TestReportRedirectedToTheEndIsNotPublishedTwice(t *testing.T) {
	ctx := context.Background()
	c := newClusterCase(t)
	r, keys := c.r, c.r.Keys()
	mv := openOnShard0(t, c)
	co, from, to, node, sub := mv.first, mv.from, mv.to, mv.node, mv.sub

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.cluster.Addrs, MaxRedirects: -1})
	t.Cleanup(func() { cc.Close() })
	s := settings()
	s.Shards = len(c.live)
	r2 := repo.New(cc, s)
	if err := cc.Ping(ctx).Err(); err != nil { // learn the slots before they move
		t.Fatal(err)
	}
	m := c.cluster.BeginMigration(t, keys.Stream(0), from, to)
	m.Move(m.Keys()...) // the source answers ASK for them all
	res, err := r2.Report(ctx, []*combo.Contribution{co})
	if err == nil && res[0].Outcome == repo.Degraded {
		t.Errorf("report sent again, answered ASK: degraded (published on its own, beside its window): %v", res[0].Cause)
	} else if err != nil && !errors.Is(err, repo.ErrUnavailable) {
		t.Errorf("report sent again, answered ASK: %v, want ErrUnavailable", err)
	}
	m.Finish()
	if res, err := r.Report(ctx, []*combo.Contribution{co}); err != nil || res[0].Outcome != repo.Duplicate {
		t.Errorf("report sent again after the move: %+v %v, want a duplicate", res, err)
	}
	if err := node.Publish(ctx, push.Channel(7), "marker").Err(); err != nil {
		t.Fatal(err)
	}
	if msg, err := receive(ctx, sub); err != nil || msg.Payload != "marker" {
		t.Errorf("pushed on its own during the move: %v %v", msg, err)
	}
}

// shard0Move is a window opened on shard 0 of a cluster case, the master
// holding that shard (from), another master to move it to (to), and a
// subscription to activity 7's channel on from: a degraded push is
// published by the shard's master, so it comes there before a marker
// published there at the end.
type shard0Move struct {
	first    *combo.Contribution
	from, to string
	node     *redis.Client
	sub      *redis.PubSub
}

// shardsByMaster maps each master's address to the shards of keys it
// holds, as rdb sees the slot map.
func shardsByMaster(t *testing.T, cl *testredis.Cluster, rdb *redis.ClusterClient, keys repo.Keys) map[string][]int {
	t.Helper()
	byNode := map[string][]int{}
	for sh := range keys.Shards() {
		a := cl.MasterAddr(t, rdb, keys.Stream(sh))
		byNode[a] = append(byNode[a], sh)
	}
	return byNode
}

// itemTypeOn is an item type whose key of activity 7, user 1 falls on
// shard.
func itemTypeOn(keys repo.Keys, shard int) string {
	for i := 0; ; i++ {
		if it := fmt.Sprint("t", i); keys.Shard(7, 1, it) == shard {
			return it
		}
	}
}

func openOnShard0(t *testing.T, c *clusterCase) shard0Move {
	t.Helper()
	ctx := context.Background()
	keys := c.r.Keys()
	first := &combo.Contribution{Id: 1, ActivityId: 7, UserId: 1, ItemId: 1, ItemType: itemTypeOn(keys, 0), Quantity: 1,
		CreatedAt: time.Now().UnixMilli()}
	if res, err := c.r.Report(ctx, []*combo.Contribution{first}); err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("first report: %+v %v", res, err)
	}
	from := c.cluster.MasterAddr(t, c.cc, keys.Stream(0))
	to := c.cluster.Addrs[0]
	if to == from {
		to = c.cluster.Addrs[1]
	}
	node := redis.NewClient(&redis.Options{Addr: from})
	t.Cleanup(func() { node.Close() })
	sub := node.Subscribe(ctx, push.Channel(7))
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	return shard0Move{first: first, from: from, to: to, node: node, sub: sub}
}

// On a Redis Cluster the client's pool is per node, and a node's shared
// pipelines are those of its own shards: the batches that may run
// pipelines of their own are bounded per node, by its own shards. Counted
// over all, 12 shards and a pool of 12 left one slot: every batch of the
// service waited for the one before it.
func TestBatchSlotsOnAClusterAreCountedPerNode(t *testing.T) {
	ctx := context.Background()
	sc := startSlotCluster(t)
	nodes, err := repo.ShardNodes(ctx, sc.cc, sc.keys)
	if err != nil {
		t.Fatal(err)
	}
	for sh := range sc.shards {
		addr := sc.cluster.MasterAddr(t, sc.cc, sc.keys.Stream(sh))
		for other := range sc.shards {
			same := sc.cluster.MasterAddr(t, sc.cc, sc.keys.Stream(other)) == addr
			if same != (nodes[sh] == nodes[other]) {
				t.Fatalf("ShardNodes %v: shards %d and %d on one node is %v, want %v", nodes, sh, other, !same, same)
			}
		}
	}
	s := settings()
	s.Shards, s.ShardNodes = sc.shards, nodes
	sc.wantSlotsPerNode(t, repo.New(sc.cc, s), "read at start")
	s.ShardNodes = nil // unknown: as if one node served every shard
	if got := repo.AloneSlots(repo.New(sc.cc, s)); got[0] != 1 {
		t.Errorf("%d slots with the nodes unknown, want the worst case, 1", got[0])
	}

	// One Redis serves every shard.
	one := testredis.Start(t, testredis.Options{}).Client()
	if n, err := repo.ShardNodes(ctx, one, sc.keys); err != nil || slices.Max(n) != 0 || len(n) != sc.shards {
		t.Errorf("ShardNodes on one Redis = %v, %v; want %d zeros", n, err, sc.shards)
	}
}

// slotCluster is a 3-master cluster, a client of it with a pool of pool
// per node, and the keys of shards shards: more shards than masters, so
// each node serves several.
type slotCluster struct {
	cluster      *testredis.Cluster
	cc           *redis.ClusterClient
	keys         repo.Keys
	shards, pool int
}

func startSlotCluster(t *testing.T) slotCluster {
	sc := slotCluster{cluster: testredis.StartCluster(t, 3), shards: 12, pool: 12}
	sc.cc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: sc.cluster.Addrs, PoolSize: sc.pool})
	t.Cleanup(func() { _ = sc.cc.Close() })
	sc.keys = repo.NewKeys(sc.shards)
	return sc
}

// wantSlotsPerNode checks that each shard's node has the pool less its own
// shards less 1 slots in r, by the slot map the client holds now.
func (sc slotCluster) wantSlotsPerNode(t *testing.T, r *repo.Repo, when string) {
	t.Helper()
	onNode := map[string]int{}
	for sh := range sc.shards {
		onNode[sc.cluster.MasterAddr(t, sc.cc, sc.keys.Stream(sh))]++
	}
	got := repo.AloneSlots(r)
	for sh := range sc.shards {
		addr := sc.cluster.MasterAddr(t, sc.cc, sc.keys.Stream(sh))
		if want := sc.pool - onNode[addr] - 1; got[sh] != want {
			t.Errorf("%s, shard %d: %d slots for pipelines of their own, want %d: a pool of %d per node less the %d shards of its node %s less 1",
				when, sh, got[sh], want, sc.pool, onNode[addr], addr)
		}
	}
}

// A master that stops answering holds only its own node's slots for
// pipelines of their own: batches wholly on the other masters go on, as
// their single reports do. With one bound for the whole service, a flood
// of batches to the stalled master held every slot for redis.timeout each,
// and the live masters' batches waited theirs out and failed.
func TestStalledMasterHoldsOnlyItsOwnBatchSlots(t *testing.T) {
	floodAStalledMaster(t, false)
}

// So do batches spanning the stalled master and a live one: each node's
// part runs on a pipeline of its own, and the live part's slot is given
// back when the live master answers. As one cluster pipeline, the flood
// held the live master's slots until the stalled one's part timed out, and
// every batch wholly on the live master failed unsent.
func TestBatchesSpanningAStalledMasterLeaveTheLiveOnesSlots(t *testing.T) {
	floodAStalledMaster(t, true)
}

// A batch spanning every node, run as one pipeline per node, answers each
// report in the batch's order: report i, the first of its combo key with
// quantity i+1, opens a window of quantity i+1.
func TestBatchSpanningNodesAnswersInOrder(t *testing.T) {
	ctx := context.Background()
	cluster := testredis.StartCluster(t, 3)
	cc := cluster.Client(t)
	s := settings()
	s.Shards = 6
	keys := repo.NewKeys(s.Shards)
	var err error
	if s.ShardNodes, err = repo.ShardNodes(ctx, cc, keys); err != nil {
		t.Fatal(err)
	}
	if slices.Max(s.ShardNodes) == 0 {
		t.Fatal("every shard on one node")
	}
	r := repo.New(cc, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	cs := make([]*combo.Contribution, 40)
	for i := range cs {
		cs[i] = &combo.Contribution{Id: int64(i + 1), ActivityId: 7, UserId: int64(i + 1), ItemId: 1, ItemType: "rose",
			Quantity: int32(i + 1), CreatedAt: time.Now().UnixMilli()}
	}
	res, err := r.Report(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	for i, rr := range res {
		if rr.Outcome != repo.Opened || rr.WindowQuantity != int32(i+1) {
			t.Errorf("report %d (user %d, quantity %d) answered %+v, want a window opened with quantity %d",
				i, cs[i].UserId, cs[i].Quantity, rr, i+1)
		}
	}
}

// floodAStalledMaster pauses a master for 3 s and floods it with 24
// callers' batches of 20 (half of each on a live master when spanning),
// more than a node's slots, while 8 callers send batches wholly on a live
// master: none of those may fail.
func floodAStalledMaster(t *testing.T, spanning bool) {
	ctx := context.Background()
	cluster := testredis.StartCluster(t, 3)
	cc := cluster.Client(t)
	s := settings()
	// A second for redis.timeout: a live master's batch waits for a slot
	// behind the flood's live parts too (spanning), and 300 ms ran out in a
	// loaded run of the suite though every slot was given back in time.
	s.Shards, s.Timeout = 6, time.Second
	keys := repo.NewKeys(s.Shards)
	var err error
	if s.ShardNodes, err = repo.ShardNodes(ctx, cc, keys); err != nil {
		t.Fatal(err)
	}
	r := repo.New(cc, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	// A combo key on the stalled master's shard, and one on another node.
	stalled := cluster.MasterAddr(t, cc, keys.Stream(0))
	live := -1
	for u := int64(1); live < 0 && u < 1000; u++ {
		if cluster.MasterAddr(t, cc, keys.Stream(keys.Shard(7, u, "rose"))) != stalled {
			live = int(u)
		}
	}
	onStalled := int64(-1)
	for u := int64(1); onStalled < 0 && u < 1000; u++ {
		if keys.Shard(7, u, "rose") == 0 {
			onStalled = u
		}
	}
	var id atomic.Int64
	batch := func(users ...int64) []*combo.Contribution {
		cs := make([]*combo.Contribution, 20) // a call of its own
		for i := range cs {
			cs[i] = &combo.Contribution{Id: id.Add(1), ActivityId: 7, UserId: users[i%len(users)], ItemId: 1,
				ItemType: "rose", Quantity: 1, CreatedAt: time.Now().UnixMilli()}
		}
		return cs
	}
	flood := []int64{onStalled}
	if spanning {
		flood = append(flood, int64(live))
	}

	node := redis.NewClient(&redis.Options{Addr: stalled})
	t.Cleanup(func() { _ = node.Close() })
	const stall = 3 * time.Second
	if err := node.Do(ctx, "CLIENT", "PAUSE", stall.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	defer node.Do(ctx, "CLIENT", "UNPAUSE")
	stop := time.Now().Add(stall - time.Second)
	var wg sync.WaitGroup
	var flooding, floodFailed atomic.Int64
	for range 24 { // more than the pool: a flood to the stalled master
		wg.Go(func() {
			for time.Now().Before(stop) {
				flooding.Add(1)
				if _, err := r.Report(ctx, batch(flood...)); err != nil {
					floodFailed.Add(1)
				}
			}
		})
	}
	for flooding.Load() < 24 { // every flooder has a batch on its way
		runtime.Gosched()
	}
	var failed []error
	var mu sync.Mutex
	var liveWG sync.WaitGroup
	for range 8 {
		liveWG.Go(func() {
			for time.Now().Before(stop) {
				if _, err := r.Report(ctx, batch(int64(live))); err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}
			}
		})
	}
	liveWG.Wait()
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d batches wholly on live masters failed while another master stalled, first: %v", len(failed), failed[0])
	}
	if floodFailed.Load() == 0 {
		t.Fatal("no batch of the flood failed: the master did not stall")
	}
}

// The slot map is read again (RefreshShardNodes): neither a start that
// could not read it, which counts every shard on one node and leaves one
// batch pipeline for the whole service, nor a reshard that moves a shard
// to another node is kept until the next start. Batches sent meanwhile
// give their slots back to the table they took them from.
func TestRefreshShardNodesFollowsTheSlotMap(t *testing.T) {
	ctx := context.Background()
	sc := startSlotCluster(t)
	cluster, cc, keys := sc.cluster, sc.cc, sc.keys
	s := settings()
	s.Shards = sc.shards // ShardNodes unknown, as after a start that could not read the map
	r := repo.New(cc, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if got := repo.AloneSlots(r); got[0] != 1 {
		t.Fatalf("%d slots with the nodes unknown, want the worst case, 1", got[0])
	}

	// Batches of their own on every shard while the slots are sized anew.
	var id atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	sentAtLeast := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); sent.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d batches sent in 10 s, want %d", sent.Load(), n)
			}
		}
	}
	for g := range 4 {
		wg.Go(func() {
			for u := int64(g); ; u += 4 {
				select {
				case <-stop:
					return
				default:
				}
				cs := make([]*combo.Contribution, 20)
				for i := range cs {
					cs[i] = &combo.Contribution{Id: id.Add(1), ActivityId: 7, UserId: u*20 + int64(i), ItemId: 1, ItemType: "rose",
						Quantity: 1, CreatedAt: time.Now().UnixMilli()}
				}
				if _, err := r.Report(ctx, cs); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				sent.Add(1)
			}
		})
	}
	sentAtLeast(20)
	changed, err := r.RefreshShardNodes(ctx)
	sentAtLeast(sent.Load() + 20)
	close(stop)
	wg.Wait()
	if err != nil || !changed {
		t.Fatalf("RefreshShardNodes = %v, %v; want the map read and the slots sized anew", changed, err)
	}
	if n := failed.Load(); n > 0 { // a slot given back to the wrong table panics
		t.Fatalf("%d of %d batches failed while the slots were sized anew, first: %v", n, sent.Load(), firstErr.Load())
	}
	sc.wantSlotsPerNode(t, r, "once the map is read")
	if changed, err := r.RefreshShardNodes(ctx); err != nil || changed {
		t.Fatalf("RefreshShardNodes of an unchanged map = %v, %v; want no change", changed, err)
	}

	// A reshard moves shard 0 to another master (a moving slot refuses
	// calls of several keys with TRYAGAIN, so none are sent meanwhile).
	from := cluster.MasterAddr(t, cc, keys.Stream(0))
	to := cluster.Addrs[0]
	if to == from {
		to = cluster.Addrs[1]
	}
	cluster.BeginMigration(t, keys.Stream(0), from, to).Finish()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cc.ReloadState(ctx) // go-redis learns a reshard on MOVED or its reload interval; ask now
		changed, err := r.RefreshShardNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if changed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("RefreshShardNodes saw no change 10 s after shard 0 moved from %s to %s", from, to)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := cluster.MasterAddr(t, cc, keys.Stream(0)); got != to {
		t.Fatalf("shard 0 on %s after the reshard, want %s", got, to)
	}
	sc.wantSlotsPerNode(t, r, "after the reshard")
}

// A degraded publish while its shard's slot moves is refused, as the report
// script is: a report degraded just before the move began is answered
// UNAVAILABLE, to be sent again. Naming the probe key alone, its call was
// redirected (ASK) to the master the slot moves to, which made the dedupe
// set there while the old master still held one of that name: the MIGRATE
// of that set failed (BUSYKEY) and the move stopped half way, the shard's
// windows unpublished.
func TestDegradedPublishWhileItsSlotMovesIsRefused(t *testing.T) {
	ctx := context.Background()
	c := newClusterCase(t)
	keys := c.r.Keys()
	mv := openOnShard0(t, c)
	x := *mv.first
	x.Id = 1 + 8192 // the dedupe sub-set of report 1, whose set is on the old master

	m := c.cluster.BeginMigration(t, keys.Stream(0), mv.from, mv.to)
	if _, err := repo.PublishSingles(ctx, c.r, []*combo.Contribution{&x}); !errors.Is(err, repo.ErrUnavailable) {
		t.Errorf("degraded publish while its slot moves: %v, want ErrUnavailable", err)
	}
	m.Finish() // fails the test if a key of the slot is on both masters

	if _, err := repo.PublishSingles(ctx, c.r, []*combo.Contribution{&x}); err != nil {
		t.Fatalf("degraded publish after the move: %v", err)
	}
	msg, err := receive(ctx, mv.sub) // a cluster's PUBLISH reaches every node
	if err != nil {
		t.Fatal(err)
	}
	if p, err := push.Decode([]byte(msg.Payload)); err != nil || p.Record.ID != x.Id {
		t.Fatalf("first push %q, want report %d, published after the move only", msg.Payload, x.Id)
	}
}

// fillStreamOf opens, with a report of id 41 on another combo key of the
// same shard, the one window a stream capped at 1 entry may hold, so that
// c's report, opening a window of its own, finds the stream full and
// degrades.
// degradingReport is report 42 on a cluster whose stream of its shard is
// full (redis.stream_maxlen 1), so that its script fails STREAMFULL and it
// degrades; with the repo over admin that filled it, and its settings
// (settings(), then adjust).
func degradingReport(t *testing.T, admin redis.UniversalClient, adjust func(*repo.Settings)) (*repo.Repo, repo.Settings, *combo.Contribution) {
	t.Helper()
	s := settings()
	s.StreamMaxLen = 1
	if adjust != nil {
		adjust(&s)
	}
	r := repo.New(admin, s)
	if err := r.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := &combo.Contribution{Id: 42, ActivityId: 7, UserId: 1, ItemId: 1, ItemType: "t", Quantity: 1,
		CreatedAt: time.Now().UnixMilli()}
	fillStreamOf(t, r, c)
	return r, s, c
}

func fillStreamOf(t *testing.T, r *repo.Repo, c *combo.Contribution) {
	t.Helper()
	fill := *c
	fill.Id, fill.ItemType = 41, ""
	for i := 0; r.Keys().Shard(c.ActivityId, c.UserId, fill.ItemType) != r.Keys().Shard(c.ActivityId, c.UserId, c.ItemType); i++ {
		fill.ItemType = fmt.Sprint("f", i)
	}
	if res, err := r.Report(context.Background(), []*combo.Contribution{&fill}); err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("filling the stream: %+v %v", res, err)
	}
}

// On a Redis Cluster go-redis sends a node's pipelined commands again when
// their answer is lost (a connection reset, EOF, a timeout), whatever its
// MaxRetries. A degraded publish whose script had run was then published
// twice; the script now finds its id remembered and publishes nothing, and
// the report is answered as the duplicate it now is, as a re-sent report
// script's would be.
func TestDegradedPublishSentAgainIsPushedOnce(t *testing.T) {
	ctx := context.Background()
	cluster := testredis.StartCluster(t, 3)
	admin := cluster.Client(t)
	r, s, c := degradingReport(t, admin, nil)
	// Subscribed on the report's master, which runs its script: its pushes
	// come there before a marker published there at the end (another
	// node hears them later, over the cluster bus).
	shard := r.Keys().Shard(c.ActivityId, c.UserId, c.ItemType)
	node := redis.NewClient(&redis.Options{Addr: cluster.MasterAddr(t, admin, r.Keys().Stream(shard))})
	t.Cleanup(func() { node.Close() })
	sub := node.Subscribe(ctx, push.Channel(7))
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	pushes := make(chan string, 10)
	go func() {
		for msg := range sub.Channel() {
			pushes <- msg.Payload
		}
	}()

	// The first connection that sends a degraded publish loses its answer:
	// once the push has come (Redis ran the script), the connection is
	// closed instead of read.
	pushed := make(chan struct{})
	var cut atomic.Bool
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &answerLostConn{Conn: conn, match: []byte(repo.DegradeHash()), cut: &cut, after: pushed}, nil
		}})
	t.Cleanup(func() { cc.Close() })
	type answer struct {
		res []repo.ReportResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := repo.New(cc, s).Report(ctx, []*combo.Contribution{c})
		done <- answer{res, err}
	}()
	select {
	case p := <-pushes:
		if m, err := push.Decode([]byte(p)); err != nil || m.Record.ID != 42 {
			t.Fatalf("push %q, want report 42 on its own", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("report 42 not pushed")
	}
	close(pushed)
	a := <-done
	if !cut.Load() {
		t.Fatal("no answer was lost: the test did not test")
	}
	if a.err != nil || a.res[0].Outcome != repo.Duplicate {
		t.Fatalf("degraded report whose publish's answer was lost: %+v %v, want a duplicate", a.res, a.err)
	}
	if res, err := r.Report(ctx, []*combo.Contribution{c}); err != nil || res[0].Outcome != repo.Duplicate {
		t.Fatalf("report 42 sent again: %+v %v, want a duplicate", res, err)
	}
	if err := node.Publish(ctx, push.Channel(7), "marker").Err(); err != nil {
		t.Fatal(err)
	}
	if p := <-pushes; p != "marker" {
		t.Fatalf("got %q before the marker: report 42 was pushed again", p)
	}
}

// answerLostConn closes itself, once for all the conns sharing cut, when
// it would read the answer to a command it wrote that holds match, after
// the after channel is closed.
type answerLostConn struct {
	net.Conn
	match []byte
	cut   *atomic.Bool
	after <-chan struct{}
	wrote bool
}

func (c *answerLostConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.match) {
		c.wrote = true
	}
	return c.Conn.Write(b)
}

func (c *answerLostConn) Read(b []byte) (int, error) {
	if c.wrote && c.cut.CompareAndSwap(false, true) {
		<-c.after
		c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}

// After a node's part of a cluster pipeline, go-redis sends the whole
// part again when its first command was refused TRYAGAIN (its slot
// moving), scripts Redis ran and answered included: a report of another
// shard on the same master, counted by this call, was run again and
// answered duplicate (window 0, quantity 0). Only the refused reports are
// sent again now, a few times, as go-redis did, so a move that ends soon
// is ridden through, alone in its pipeline or not, and every report opens
// its window.
func TestReportBesideAMovingSlotIsNotAnsweredDuplicate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		beside bool // a report of another shard on the same master too
		after  int  // the move ends after this many TRYAGAIN pipelines
	}{
		{"beside another shard, the move ending after the first refusal", true, 1},
		{"beside another shard, the move ending after the second refusal", true, 2},
		{"alone, the move ending after the first refusal", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) { reportDuringAMove(t, tc.beside, tc.after) })
	}
}

func reportDuringAMove(t *testing.T, beside bool, after int) {
	ctx := context.Background()
	cl := testredis.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1})
	t.Cleanup(func() { cc.Close() })
	var finish func()
	var tryAgains atomic.Int32
	cc.OnNewNode(func(n *redis.Client) {
		n.AddHook(onTryAgain{fn: func() {
			if int(tryAgains.Add(1)) == after {
				finish()
			}
		}})
	})
	s := settings()
	s.Shards = 6
	keys := repo.NewKeys(s.Shards)
	byNode := shardsByMaster(t, cl, cc, keys)
	x, y, from := -1, -1, ""
	for a, shs := range byNode {
		if len(shs) >= 2 {
			x, y, from = shs[0], shs[1], a
			break
		}
	}
	if from == "" {
		t.Fatal("no two shards on one master")
	}
	to := cl.Addrs[0]
	if to == from {
		to = cl.Addrs[1]
	}
	r := repo.New(cc, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	// The streams exist, as in service: a script whose keys are all
	// missing on the source is answered ASK, not TRYAGAIN.
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	cs := []*combo.Contribution{{Id: 101, ActivityId: 7, UserId: 1, ItemId: 1, ItemType: itemTypeOn(keys, x), Quantity: 1, CreatedAt: now}}
	if beside {
		cs = append(cs, &combo.Contribution{Id: 202, ActivityId: 7, UserId: 1, ItemId: 1, ItemType: itemTypeOn(keys, y), Quantity: 1, CreatedAt: now})
	}
	finish = cl.BeginMigration(t, keys.Stream(x), from, to).Finish
	res, err := r.Report(ctx, cs)
	if n := int(tryAgains.Load()); n < after {
		t.Fatalf("%d pipelines refused TRYAGAIN, want %d: the test did not test", n, after)
	}
	if err != nil {
		t.Fatalf("Report while shard %d's slot moved: %v (windows opened %d)", x, err, repo.WindowsOpened(err))
	}
	for i, c := range cs {
		if res[i].Outcome != repo.Opened || res[i].WindowID != c.Id {
			t.Errorf("report %d, never sent before: %+v, want it to open window %d", c.Id, res[i], c.Id)
		}
	}
}

// onTryAgain is a node hook that calls fn after a pipeline in which a
// command was refused TRYAGAIN.
type onTryAgain struct{ fn func() }

func (onTryAgain) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (onTryAgain) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h onTryAgain) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Err() != nil && strings.HasPrefix(c.Err().Error(), "TRYAGAIN") {
				h.fn()
				break
			}
		}
		return err
	}
}

// The guard before a shard's scripts (EXISTS) is no command the service
// needs: refused to the user (NOPERM), the degraded publish it precedes,
// which ran, is still answered degraded, not failed.
func TestDegradedPublishWithTheGuardRefusedToTheUser(t *testing.T) {
	ctx := context.Background()
	cluster := testredis.StartCluster(t, 3)
	admin := cluster.Client(t)
	if err := admin.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		return n.Do(ctx, "ACL", "SETUSER", "noexists", "on", ">pw", "~*", "&*", "+@all", "-exists").Err()
	}); err != nil {
		t.Fatal(err)
	}
	_, s, c := degradingReport(t, admin, nil)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, Username: "noexists", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { cc.Close() })
	if err := cc.Exists(ctx, "x").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("EXISTS as the user: %v, want NOPERM: the test did not test", err)
	}
	res, err := repo.New(cc, s).Report(ctx, []*combo.Contribution{c})
	if err != nil || res[0].Outcome != repo.Degraded {
		t.Fatalf("report degraded behind a refused guard: %+v %v, want degraded (published on its own)", res, err)
	}
}

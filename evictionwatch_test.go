package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// A node that is not read keeps what it was last read as (the gauge does
// not drop to 0 while Redis is unreachable), while the nodes that are read
// are followed, even when another is not (a Cluster replica down must not
// keep a master set back to noeviction counted for ever); a node no longer
// among those read, with none failing, is forgotten; and a panic in a
// reading is counted and the loop goes on.
func TestEvictionWatchKeepsWhatItCannotRead(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	answers := make(chan func() (map[string]string, error), 1)
	read := func(context.Context) (map[string]string, error) {
		return testwait.Receive(t, "a step's answer", answers)()
	}
	w := newEvictionWatch(read, time.Hour, time.Second, map[string]string{"a:6379": "allkeys-lru"}, zap.NewNop(), m)
	if got := testutil.ToFloat64(m.RedisNodesEvicting); got != 1 {
		t.Fatalf("gauge %v, want the start check's 1", got)
	}
	for _, step := range []struct {
		answer func() (map[string]string, error)
		want   float64
	}{
		{func() (map[string]string, error) { return nil, errors.New("connection refused") }, 1},
		{func() (map[string]string, error) { panic("boom") }, 1},
		{func() (map[string]string, error) {
			return map[string]string{"b:6379": "volatile-lru"}, errors.New("a:6379: timeout")
		}, 2},
		{func() (map[string]string, error) {
			return map[string]string{"a:6379": "noeviction", "b:6379": "volatile-lru"}, errors.New("c:6379: timeout")
		}, 1},
		// b:6379 left out of a complete reading: kept for one, forgotten
		// at the second in a row (nodeForgetAfter).
		{func() (map[string]string, error) { return map[string]string{"c:6379": "noeviction"}, nil }, 1},
		{func() (map[string]string, error) { return map[string]string{"c:6379": "noeviction"}, nil }, 0},
	} {
		testwait.Send(t, "a step's answer (the last one unread)", answers, step.answer)
		w.once(context.Background())
		if got := testutil.ToFloat64(m.RedisNodesEvicting); got != step.want {
			t.Fatalf("gauge %v, want %v", got, step.want)
		}
	}
	if n := testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopEvictionWatch)); n != 1 {
		t.Fatalf("panics counted %v, want 1", n)
	}
}

// Each reading is given the watch's timeout (nodeReader's, three round
// trips a Sentinel): a reading left without one, on a node that takes a
// connection and never answers, held back every later reading, and the
// gauges and warnings with them, until Stop.
func TestNodeWatchGivesEachReadingItsTimeout(t *testing.T) {
	start := time.Now()
	readings := 0
	read := func(ctx context.Context) (map[string]string, error) {
		readings++
		if end, ok := ctx.Deadline(); !ok || end.Sub(start) > 2*time.Second {
			t.Errorf("reading %d given deadline %v (set: %v), want within the watch's one second", readings, end, ok)
		}
		return map[string]string{"a:6379": "noeviction"}, nil
	}
	w := newEvictionWatch(read, time.Hour, time.Second, nil, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	for range 2 {
		w.once(context.Background())
	}
	if readings != 2 {
		t.Fatalf("%d readings in 2 rounds, want 2", readings)
	}
}

// A node that refuses the service's login (restarted without its ACL user,
// it rejoins as a replica with no other sign) is warned of at each
// reading, and counted in combo_redis_logins_refused (an alert reads it);
// a node that does not answer is not, its loss being told by the
// replica's other loops.
func TestEvictionWatchWarnsOfANodeRefusingTheLogin(t *testing.T) {
	refusals := loginRefusals(t)
	m := metrics.New(prometheus.NewRegistry())
	core, logs := observer.New(zap.WarnLevel)
	errs := make(chan error, 1)
	read := func(context.Context) (map[string]string, error) {
		return map[string]string{"a:6379": "noeviction"}, testwait.Receive(t, "a step's error", errs)
	}
	w := newEvictionWatch(read, time.Hour, time.Second, nil, zap.New(core), m)
	for _, step := range []struct {
		err              error
		warn             int
		nodes, sentinels float64 // the gauge's, after it
	}{
		{errors.New("b:6379: dial tcp: connection refused"), 0, 0, 0},
		{fmt.Errorf("b:6379: repo.MaxmemoryPolicy: %w", refusals.wrongpass), 1, 1, 0},
		{fmt.Errorf("repo.Policies: %w", errors.Join(fmt.Errorf("b:6379: %w", refusals.noauth),
			fmt.Errorf("c:6379: %w", refusals.wrongpass), errors.New("d:6379: i/o timeout"))), 2, 2, 0},
		{errors.Join(sentinelRefused{fmt.Errorf("sentinel s:26379: %w", refusals.wrongpass)}), 2, 0, 1},
		{nil, 2, 0, 0},
	} {
		testwait.Send(t, "a step's error (the last one unread)", errs, step.err)
		w.once(context.Background())
		if n := logs.FilterMessageSnippet("refuses this service's login").Len(); n != step.warn {
			t.Fatalf("after %q: %d warnings of a refused login, want %d: %v", step.err, n, step.warn, logs.All())
		}
		// Nothing else at warn: a node down is no news here, told by the
		// replica's other loops (mutant: warned of each minute too).
		if other := logs.Filter(func(e observer.LoggedEntry) bool { return !strings.Contains(e.Message, "refuses") }); other.Len() != 0 {
			t.Fatalf("after %q: logged %v, want only the refused logins' warnings", step.err, other.All())
		}
		nodes, sentinels := testutil.ToFloat64(m.RedisLoginsRefused.WithLabelValues("node")),
			testutil.ToFloat64(m.RedisLoginsRefused.WithLabelValues("sentinel"))
		if nodes != step.nodes || sentinels != step.sentinels {
			t.Fatalf("after %q: combo_redis_logins_refused node %v, sentinel %v; want %v and %v",
				step.err, nodes, sentinels, step.nodes, step.sentinels)
		}
	}
}

// refusingUser says which login was refused: a node's (the service's ACL
// user) or a Sentinel's (redis.sentinel_username), each with its own fix,
// and nothing for other failures.
func TestRefusingUserNamesWhoseLogin(t *testing.T) {
	refusals := loginRefusals(t)
	wrongpass := refusals.wrongpass
	for _, tc := range []struct {
		err            error
		node, sentinel bool
	}{
		{fmt.Errorf("10.0.0.2:6379: repo.MaxmemoryPolicy: %w", wrongpass), true, false},
		{fmt.Errorf("10.0.0.2:6379: repo.MaxmemoryPolicy: %w", refusals.noauth), true, false},
		{errors.Join(fmt.Errorf("sentinel 10.0.0.9:26379: %w", wrongpass), fmt.Errorf("sentinel 10.0.0.8:26379: %w", wrongpass)), false, true},
		{errors.Join(fmt.Errorf("10.0.0.2:6379: %w", wrongpass), errors.New("sentinel 10.0.0.9:26379: i/o timeout")), true, false},
		// Only Redis's replies count: the words in another error do not.
		{errors.New("10.0.0.2:6379: WRONGPASS in a message that is no reply"), false, false},
		{errors.New("10.0.0.2:6379: NOPERM User combo has no permissions to run the 'info' command"), false, false},
		{errors.New("10.0.0.2:6379: dial tcp: connection refused"), false, false},
	} {
		said := refusingUser(tc.err)
		if node := strings.Contains(said, "a node refuses"); node != tc.node {
			t.Errorf("%v: %q; want a node's refusal said: %v", tc.err, said, tc.node)
		}
		if sentinel := strings.Contains(said, "a Sentinel refuses"); sentinel != tc.sentinel {
			t.Errorf("%v: %q; want a Sentinel's refusal said: %v", tc.err, said, tc.sentinel)
		}
	}
}

// On one Redis that refuses the service's login, both start checks warn
// that they could not read it, the eviction check naming the refused login.
func TestStartChecksWarnOfARefusedLogin(t *testing.T) {
	rs := testredis.Start(t, testredis.Options{})
	cfg := conf.Default()
	cfg.Redis.Addr, cfg.Redis.Username, cfg.Redis.Password = rs.Addr, "nobody", "pw"
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, Username: "nobody", Password: "pw", MaxRetries: -1})
	defer rdb.Close()
	store := repo.New(rdb, repo.Settings{Shards: 1})
	core, logs := observer.New(zap.WarnLevel)
	ctx := context.Background()
	warnEvicting(ctx, cfg, store, zap.New(core))
	warnNotAppendOnly(ctx, cfg, store, zap.New(core))
	if n := logs.FilterMessageSnippet("could not read Redis's maxmemory-policy").FilterMessageSnippet("a node refuses this service's login").Len(); n != 1 {
		t.Errorf("warnings %v, want the unread policy said with the refused login", logs.All())
	}
	// A wrong password is the likelier cause on one Redis: named first.
	if n := logs.FilterMessageSnippet("check redis.username and redis.password").Len(); n != 1 {
		t.Errorf("warnings %v, want the refused login to name the service's own login settings", logs.All())
	}
	if n := logs.FilterMessageSnippet("could not read every Redis node's aof_enabled").Len(); n != 1 {
		t.Errorf("warnings %v, want the unread aof_enabled said at warn", logs.All())
	}
}

// A Sentinel refusing the login beside nodes all read is warned of, and
// leaves no node unread: one no longer among them is still forgotten, at
// the second such reading (the gauge, and ComboRedisMayEvict, would
// otherwise keep a removed node).
func TestEvictionWatchForgetsANodeBesideASentinelRefusal(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	core, logs := observer.New(zap.WarnLevel)
	refused := errors.Join(sentinelRefused{fmt.Errorf("sentinel 10.0.0.9:26379: %w", loginRefusals(t).wrongpass)})
	read := func(context.Context) (map[string]string, error) {
		return map[string]string{"a:6379": "noeviction"}, refused
	}
	w := newEvictionWatch(read, time.Hour, time.Second, map[string]string{"gone:6379": "allkeys-lru"}, zap.New(core), m)
	w.once(context.Background())
	w.once(context.Background())
	if got := testutil.ToFloat64(m.RedisNodesEvicting); got != 0 {
		t.Fatalf("gauge %v, want the node no longer read forgotten", got)
	}
	if logs.FilterMessageSnippet("a Sentinel refuses").Len() != 2 {
		t.Fatalf("logs %v, want the Sentinel's refusal warned of at each reading", logs.All())
	}
}

// loginRefusals are a real redis-server's refusals of a login: WRONGPASS
// (a user that is not there) and NOAUTH (no password where one is asked).
func loginRefusals(t *testing.T) (r struct{ wrongpass, noauth error }) {
	t.Helper()
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	if err := srv.Client().ConfigSet(ctx, "requirepass", "pw").Err(); err != nil {
		t.Fatal(err)
	}
	defer func() { // the server's stop needs no password
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "pw"})
		defer c.Close()
		if err := c.ConfigSet(ctx, "requirepass", "").Err(); err != nil {
			t.Fatal(err)
		}
	}()
	for _, o := range []struct {
		err  *error
		opts *redis.Options
	}{
		{&r.wrongpass, &redis.Options{Addr: srv.Addr, Username: "nobody", Password: "pw"}},
		{&r.noauth, &redis.Options{Addr: srv.Addr}},
	} {
		c := redis.NewClient(o.opts)
		*o.err = c.Ping(ctx).Err()
		_ = c.Close()
		if !redis.IsAuthError(*o.err) {
			t.Fatalf("%v: want a refused login", *o.err)
		}
	}
	return r
}

// A node left out of one complete reading and back in the next is not
// forgotten, nor warned of again: a Sentinel just reset (SENTINEL RESET)
// lists no replica for seconds, and a reading then forgot every live
// replica found unsafe, its gauge and alert dropping for a minute. Only
// readings in a row count.
func TestNodeWatchKeepsANodeLeftOutOfOneReading(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	core, logs := observer.New(zap.InfoLevel)
	answers := make(chan map[string]string, 1)
	read := func(context.Context) (map[string]string, error) {
		return testwait.Receive(t, "a reading's answer", answers), nil
	}
	w := newEvictionWatch(read, time.Hour, time.Second, map[string]string{"replica:6379": "allkeys-lru"}, zap.New(core), m)
	master := map[string]string{"master:6379": "noeviction"}
	both := map[string]string{"master:6379": "noeviction", "replica:6379": "allkeys-lru"}
	for i, answer := range []map[string]string{master, both, master, both, master} {
		testwait.Send(t, fmt.Sprintf("reading %d's answer (the last one unread)", i), answers, answer)
		w.once(context.Background())
		if got := testutil.ToFloat64(m.RedisNodesEvicting); got != 1 {
			t.Fatalf("reading %d: gauge %v, want the replica still counted", i, got)
		}
	}
	if logs.Len() != 0 {
		t.Fatalf("logs %v, want nothing forgotten or warned again", logs.All())
	}
	testwait.Send(t, "the last reading's answer (the one before unread)", answers, master)
	w.once(context.Background())
	if got := testutil.ToFloat64(m.RedisNodesEvicting); got != 0 {
		t.Fatalf("gauge %v after two readings in a row without the replica, want it forgotten", got)
	}
	if n := logs.FilterMessageSnippet("no longer among the nodes").FilterField(zap.String("node", "replica:6379")).Len(); n != 1 {
		t.Fatalf("logs %v, want the replica said forgotten once", logs.All())
	}
}

// A Cluster node marked failed (not asked: it is in no slot map) keeps
// what it was last read as, and only itself: one left in CLUSTER NODES
// for good (Redis never drops it) does not keep a node removed from the
// Cluster counted too, as it did when it made the reading incomplete.
func TestNodeWatchKeepsAFailedClusterNodeAlone(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	failed := errors.Join(repo.FailedNode{Addr: "failed:6379", ID: "abc", Flags: "slave,fail"}) // as repo's eachNode gives it
	read := func(context.Context) (map[string]string, error) {
		return map[string]string{"master:6379": "noeviction"}, failed
	}
	w := newEvictionWatch(read, time.Hour, time.Second,
		map[string]string{"failed:6379": "allkeys-lru", "removed:6379": "allkeys-lru"}, zap.NewNop(), m)
	for range nodeForgetAfter {
		w.once(context.Background())
	}
	if !maps.Equal(w.known, map[string]string{"failed:6379": "allkeys-lru"}) {
		t.Fatalf("known %v, want the failed node kept and the removed one forgotten", w.known)
	}
	if got := testutil.ToFloat64(m.RedisNodesEvicting); got != 1 {
		t.Fatalf("gauge %v, want 1", got)
	}
}

// The same on a real Cluster, through the reading main gives the watch: a
// replica killed and marked failed by every master keeps its reading, and
// a node removed beside it is forgotten (repo's error for a failed node
// alone must not read as a node unavailable, which made every reading
// incomplete).
func TestNodeWatchKeepsAFailedNodeAloneOnACluster(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	ctx := context.Background()
	replica, _ := c.FailedReplica(t, c.Addrs[0])
	cfg := conf.Default()
	cfg.Redis.Addrs = c.Addrs
	read, timeout := policyReader(cfg.Redis, repo.New(c.Client(t), repo.Settings{Shards: 1}))
	m := metrics.New(prometheus.NewRegistry())
	w := newEvictionWatch(read, time.Hour, timeout,
		map[string]string{replica: "allkeys-lru", "removed:6379": "allkeys-lru"}, zap.NewNop(), m)
	for range nodeForgetAfter {
		w.once(ctx)
	}
	if !maps.Equal(w.known, map[string]string{replica: "allkeys-lru"}) {
		_, err := read(ctx)
		t.Fatalf("known %v, want the failed replica kept and the removed node forgotten (reading's error: %v)", w.known, err)
	}
}

// On a Cluster where one master refuses the service's login, each reading
// counts one node refusing: CLUSTER NODES, sent to some node, is refused
// by that one too, and counted it twice when it went there.
func TestARefusingClusterNodeIsCountedOnce(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	ctx := context.Background()
	for _, a := range c.Addrs[:2] {
		n := redis.NewClient(&redis.Options{Addr: a})
		err := n.Do(ctx, "ACL", "SETUSER", "svc", "on", ">pw", "~*", "&*", "+@all").Err()
		n.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs[:2], Username: "svc", Password: "pw", MaxRetries: -1})
	defer cc.Close()
	store := repo.New(cc, repo.Settings{Shards: 1})
	for i := range 12 { // CLUSTER NODES goes to a node at random
		_, err := store.Policies(ctx)
		if nodes, sentinels := refusedLogins(err); nodes != 1 || sentinels != 0 {
			t.Fatalf("reading %d: %d nodes and %d Sentinels counted refusing, want 1 node: %v", i, nodes, sentinels, err)
		}
	}
}

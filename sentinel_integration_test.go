package main

import (
	"context"
	"maps"
	"net"
	"net/http"
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
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// sentinelMaster is the name the tests' Sentinel watches.
const sentinelMaster = "combo"

// Found through a Sentinel, the service reports and pushes as on one
// Redis; when the Sentinel fails the master over to its replica, reports
// fail with UNAVAILABLE for a moment and then land on the new master, and
// the windows open at the failover (replicated before it) are pushed from
// there, each once. The service logs in to the Sentinel as README's
// Sentinel user, which is denied nothing (its ACL LOG stays empty) and is
// warned of by no start check.
func TestRedisViaSentinelFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("fails a master over")
	}
	master := testredis.Start(t, testredis.Options{})
	replica := testredis.StartReplica(t, master)
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	testredis.SetREADMESentinelACLUser(t, func(args ...any) error {
		return sentinel.Client().Do(context.Background(), args...).Err()
	}, "README.md", "spw")
	defer testredis.NoneDenied(t, sentinel.Client())
	core, logs := observer.New(zap.WarnLevel)
	defer func() {
		// The start checks' warnings; the failover's own (sentinel_watch)
		// is expected.
		warned := logs.Filter(func(e observer.LoggedEntry) bool {
			return e.LoggerName != "sentinel_watch" && (strings.Contains(e.Message, "Sentinel") || strings.Contains(e.Message, "could not read"))
		})
		if warned.Len() != 0 {
			t.Errorf("warnings of the Sentinel: %v", warned.All())
		}
	}()
	s := startService(t, options{redis: master, log: zap.New(core), mutate: func(c *conf.Config) {
		c.Redis.Addr = ""
		c.Redis.SentinelAddrs, c.Redis.SentinelMaster = []string{sentinel.Addr}, sentinelMaster
		c.Redis.SentinelUsername, c.Redis.SentinelPassword = "combo-sentinel", "spw"
		// Room for a loaded machine's first dials: the reports before the
		// failover must not fail. Those during it still fail fast, the
		// killed master refusing connections.
		c.Redis.Timeout = time.Second
		c.Window.Size = 2 * time.Second // windows stay open across the failover
		c.Worker.ClaimIdle = conf.DefaultClaimIdle(c.Window)
	}})
	// Published on the master, pushes reach the replica's subscribers too,
	// and this connection outlives the failover: the replica becomes the
	// master.
	pushes := subscribe(t, replica.Client())
	if code, body := readyz(t, s); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}

	before := newActivity()
	first := gift(before, 1, "firework", 1)
	s.report(first)
	s.report(gift(before, 1, "firework", 2))
	// Asynchronous replication loses what the replica has not received;
	// here it has everything before the master dies.
	if n, err := master.Client().Do(context.Background(), "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas, %v", n, err)
	}
	master.Kill()
	promoted := time.Now()
	for {
		addr, err := sentinel.Client().Do(context.Background(), "SENTINEL", "get-master-addr-by-name", sentinelMaster).StringSlice()
		if err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == replica.Addr {
			break
		}
		if time.Since(promoted) > 20*time.Second {
			t.Fatalf("the Sentinel did not promote the replica within 20 s: %v %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	after := newActivity()
	var c *combo.Contribution
	for deadline := time.Now().Add(10 * time.Second); ; {
		c = gift(after, 1, "rocket", 1)
		_, err := s.rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
		if err == nil {
			break
		}
		if ce := comboErr(t, err); ce.Code != 2 {
			t.Fatalf("report during the failover: %+v, want UNAVAILABLE", ce)
		}
		if time.Now().After(deadline) {
			t.Fatalf("reports still fail 10 s after the Sentinel promoted the replica: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := pushes.waitFor(1, 15*time.Second, forActivity(before))
	if r := got[0].msg.Record; r.ID != first.Id || r.Quantity != 3 {
		t.Fatalf("window open at the failover: %+v, want id %d quantity 3", r, first.Id)
	}
	got = pushes.waitFor(1, 15*time.Second, forActivity(after))
	if r := got[0].msg.Record; r.ID != c.Id || r.Quantity != 1 {
		t.Fatalf("window after the failover: %+v, want id %d", r, c.Id)
	}
	pushes.quiet(time.Second, 1, forActivity(before))
	if code, body := readyz(t, s); code != http.StatusOK {
		t.Fatalf("/readyz after the failover: %d %s", code, body)
	}
}

// A Sentinel that lets no one in without a login (its default user off)
// is asked as redis.sentinel_username with redis.sentinel_password by the
// clients that find the master through it, not only by the start checks
// and the watch: the service's reports are pushed (mutants: either left
// out of the clients' options, which asked as the default user, were
// refused, and failed every report; TestRedisViaSentinelFailsOver's
// Sentinel lets the default user in).
func TestRedisViaSentinelsThatRequireALogin(t *testing.T) {
	ctx := context.Background()
	master := testredis.Start(t, testredis.Options{})
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	admin := sentinel.Client()
	testredis.SetREADMESentinelACLUser(t, func(args ...any) error { return admin.Do(ctx, args...).Err() }, "README.md", "spw")
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatal(err)
	}
	s := startService(t, options{redis: master, mutate: func(c *conf.Config) {
		c.Redis.Addr = ""
		c.Redis.SentinelAddrs, c.Redis.SentinelMaster = []string{sentinel.Addr}, sentinelMaster
		c.Redis.SentinelUsername, c.Redis.SentinelPassword = "combo-sentinel", "spw"
	}})
	a := newActivity()
	s.report(gift(a, 1, "firework", 1))
	s.pushes.waitFor(1, wait, forActivity(a))
}

// A master found through Sentinels that may evict is warned of at start,
// named by the address the Sentinels give (go-redis gives such a client
// none), as a master.
func TestWarnsOfAnEvictingMasterFoundBySentinel(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	master := testredis.Start(t, testredis.Options{Args: []string{"--maxmemory-policy", "allkeys-lru"}})
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	startService(t, options{redis: master, log: zap.New(core), mutate: func(c *conf.Config) {
		c.Redis.Addr = ""
		c.Redis.SentinelAddrs, c.Redis.SentinelMaster = []string{sentinel.Addr}, sentinelMaster
	}})
	warned := logs.FilterMessageSnippet("maxmemory-policy must be noeviction").FilterField(zap.String("maxmemory_policy", "allkeys-lru"))
	if warned.Len() != 1 || warned.All()[0].ContextMap()["node"] != master.Addr ||
		!strings.HasPrefix(warned.All()[0].Message, "Redis may evict") {
		t.Fatalf("warnings %v, want one naming the master %s and allkeys-lru", logs.All(), master.Addr)
	}
}

// With redis.tls, the Sentinels are dialed over TLS as well as the master
// they name, with the same CA and client certificate.
func TestRedisViaSentinelOverTLS(t *testing.T) {
	master := testredis.Start(t, testredis.Options{TLS: true})
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	s := startService(t, options{redis: master, mutate: func(c *conf.Config) {
		c.Redis.Addr = ""
		c.Redis.SentinelAddrs, c.Redis.SentinelMaster = []string{sentinel.Addr}, sentinelMaster
	}})
	if code, body := readyz(t, s); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	a := newActivity()
	c := gift(a, 1, "firework", 2)
	s.report(c)
	if r := s.pushes.waitFor(1, wait, forActivity(a))[0].msg.Record; r.ID != c.Id || r.Quantity != 2 {
		t.Fatalf("record %+v, want id %d quantity 2", r, c.Id)
	}
}

// A replica the Sentinels list that may evict is warned of at start too:
// a failover makes it the master with its own policy, and the master's
// check alone passed.
func TestWarnsOfAnEvictingReplicaOfTheSentinels(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	master := testredis.Start(t, testredis.Options{})
	replica := testredis.StartReplica(t, master, "--maxmemory-policy", "allkeys-lru")
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	// The Sentinel learns of the replica from the master's INFO and lists
	// it as disconnected until it has connected to it, and the service
	// skips a replica so flagged: StartSentinel returns once it is listed
	// connected, as the service would find it.
	startService(t, options{redis: master, log: zap.New(core), mutate: func(c *conf.Config) {
		c.Redis.Addr = ""
		c.Redis.SentinelAddrs, c.Redis.SentinelMaster = []string{sentinel.Addr}, sentinelMaster
	}})
	warned := logs.FilterMessageSnippet("maxmemory-policy must be noeviction").All()
	if len(warned) != 1 || warned[0].ContextMap()["node"] != replica.Addr || warned[0].ContextMap()["maxmemory_policy"] != "allkeys-lru" {
		t.Fatalf("warnings %v, want one naming the replica %s and allkeys-lru", logs.All(), replica.Addr)
	}
}

// With Sentinel, the AOF check at start asks the nodes the eviction check
// asks: the master the Sentinels name and the replicas they list, each by
// its address. A replica without AOF is named as one (it does no harm
// until a failover makes it the master); one with AOF is not named.
func TestWarnsOfSentinelNodesWithoutAOF(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	master := testredis.Start(t, testredis.Options{})
	without := testredis.StartReplica(t, master, "--appendonly", "no")
	with := testredis.StartReplica(t, master, "--appendonly", "yes")
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	s := startService(t, options{redis: master, log: zap.New(core), mutate: func(c *conf.Config) {
		c.Redis.Addr = ""
		c.Redis.SentinelAddrs, c.Redis.SentinelMaster = []string{sentinel.Addr}, sentinelMaster
	}})
	warned := map[any]string{}
	for _, e := range logs.FilterMessageSnippet("appendonly no").All() {
		warned[e.ContextMap()["node"]] = e.Message
	}
	if len(warned) != 2 || !strings.HasPrefix(warned[master.Addr], "Redis keeps no append-only file") ||
		!strings.HasPrefix(warned[without.Addr], "a Redis replica keeps no append-only file") {
		t.Fatalf("warnings %v, want the master %s named as the master and the replica %s as a replica, not %s",
			logs.All(), master.Addr, without.Addr, with.Addr)
	}
	if !strings.Contains(scrape(t, s), "\ncombo_redis_nodes_not_appendonly 2\n") {
		t.Error("combo_redis_nodes_not_appendonly is not 2 (the master and a replica) after the start check")
	}
	// The append-only watch reads the nodes the check read, by address.
	cfg := conf.Default()
	cfg.Redis.Addr, cfg.Redis.SentinelAddrs, cfg.Redis.SentinelMaster = "", []string{sentinel.Addr}, sentinelMaster
	read, budget := appendOnlyReader(cfg.Redis, nil)
	// A Sentinel's HELLO and two commands, then the nodes' HELLO and read at once.
	if want := 5 * cfg.Redis.Timeout; budget != want {
		t.Errorf("a reading's budget %v with one Sentinel, want %v", budget, want)
	}
	got, err := read(context.Background())
	if want := map[string]string{master.Addr: "0", without.Addr: "0", with.Addr: "1"}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("the watch read %v %v, want %v", got, err, want)
	}
}

// With the first Sentinel listed hung, a master without AOF is still
// warned of: the AOF check has time of its own. It shared the start's 2 s
// with the scripts' load and the eviction check, which with redis.timeout
// 800 ms left it none, and its failure was said at debug level.
func TestAOFCheckOutlastsAHungSentinel(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	master := testredis.Start(t, testredis.Options{})
	sentinels := testredis.StartSentinels(t, 2, sentinelMaster, master)
	sentinels[0].Pause()
	defer sentinels[0].Resume()
	s := startService(t, options{redis: master, log: zap.New(core), mutate: func(c *conf.Config) {
		c.Redis.Addr = ""
		c.Redis.Timeout = 800 * time.Millisecond
		c.Redis.SentinelAddrs, c.Redis.SentinelMaster = []string{sentinels[0].Addr, sentinels[1].Addr}, sentinelMaster
	}})
	// The start line names the Sentinels comma separated, as
	// COMBO_REDIS_SENTINEL_ADDRS takes them.
	if want := sentinelMaster + " via sentinels " + sentinels[0].Addr + "," + sentinels[1].Addr; s.addrs.RedisAddr != want {
		t.Errorf("the start line's redis %q, want %q", s.addrs.RedisAddr, want)
	}
	if logs.FilterMessageSnippet("appendonly no").FilterField(zap.String("node", master.Addr)).Len() != 1 {
		t.Fatalf("warnings %v, want the master %s without AOF named", logs.All(), master.Addr)
	}
}

// A Sentinel replica made without the service's user (ACL SETUSER is not
// replicated) is named at start as refusing the login, with what that
// means once it is promoted; a user that is only denied INFO is not
// said to be refused.
func TestStartNamesAReplicaWithoutTheUser(t *testing.T) {
	master := testredis.Start(t, testredis.Options{})
	replica := testredis.StartReplica(t, master)
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	ctx := context.Background()
	for _, tc := range []struct {
		rules   []any
		refused bool
	}{
		{[]any{"+@all", "~*", "&*"}, true},
		{[]any{"+@all", "-info", "~*", "&*"}, false}, // on both nodes: INFO denied, the login taken
	} {
		for _, node := range []*testredis.Server{master, replica} {
			if node == replica && tc.refused {
				continue // the replica lacks the user
			}
			args := append([]any{"ACL", "SETUSER", "combo", "reset", "on", ">pw"}, tc.rules...)
			if err := node.Client().Do(ctx, args...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		core, logs := observer.New(zap.WarnLevel)
		s := startService(t, options{redis: master, log: zap.New(core), mutate: func(c *conf.Config) {
			c.Redis.Addr = ""
			c.Redis.SentinelAddrs, c.Redis.SentinelMaster = []string{sentinel.Addr}, sentinelMaster
			c.Redis.Username, c.Redis.Password = "combo", "pw"
		}})
		said := logs.FilterMessageSnippet("refuses this service's login").Len()
		if unread := logs.FilterMessageSnippet("could not read every Redis node's maxmemory-policy").Len(); unread != 1 || (said == 1) != tc.refused {
			t.Errorf("rules %v: %d unread warnings, %d saying the login is refused (want %v): %v", tc.rules, unread, said, tc.refused, logs.All())
		}
		// The AOF check names the node it could not read in a warning of
		// its own: the eviction check's may have read it.
		if unread := logs.FilterMessageSnippet("could not read every Redis node's aof_enabled").Len(); unread != 1 {
			t.Errorf("rules %v: %d warnings of nodes the AOF check could not read, want 1: %v", tc.rules, unread, logs.All())
		}
		if err := s.stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// A Sentinel that refuses redis.sentinel_username's login (restarted
// before it wrote the user to its configuration) is named in a reading's
// error, whether it is asked before the one that answers or after it,
// while the nodes are still read: the eviction watch, which reads so each
// minute, then says so while the replica runs.
func TestSentinelReadNamesASentinelRefusingTheLogin(t *testing.T) {
	master := testredis.Start(t, testredis.Options{})
	sentinels := testredis.StartSentinels(t, 2, sentinelMaster, master)
	ctx := context.Background()
	if err := sentinels[0].Client().Do(ctx, "ACL", "SETUSER", "combo-sentinel", "on", ">spw", "+@all", "&*").Err(); err != nil {
		t.Fatal(err)
	}
	refusing := sentinels[1].Addr // it lacks the user
	dead := testredis.ClosedAddr(t)
	// A Sentinel down is no news once another answers, before or after it.
	for _, addrs := range [][]string{{dead, sentinels[0].Addr}, {sentinels[0].Addr, dead}} {
		r := conf.Default().Redis
		r.SentinelAddrs, r.SentinelMaster = addrs, sentinelMaster
		r.SentinelUsername, r.SentinelPassword = "combo-sentinel", "spw"
		if got, _, err := sentinelPolicies(ctx, r, nil); got != master.Addr || err != nil {
			t.Errorf("Sentinels %v, the first or last down: master %q, error %v; want %s and no error", addrs, got, err, master.Addr)
		}
	}
	for _, addrs := range [][]string{{sentinels[0].Addr, refusing}, {refusing, sentinels[0].Addr}} {
		r := conf.Default().Redis
		r.SentinelAddrs, r.SentinelMaster = addrs, sentinelMaster
		r.SentinelUsername, r.SentinelPassword = "combo-sentinel", "spw"
		got, policies, err := sentinelPolicies(ctx, r, nil)
		if got != master.Addr || policies[master.Addr] != "noeviction" {
			t.Fatalf("Sentinels %v: master %q, policies %v, want %s read", addrs, got, policies, master.Addr)
		}
		if err == nil {
			t.Errorf("Sentinels %v: no error, want the Sentinel %s named as refusing the login", addrs, refusing)
		} else if !strings.Contains(err.Error(), "sentinel "+refusing+": WRONGPASS") || !strings.Contains(refusingUser(err), "a Sentinel refuses") {
			t.Errorf("Sentinels %v: error %v (%q), want the Sentinel %s named as refusing the login", addrs, err, refusingUser(err), refusing)
		} else if unread := nodesUnread(err); unread != nil {
			t.Errorf("Sentinels %v: nodes unread %v, want none: every node was read", addrs, unread)
		}
		// Nor does the AOF check, which reads the same way, say so.
		core, logs := observer.New(zap.WarnLevel)
		cfg := conf.Default()
		cfg.Redis = r
		cfg.Redis.Addr = ""
		warnNotAppendOnly(ctx, cfg, nil, zap.New(core))
		if n := logs.FilterMessageSnippet("could not read").Len(); n != 0 {
			t.Errorf("Sentinels %v: the AOF check warned %v, want nothing unread", addrs, logs.All())
		}
	}
}

// The eviction watch reads the nodes the start check reads: with Sentinel,
// the master they name and the replicas they list, each by its address. A
// replica found evicting at start is counted at once; one set to evict
// later (restarted with another policy) is counted in
// combo_redis_nodes_evicting, which the ComboRedisMayEvict alert reads,
// before a failover makes it the master; one that cannot be read (paused,
// then down as the Sentinels see it) keeps what it was last read as; a
// return to noeviction is said as such.
func TestEvictionWatchReadsTheSentinelsReplicas(t *testing.T) {
	master := testredis.Start(t, testredis.Options{})
	evicting := testredis.StartReplica(t, master, "--maxmemory-policy", "allkeys-lru")
	other := testredis.StartReplica(t, master)
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	cfg := conf.Default()
	cfg.Redis.Addr = ""
	cfg.Redis.SentinelAddrs, cfg.Redis.SentinelMaster = []string{sentinel.Addr}, sentinelMaster
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinelMaster, SentinelAddrs: cfg.Redis.SentinelAddrs})
	defer rdb.Close()
	store := repo.New(rdb, repo.Settings{Shards: 1})
	core, logs := observer.New(zap.InfoLevel)
	ctx := context.Background()
	found := warnEvicting(ctx, cfg, store, zap.New(core))
	if len(found) != 1 || found[evicting.Addr] != "allkeys-lru" {
		t.Fatalf("start check found %v, want only %s on allkeys-lru", found, evicting.Addr)
	}
	read, budget := policyReader(cfg.Redis, store)
	// A Sentinel's HELLO and two commands, then the nodes' HELLO and read at once.
	if want := 5 * cfg.Redis.Timeout; budget != want {
		t.Fatalf("a reading's budget %v with one Sentinel, want %v", budget, want)
	}
	var readings atomic.Int64
	counting := func(ctx context.Context) (map[string]string, error) {
		defer readings.Add(1)
		return read(ctx)
	}
	m := metrics.New(prometheus.NewRegistry())
	w := newEvictionWatch(counting, 20*time.Millisecond, time.Second, found, zap.New(core), m)
	counted := func(want float64) func() bool {
		return func() bool { return testutil.ToFloat64(m.RedisNodesEvicting) == want }
	}
	if !counted(1)() {
		t.Fatalf("gauge %v before the first reading, want the replica the start check found", testutil.ToFloat64(m.RedisNodesEvicting))
	}
	w.Start()
	defer w.Stop()
	if err := other.Client().ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the second replica counted evicting", counted(2))
	if warned := logs.FilterMessageSnippet("maxmemory-policy must be noeviction").FilterField(zap.String("node", other.Addr)); warned.Len() != 1 {
		t.Fatalf("warnings %v, want one naming the replica %s", logs.All(), other.Addr)
	}
	// Paused: not read, then, down as the Sentinel sees it (after 500 ms),
	// not asked, and still counted through readings of both kinds.
	evicting.Pause()
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr})
	defer sc.Close()
	waitUntil(t, 10*time.Second, "the Sentinel to see the paused replica down", func() bool {
		rs, _ := sc.Replicas(ctx, sentinelMaster).Result()
		for _, r := range rs {
			if net.JoinHostPort(r["ip"], r["port"]) == evicting.Addr {
				return strings.Contains(r["flags"], "s_down")
			}
		}
		return false
	})
	after := readings.Load() + 3
	waitUntil(t, 10*time.Second, "three readings more", func() bool { return readings.Load() >= after })
	if !counted(2)() {
		t.Fatalf("gauge %v while an evicting replica is paused, want it kept at 2", testutil.ToFloat64(m.RedisNodesEvicting))
	}
	evicting.Resume()
	for _, r := range []*testredis.Server{evicting, other} {
		if err := r.Client().ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 10*time.Second, "the replicas no longer counted", counted(0))
	if n := logs.FilterMessageSnippet("no longer evicts").Len(); n != 2 {
		t.Fatalf("logs %v, want each replica's return to noeviction said", logs.All())
	}
}

// At start the Sentinels are asked what a failover needs of them: a master
// of redis.sentinel_master's name, and a Sentinel user allowed the channels
// go-redis subscribes to (Redis 7 gives a new ACL user none, and go-redis's
// subscription then fails without a word: a review lost ten times the
// reports at a failover). What is missing is logged, naming the Sentinel.
func TestSentinelsAreCheckedAtStart(t *testing.T) {
	master := testredis.Start(t, testredis.Options{})
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	ctx := context.Background()
	for _, acl := range [][]any{
		{"ACL", "SETUSER", "no-channels", "on", ">spw", "+@all"},
		{"ACL", "SETUSER", "switch-master-only", "on", ">spw", "+@all", "&+switch-master"},
		{"ACL", "SETUSER", "failover-channels", "on", ">spw", "+@all", "&+switch-master", "&+replica-reconf-done"},
	} {
		if err := sentinel.Client().Do(ctx, acl...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		user, master string
		want         string // a log line's snippet, or "" for none
	}{
		{"no-channels", sentinelMaster, "may not SUBSCRIBE to +switch-master"},
		// go-redis subscribes to both at once, and denied one it gets
		// neither; but every Sentinel's +switch-master is listened to.
		{"switch-master-only", sentinelMaster, ""},
		{"failover-channels", sentinelMaster, ""},
		{"failover-channels", "no-such-master", "knows no master of that name (redis.sentinel_master)"},
		// A login this Sentinel refuses (the user made on the others only).
		{"no-such-user", sentinelMaster, "could not ask this Sentinel where the master is"},
	} {
		core, logs := observer.New(zap.WarnLevel)
		r := conf.Default().Redis
		r.SentinelAddrs, r.SentinelMaster = []string{sentinel.Addr}, tc.master
		r.SentinelUsername, r.SentinelPassword = tc.user, "spw"
		checkSentinels(ctx, r, nil, zap.New(core))
		got := logs.All()
		if tc.want == "" {
			if len(got) != 0 {
				t.Errorf("user %s, master %s: logged %v, want nothing", tc.user, tc.master, got)
			}
			continue
		}
		if len(got) != 1 || !strings.Contains(got[0].Message, tc.want) || got[0].ContextMap()["sentinel"] != sentinel.Addr {
			t.Errorf("user %s, master %s: logged %v, want one line saying %q and naming the Sentinel", tc.user, tc.master, got, tc.want)
		}
	}
}

// run makes those checks at start: a Sentinel user without the channels
// is warned of in the service's own log.
func TestStartChecksTheSentinels(t *testing.T) {
	master := testredis.Start(t, testredis.Options{})
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	if err := sentinel.Client().Do(context.Background(), "ACL", "SETUSER", "no-channels", "on", ">spw", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	startService(t, options{redis: master, log: zap.New(core), mutate: func(c *conf.Config) {
		c.Redis.Addr = ""
		c.Redis.SentinelAddrs, c.Redis.SentinelMaster = []string{sentinel.Addr}, sentinelMaster
		c.Redis.SentinelUsername, c.Redis.SentinelPassword = "no-channels", "spw"
	}})
	if warned := logs.FilterMessageSnippet("may not SUBSCRIBE to +switch-master").FilterField(zap.String("sentinel", sentinel.Addr)); warned.Len() != 1 {
		t.Fatalf("warnings %v, want one naming the Sentinel whose user may not SUBSCRIBE", logs.All())
	}
}

// A Sentinel that never answers (paused), listed first, is named, and the
// one after it is still checked: each is asked on its own, within its own
// time. Before, the first used up the time all shared, and the second's
// missing channel went unreported. A plain Redis named as a Sentinel is
// named too.
func TestSentinelCheckNamesWhatItCannotAsk(t *testing.T) {
	master := testredis.Start(t, testredis.Options{})
	sentinels := testredis.StartSentinels(t, 2, sentinelMaster, master)
	for _, sn := range sentinels {
		if err := sn.Client().Do(context.Background(), "ACL", "SETUSER", "no-channels", "on", ">spw", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
	}
	sentinels[0].Pause()
	defer sentinels[0].Resume()
	core, logs := observer.New(zap.WarnLevel)
	r := conf.Default().Redis
	r.Timeout = 300 * time.Millisecond
	r.SentinelAddrs = []string{sentinels[0].Addr, sentinels[1].Addr, master.Addr}
	r.SentinelMaster, r.SentinelUsername, r.SentinelPassword = sentinelMaster, "no-channels", "spw"
	start := time.Now()
	checkSentinels(context.Background(), r, nil, zap.New(core))
	if took := time.Since(start); took > 2*sentinelCheckTime*r.Timeout {
		t.Errorf("the check took %v, want about %v at most: each Sentinel within its own time", took, sentinelCheckTime*r.Timeout)
	}
	want := map[string]string{
		sentinels[0].Addr: "could not ask this Sentinel where the master is",
		sentinels[1].Addr: "may not SUBSCRIBE to +switch-master",
		master.Addr:       "could not ask this Sentinel where the master is",
	}
	for _, e := range logs.All() {
		addr, _ := e.ContextMap()["sentinel"].(string)
		if w, ok := want[addr]; ok && strings.Contains(e.Message, w) {
			delete(want, addr)
		}
	}
	for addr, w := range want {
		t.Errorf("nothing logged of Sentinel %s saying %q; logged: %v", addr, w, logs.All())
	}
}

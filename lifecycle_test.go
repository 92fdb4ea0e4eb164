package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/connpool"
	"github.com/cloudwego/kitex/transport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/handler"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// If the aggregation script fails but Redis answers, the contribution is
// published on its own at once and the answer says degraded.
func TestDegradedWhenScriptFails(t *testing.T) {
	// A window long enough that the batch is answered well before it
	// comes due, on a loaded machine too: the order of the pushes below
	// proves the degraded publish immediate only then.
	const w = 2 * time.Second
	s := startService(t, options{mutate: func(c *conf.Config) {
		c.Window.Size = w
		c.Worker.ClaimIdle = conf.DefaultClaimIdle(c.Window)
	}})
	a := newActivity()
	c := gift(a, 1, "firework", 4)
	// Make the window key the wrong type: the script's GET fails.
	key := repo.NewKeys(1).Current(0, a, 1, "firework")
	if err := s.rdb.HSet(context.Background(), key, "not", "a string").Err(); err != nil {
		t.Fatal(err)
	}
	// Another report in the same batch still counts normally.
	other := gift(a, 2, "firework", 1)
	sent := time.Now()
	batch, err := s.rpc.ReportContributions(context.Background(), &combo.ReportContributionsRequest{Contributions: []*combo.Contribution{other, c}})
	if err != nil {
		t.Fatal(err)
	}
	answered := time.Since(sent)
	if r := batch.Results[0]; r.Degraded || r.WindowId != other.Id || r.WindowQuantity != 1 {
		t.Fatalf("the healthy report was affected: %+v", r)
	}
	resp := batch.Results[1]
	if !resp.Degraded || resp.Duplicate || resp.WindowId != c.Id || resp.WindowQuantity != 4 {
		t.Fatalf("response %+v", resp)
	}
	got := s.pushes.waitFor(1, wait, func(r received) bool { return r.msg.ActivityID == a && r.msg.Record.UserID == 1 })
	if r := got[0].msg.Record; r.ID != c.Id || r.Quantity != 4 || r.ComboCount != 4 {
		t.Fatalf("record %+v", r)
	}
	// Immediate, not held to its window's close: published before the
	// healthy report's window, which opened with it, is pushed, and
	// within a second (a 200 ms bound failed on loaded machines). The
	// batch's answer, which comes after the degraded publish, must come
	// before that window is due for the order to tell.
	if d := got[0].at.Sub(sent); d > time.Second || answered >= w {
		t.Fatalf("degraded publish heard %s after the batch was sent, its answer %s after: it must be immediate", d, answered)
	}
	both := s.pushes.waitFor(2, w+wait, forActivity(a))
	if r := both[0].msg.Record; r.UserID != 1 {
		t.Fatalf("pushed first %+v, then the degraded publish: it waited for a window's close", r)
	}
}

// When Redis does not answer, reports fail fast with UNAVAILABLE and say
// why; when it is back, windows flow again without a restart.
func TestRedisDownFailsFastThenRecovers(t *testing.T) {
	s := startService(t, options{mutate: func(c *conf.Config) { c.Redis.Timeout = 300 * time.Millisecond }})
	a := newActivity()
	s.redis.Kill()
	for range 3 {
		start := time.Now()
		_, err := s.rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: gift(a, 1, "firework", 1)})
		// The message says why, not only that time ran out.
		if ce := comboErr(t, err); ce.Code != 2 || !strings.Contains(ce.Message, "connection refused") {
			t.Fatalf("code %d %q, want 2 (UNAVAILABLE) naming the refused connection", ce.Code, ce.Message)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("UNAVAILABLE took %s, want within about a second", d)
		}
	}
	s.redis.Start()
	// The subscriber of the harness died with the server; watch anew.
	pushes := subscribe(t, s.rdb)
	deadline := time.Now().Add(10 * time.Second)
	var c *combo.Contribution
	for {
		c = gift(a, 1, "firework", 1)
		_, err := s.rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reports still fail 10s after Redis came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := pushes.waitFor(1, 10*time.Second, forActivity(a))
	if got[0].msg.Record.ID != c.Id {
		t.Fatalf("record %+v, want id %d", got[0].msg.Record, c.Id)
	}
}

// SIGTERM (ctx cancel in run) stops taking RPCs and publishes every held
// window before run returns nil.
func TestShutdownPublishesHeldWindows(t *testing.T) {
	s := startService(t, options{mutate: func(c *conf.Config) {
		c.Window.Size = 2 * time.Second // windows are surely still open at stop
		c.Worker.ClaimIdle = conf.DefaultClaimIdle(c.Window)
	}})
	a := newActivity()
	const n = 20
	for i := range n {
		s.report(gift(a, int64(i+1), "firework", 1))
	}
	stopped := time.Now()
	if err := s.stop(); err != nil {
		t.Fatalf("run returned %v, want nil (exit 0)", err)
	}
	if held := len(s.pushes.matching(forActivity(a))); held != n {
		// Pushes may still be in the subscriber's buffer; give them a moment.
		s.pushes.waitFor(n, 2*time.Second, forActivity(a))
	}
	if d := time.Since(stopped); d > 2*time.Second+testGrace+3*time.Second {
		t.Fatalf("shutdown took %s", d)
	}
	if pending := s.rdb.XPending(context.Background(), repo.NewKeys(1).Stream(0), repo.Group).Val(); pending.Count != 0 {
		t.Fatalf("%d entries still pending after shutdown", pending.Count)
	}
}

// A Redis that may evict the service's keys is named in a warning at
// start: README requires noeviction, and a platform's default policy is
// easy to miss until gifts go missing.
func TestWarnsOfAnEvictingRedis(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	rs := testredis.Start(t, testredis.Options{Args: []string{"--maxmemory-policy", "allkeys-lru"}})
	s := startService(t, options{redis: rs, log: zap.New(core)})
	warned := logs.FilterMessageSnippet("maxmemory-policy must be noeviction").FilterField(zap.String("maxmemory_policy", "allkeys-lru"))
	if warned.Len() != 1 || warned.All()[0].ContextMap()["node"] != rs.Addr {
		t.Fatalf("warnings %v, want one naming %s and allkeys-lru", logs.All(), rs.Addr)
	}
	if !strings.Contains(scrape(t, s), "\ncombo_redis_nodes_evicting 1\n") {
		t.Fatal("combo_redis_nodes_evicting is not 1 after the start check found one node evicting")
	}
}

// On a Redis Cluster with a master down at start, the live masters that
// may evict are still named, next to the warning that names the one whose
// policy could not be read.
func TestWarnsOfEvictingMastersWithOneDown(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	ctx := context.Background()
	cc := c.Client(t)
	c.ConfigSet(t, cc, "maxmemory-policy", "allkeys-lru")
	c.KillMaster(t, cc, c.Addrs[0])
	cfg := conf.Default()
	cfg.Redis.Addrs = c.Addrs
	core, logs := observer.New(zap.WarnLevel)
	warnEvicting(ctx, cfg, repo.New(cc, repo.Settings{Shards: 1}), zap.New(core))
	if logs.FilterMessageSnippet("could not read").FilterFieldKey("error").Len() != 1 {
		t.Errorf("warnings %v, want one that the down master's policy was unread", logs.All())
	}
	named := map[any]bool{}
	for _, e := range logs.FilterMessageSnippet("maxmemory-policy must be noeviction").All() {
		named[e.ContextMap()["node"]] = true
	}
	if len(named) != 2 || !named[c.Addrs[1]] || !named[c.Addrs[2]] {
		t.Fatalf("warnings %v, want the live masters %v named", logs.All(), c.Addrs[1:])
	}
	// The AOF check names a Cluster node in words true of a replica too
	// (a failover swaps them), not as one that comes back empty whatever
	// its role.
	core, logs = observer.New(zap.WarnLevel)
	warnNotAppendOnly(ctx, cfg, repo.New(cc, repo.Settings{Shards: 1}), zap.New(core))
	for _, e := range logs.FilterMessageSnippet("appendonly no").All() {
		if e.Message != appendOnlyRule.warn {
			t.Fatalf("a Cluster node without AOF warned of as %q, want the watch's words %q", e.Message, appendOnlyRule.warn)
		}
	}
	if n := logs.FilterMessageSnippet("appendonly no").Len(); n != 2 {
		t.Fatalf("warnings %v, want the 2 live masters without AOF named", logs.All())
	}
}

// A Redis that keeps no append-only file is named in a warning at start
// (a restart from an older snapshot pushes windows again and loses those
// acknowledged since, silently) and counted in
// combo_redis_nodes_not_appendonly; one with AOF is not.
func TestWarnsOfARedisWithoutAOF(t *testing.T) {
	for _, aof := range []bool{false, true} {
		core, logs := observer.New(zap.WarnLevel)
		rs := testredis.Start(t, testredis.Options{AppendOnly: aof})
		s := startService(t, options{redis: rs, log: zap.New(core)})
		warned := logs.FilterMessageSnippet("appendonly no").FilterField(zap.String("node", rs.Addr))
		if want := map[bool]int{false: 1, true: 0}[aof]; warned.Len() != want {
			t.Errorf("AOF %v: %d warnings naming %s, want %d: %v", aof, warned.Len(), rs.Addr, want, logs.All())
		}
		// The append-only watch goes on from what the check found.
		if want := map[bool]string{false: "1", true: "0"}[aof]; !strings.Contains(scrape(t, s), "\ncombo_redis_nodes_not_appendonly "+want+"\n") {
			t.Errorf("AOF %v: combo_redis_nodes_not_appendonly is not %s after the start check", aof, want)
		}
		if err := s.stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// From SIGTERM on, /readyz fails at once, while the service still
// publishes its held windows: before, it answered ok until Kitex's exit
// wait (up to 2 s) ended and the worker stopped, with the RPC listener
// already closed.
func TestReadyFailsOnceStopping(t *testing.T) {
	s := startService(t, options{mutate: func(c *conf.Config) {
		c.Window.Size = 2 * time.Second // held windows keep the service stopping a while
		c.Worker.ClaimIdle = conf.DefaultClaimIdle(c.Window)
	}})
	if code, body := readyz(t, s); code != http.StatusOK {
		t.Fatalf("/readyz before stopping: %d %s", code, body)
	}
	s.report(gift(newActivity(), 1, "firework", 1)) // a held window
	s.cancel()                                      // SIGTERM; s.stop waits for run in the cleanup
	if code, body := readyz(t, s); code != http.StatusServiceUnavailable || !strings.Contains(body, "stopping") {
		t.Fatalf("/readyz once stopping: %d %q, want 503 naming stopping", code, body)
	}
}

// With no redis.addr the service runs on its embedded Redis (the README's
// first command), and pushes are watchable there.
func TestEmbeddedRedis(t *testing.T) {
	cfg := conf.Default()
	cfg.Server.Addr, cfg.Metrics.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Window.Size, cfg.Window.Grace = testWindow, testGrace
	cfg.Worker.ClaimIdle = conf.DefaultClaimIdle(cfg.Window)
	cfg.Worker.Block = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan started, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, testLogger(t), ready) }()
	st := awaitStart(t, ready, done)
	defer func() {
		cancel()
		if err := testwait.Receive(t, "run to return", done); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: st.RedisAddr})
	defer rdb.Close()
	pushes := subscribe(t, rdb)
	rpc := newRPC(t, st.RPCAddr)
	a := newActivity()
	first := gift(a, 1, "firework", 1)
	for _, c := range []*combo.Contribution{first, gift(a, 1, "firework", 2)} {
		if _, err := rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c}); err != nil {
			t.Fatal(err)
		}
	}
	got := pushes.waitFor(1, wait, forActivity(a))
	if r := got[0].msg.Record; r.ID != first.Id || r.Quantity != 3 {
		t.Fatalf("record %+v", r)
	}
}

// redis.password is accepted with the embedded Redis (its default user
// takes one), so the embedded Redis must ask for it: it took every client
// without one, and redis.embedded_addr may listen beyond loopback (for a
// subscriber to watch the pushes), where a password set by the operator
// was taken as protecting it.
func TestEmbeddedRedisRequiresThePassword(t *testing.T) {
	cfg := conf.Default()
	cfg.Redis.Password = "s3cret"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	addr, newClient, closeAll, err := openRedis(cfg, zap.New(core), prometheus.NewRegistry(), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	ctx := context.Background()
	if err := newClient(0).Ping(ctx).Err(); err != nil {
		t.Fatalf("the service's client on the embedded Redis at %s: %v", addr, err)
	}
	anon := redis.NewClient(&redis.Options{Addr: addr})
	defer anon.Close()
	if err := anon.Set(ctx, "combo-test:anon", "x", time.Minute).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("SET without the password on the embedded Redis: %v; want NOAUTH", err)
	}
	// The start's hint to watch the pushes asks for the password: without
	// --askpass its redis-cli is refused NOAUTH.
	_, port, _ := net.SplitHostPort(addr)
	hinted := logs.FilterField(zap.String("embedded_redis_addr", addr)).
		FilterField(zap.String("watch_pushes", "redis-cli --raw --askpass -p "+port+" psubscribe 'act:*:contributions'"))
	if hinted.Len() != 1 {
		t.Fatalf("logged %v, want the embedded Redis's address and a watch_pushes hint with --askpass", logs.All())
	}
}

// redis.pool_size bounds each client's pool (or the connections its user
// needs at once, the worker's shards, if more), redis.conn_max_lifetime's
// renewals are spread over a tenth of it so that a pool's connections do
// not all dial anew at once, and a command that failed is not sent again
// (go-redis's default sends it up to 3 more times). Checked on the
// clients' options, as SETINFO is (mutants: each left out, and every test
// still passing).
func TestClientsTakeThePoolAndLifetimeConfigured(t *testing.T) {
	cfg := conf.Default()
	cfg.Redis.Addr = testredis.ClosedAddr(t) // nothing is dialed
	cfg.Redis.PoolSize, cfg.Redis.ConnMaxLifetime = 3, 10*time.Minute
	_, newClient := openTestRedis(t, cfg)
	for minConns, want := range map[int]int{0: 3, 7: 7} {
		c, ok := newClient(minConns).(*redis.Client)
		if !ok {
			t.Fatalf("a client of one Redis is a %T", newClient(minConns))
		}
		o := c.Options()
		if o.PoolSize != want {
			t.Errorf("newClient(%d): pool of %d, want %d (redis.pool_size 3)", minConns, o.PoolSize, want)
		}
		if o.ConnMaxLifetime != 10*time.Minute || o.ConnMaxLifetimeJitter != time.Minute {
			t.Errorf("newClient(%d): connections renewed after %v, jittered by %v; want 10m0s and 1m0s", minConns, o.ConnMaxLifetime, o.ConnMaxLifetimeJitter)
		}
		if o.MaxRetries != 0 {
			t.Errorf("newClient(%d): a failed command sent again up to %d times, want none", minConns, o.MaxRetries)
		}
	}
}

// On the embedded Redis keys expire as on a real one: the dedupe sets and
// windows rely on it to stay bounded.
func TestEmbeddedRedisExpiresKeys(t *testing.T) {
	cfg := conf.Default()
	addr, newClient := openTestRedis(t, cfg)
	rdb := newClient(0)
	ctx := context.Background()
	if err := rdb.Set(ctx, "combo-test:ttl", "x", 200*time.Millisecond).Err(); err != nil {
		t.Fatalf("SET on the embedded Redis at %s: %v", addr, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rdb.Exists(ctx, "combo-test:ttl").Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatalf("a key set with PX 200 still exists after 5 s (PTTL %s)", rdb.PTTL(ctx, "combo-test:ttl").Val())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A command on the embedded Redis costs about the same however many keys
// it holds. miniredis's ClockTTL counted TTLs down on every command by
// sorting every key: one report's cost grew with the windows open, and a
// batch of 1000 new windows (ReportContributions' limit) took seconds,
// past redis.timeout, so on 'go run .' it was always answered UNAVAILABLE.
func TestEmbeddedRedisCommandsDoNotWalkKeys(t *testing.T) {
	cfg := conf.Default()
	// The one MSET of 50,000 keys below takes miniredis about 370 ms under
	// -race on an idle machine, past the default 500 ms redis.timeout on a
	// busy one; this test is about each command's cost, not the timeout.
	cfg.Redis.Timeout = 30 * time.Second
	_, newClient := openTestRedis(t, cfg)
	rdb := newClient(0)
	ctx := context.Background()
	// The fastest of 500 GETs: the machine may be busy with other work,
	// and the tick's walk holds miniredis's lock about 50 ms once a
	// second with 50,000 keys under -race (more on a busy host), so a
	// GET may meet one. A command that walked the keys
	// itself would make every GET that slow, the fastest too.
	perCommand := func() time.Duration {
		best := time.Duration(math.MaxInt64)
		for range 500 {
			start := time.Now()
			if err := rdb.Get(ctx, "combo-test:probe").Err(); err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			best = min(best, time.Since(start))
		}
		return best
	}
	empty := perCommand()
	const keys = 50_000
	kv := make([]any, 0, 2*keys)
	for i := range keys {
		kv = append(kv, fmt.Sprintf("combo-test:k%d", i), "x")
	}
	if err := rdb.MSet(ctx, kv...).Err(); err != nil { // one command
		t.Fatal(err)
	}
	full := perCommand()
	t.Logf("GET: %s with no keys, %s with %d", empty, full, keys)
	if full > 10*empty {
		t.Fatalf("a GET took %s with %d keys held, %s with none: each command walks the keys", full, keys, empty)
	}
}

// SIGTERM while callers keep their pooled connections busy (Redis's writes
// stall 140 ms of every 150 ms, so no connection is idle at Kitex's
// checks): Kitex's 2 s exit wait ends with those connections still served.
// The stalls end just after, so the drain can publish. No report may be
// acknowledged after the worker's last read, or its window would wait in
// the stream for a replica that never comes (this is the only one), and
// run still returns nil.
//
// With client.NewClient (TTHeader) the stopping server's answers ask the
// pool to drop each connection, so none is refused; a plain Thrift
// client's connections stay open, and their reports are refused (the gate).
func TestShutdownWithBusyConnectionsAcknowledgesNothingUnread(t *testing.T) {
	t.Run("client.NewClient", func(t *testing.T) { shutdownUnderBusyCallers(t, true) })
	t.Run("plain Thrift", func(t *testing.T) { shutdownUnderBusyCallers(t, false) })
}

func shutdownUnderBusyCallers(t *testing.T, ttheader bool) {
	s := startService(t, options{})
	cli, err := client.NewClient([]string{s.addrs.RPCAddr})
	if !ttheader {
		// Framed without TTHeader: no connection-reset mark. (The service
		// refuses unframed requests, and NewClient always adds TTHeader.)
		cli, err = comboservice.NewClient(client.ServiceName, kclient.WithHostPorts(s.addrs.RPCAddr),
			kclient.WithTransportProtocol(transport.Framed), kclient.WithRPCTimeout(client.DefaultClientRPCTimeout),
			kclient.WithLongConnection(connpool.IdleConfig{MaxIdlePerAddress: 64, MaxIdleGlobal: 1024, MaxIdleTimeout: time.Minute}))
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin := s.redis.Client()
	var done, calm atomic.Bool
	var bg sync.WaitGroup
	bg.Go(func() {
		for !calm.Load() {
			admin.Do(ctx, "CLIENT", "PAUSE", "140", "WRITE")
			time.Sleep(150 * time.Millisecond)
		}
	})
	a := newActivity()
	var mu sync.Mutex
	acked := map[int64]bool{} // users whose report was acknowledged
	var firstErr error
	draining := 0 // reports refused because the replica was stopping
	var sent atomic.Int64
	for g := range 16 {
		bg.Go(func() {
			for i := int64(1); !done.Load(); i++ {
				c := gift(a, int64(g)*1_000_000+i, "firework", 1)
				_, err := cli.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: c})
				mu.Lock()
				if ce, ok := client.IsComboError(err); ok && strings.Contains(ce.Message, handler.ErrDraining.Error()) {
					draining++
				}
				if err == nil {
					acked[c.UserId] = true
				} else if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				sent.Add(1)
			}
		})
	}
	// Both sides busy before the stop, and at least one report
	// acknowledged: under the stalls most reports time out, and a stop
	// that came before any was acknowledged (one run in a dozen at
	// -cpu=1) would leave the checks below nothing to check.
	ackedAny := func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) > 0 }
	for deadline := time.Now().Add(10 * time.Second); sent.Load() < 32 || !ackedAny(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			calm.Store(true)
			done.Store(true)
			bg.Wait()
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("no report acknowledged in 10 s of %d sent under the stalls (first error %v)", sent.Load(), firstErr)
		}
	}
	time.AfterFunc(2500*time.Millisecond, func() { calm.Store(true) })
	err = s.stop()
	done.Store(true)
	bg.Wait()
	if err != nil {
		t.Errorf("run returned %v, want nil (exit 0)", err)
	}
	entries, err := s.rdb.XRange(ctx, repo.NewKeys(1).Stream(0), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	unread := 0
	for _, e := range entries {
		k, _ := e.Values["k"].(string)
		if _, user, _, err := repo.ParseEntryComboKey(k); err == nil && acked[user] {
			unread++
		}
	}
	if unread > 0 {
		t.Fatalf("%d windows of acknowledged reports left in the stream after the only replica stopped (of %d acknowledged)", unread, len(acked))
	}
	// None left unread says nothing unless reports were acknowledged.
	if len(acked) == 0 {
		t.Fatalf("no report acknowledged before the stop (first error %v): the test tested nothing", firstErr)
	}
	// And an acknowledged report must have been counted at all: one
	// answered without reaching Redis leaves nothing in the stream either.
	// Each report has a user of its own, so a window each: every
	// acknowledged user is pushed (the stop flushed them).
	unpushed := func(rs []received) (n int) {
		pushed := map[int64]bool{}
		for _, r := range rs {
			pushed[r.msg.Record.UserID] = true
		}
		for user := range acked {
			if !pushed[user] {
				n++
			}
		}
		return n
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%d of %d acknowledged reports never pushed", unpushed(s.pushes.matching(forActivity(a))), len(acked))
		}
	})
	s.pushes.until(10*time.Second, func(rs []received) bool { return unpushed(rs) == 0 }, forActivity(a))
	// client.NewClient speaks TTHeader: the stopping server marks its
	// answers, the pool drops those connections, and no call of ours is
	// left on one to be refused (other clients would be, by the gate).
	if ttheader && draining > 0 {
		t.Errorf("%d reports refused as draining: client.NewClient's connections outlived the server's exit wait", draining)
	}
	t.Logf("%d reports acknowledged, none left unread, %d refused as draining; first error %v", len(acked), draining, firstErr)
}

// The worker holds a connection per shard in its blocking read of the
// stream (XREADGROUP BLOCK, worker.block). With more shards than its pool
// has connections (redis.pool_size, or go-redis's 10 per CPU), the readers
// of idle shards held them all while the others waited out redis.timeout
// for one and backed off: windows were read, and pushed, seconds late,
// and the claimer starved too.
func TestWorkerHasAConnectionPerShard(t *testing.T) {
	for _, tc := range []struct {
		name           string
		shards, poolSz int
	}{
		{"pool_size below the shards", 4, 2},
		{"default pool below the shards", 10*runtime.GOMAXPROCS(0) + 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startService(t, options{mutate: func(c *conf.Config) {
				c.Redis.Shards, c.Redis.PoolSize = tc.shards, tc.poolSz
				c.Worker.Block = time.Second // the default: a reader holds its connection that long when idle
			}})
			a := newActivity()
			// A new window every 150 ms, all on shard 0, while the other
			// shards stay idle: their readers block for worker.block.
			const n = 15
			keys := repo.NewKeys(tc.shards)
			sent := map[int64]time.Time{}
			for user := int64(1); len(sent) < n; user++ {
				if keys.Shard(a, user, "firework") != 0 {
					continue
				}
				sent[user] = time.Now()
				s.report(gift(a, user, "firework", 1))
				time.Sleep(150 * time.Millisecond)
			}
			got := s.pushes.waitFor(n, 10*time.Second, forActivity(a))
			var worst time.Duration
			for _, r := range got {
				worst = max(worst, r.at.Sub(sent[r.msg.Record.UserID])-testWindow-testGrace)
			}
			// Starved readers pushed windows seconds late (3.6 s, and
			// none within 10 s); healthy ones, a few ms, with room here
			// for a loaded machine's stalls.
			if worst > 1500*time.Millisecond {
				t.Errorf("a window was pushed %s past W + grace after its report; want well under 1.5 s", worst)
			}
		})
	}
}

// redis.username reaches Redis: with the default user off, only the ACL
// user configured can log in.
func TestRedisUsername(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	admin := srv.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user string
		ok   bool
	}{{"combo", true}, {"", false}} {
		cfg := conf.Default()
		cfg.Redis.Addr, cfg.Redis.Username, cfg.Redis.Password = srv.Addr, tc.user, "pw"
		_, newClient, closeAll, err := openRedis(cfg, testLogger(t), prometheus.NewRegistry(), metrics.New(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		err = newClient(0).Ping(ctx).Err()
		closeAll()
		if (err == nil) != tc.ok {
			t.Errorf("username %q: PING %v", tc.user, err)
		}
	}
}

// A port already in use stops the start at once with an error naming it,
// even when Redis is down: the worker was started before the listeners,
// and its drain on the failed start then waited out
// server.shutdown_timeout for a Redis that did not answer (15 s by
// default) before the error was even logged.
func TestPortInUseFailsFastWithRedisDown(t *testing.T) {
	rs := testredis.Start(t, testredis.Options{})
	rs.Kill()
	for _, port := range []string{"server.addr", "metrics.addr"} {
		t.Run(port, func(t *testing.T) {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			cfg := conf.Default()
			cfg.Server.Addr, cfg.Metrics.Addr = "127.0.0.1:0", "127.0.0.1:0"
			if port == "server.addr" {
				cfg.Server.Addr = taken.Addr().String()
			} else {
				cfg.Metrics.Addr = taken.Addr().String()
			}
			cfg.Redis.Addr, cfg.Redis.Timeout = rs.Addr, 200*time.Millisecond
			cfg.Worker.Consumer = t.Name()
			cfg.Server.ShutdownTimeout = 10 * time.Second
			done := make(chan error, 1)
			go func() { done <- run(context.Background(), cfg, testLogger(t), nil) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), taken.Addr().String()) {
					t.Fatalf("run returned %v, want an error naming %s", err, taken.Addr())
				}
			case <-time.After(3 * time.Second):
				t.Fatalf("run still starting 3 s after failing to listen on %s (server.shutdown_timeout %s)", taken.Addr(), cfg.Server.ShutdownTimeout)
			}
		})
	}
}

// Each Redis Cluster client is given its own copy of redis.addrs. go-redis's
// cluster client appends the nodes it discovers to the very slice it was
// given, under its own lock only: the report path's and the worker's
// clients, sharing one backing array with room to spare, wrote into each
// other's node lists while both reloaded their slot maps (a data race the
// race detector found in TestServiceFollowsAFailover, about 1 run in 2).
func TestClusterClientsDoNotShareTheirAddresses(t *testing.T) {
	cfg := conf.Default()
	addrs := make([]string, 2, 8) // spare capacity, as a decoded list may have
	addrs[0], addrs[1] = "127.0.0.1:1", "127.0.0.1:2"
	cfg.Redis.Addrs = addrs
	_, newClient := openTestRedis(t, cfg)
	a, ok := newClient(0).(*redis.ClusterClient)
	if !ok {
		t.Fatal("redis.addrs did not make a cluster client")
	}
	b := newClient(0).(*redis.ClusterClient)
	ao, bo := a.Options().Addrs, b.Options().Addrs
	if !slices.Equal(ao, addrs) || !slices.Equal(bo, addrs) {
		t.Fatalf("clients' addresses %v and %v, want %v", ao, bo, addrs)
	}
	for name, got := range map[string][]string{"first": ao, "second": bo} {
		if &got[0] == &addrs[0] {
			t.Errorf("the %s client's addresses are redis.addrs' own array", name)
		}
		if cap(got) != len(got) {
			t.Errorf("the %s client's addresses have room for %d more in place", name, cap(got)-len(got))
		}
	}
	if &ao[0] == &bo[0] {
		t.Error("the two clients share one array of addresses")
	}
}

// When redis.addr is a name moved to the new master and the old one,
// demoted, cannot reach it (replica-serve-stale-data no), the old node
// answers every command MASTERDOWN, which go-redis does not take for a
// dead connection: the service's pooled connections stayed there until
// its link came up. With redis.conn_max_lifetime they are renewed within
// it and its tenth of jitter, so the next is dialed to where the name
// points now. The name is a proxy here, whose target moves.
func TestServiceLeavesADemotedMasterAnsweringMasterDown(t *testing.T) {
	old := testredis.Start(t, testredis.Options{Args: []string{"--replica-serve-stale-data", "no"}})
	next := testredis.Start(t, testredis.Options{})
	var target atomic.Value
	target.Store(old.Addr)
	name := testredis.ProxyTo(t, func() string { return target.Load().(string) }, func(c, s net.Conn) {
		go func() { _, _ = io.Copy(s, c); s.Close() }()
		_, _ = io.Copy(c, s)
		c.Close()
	})

	cfg := conf.Default()
	cfg.Redis.Addr = name
	cfg.Window.Size, cfg.Window.Grace, cfg.Window.Stale = 200*time.Millisecond, 50*time.Millisecond, 2*time.Second
	cfg.Worker.ClaimIdle = time.Second
	cfg.Redis.ConnMaxLifetime = time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	_, newClient := openTestRedis(t, cfg)
	rdb := newClient(0)
	ctx := context.Background()
	if err := rdb.Set(ctx, "combo-test:k", "old", 0).Err(); err != nil {
		t.Fatal(err)
	}
	oldCl := old.Client()
	if err := oldCl.Do(ctx, "REPLICAOF", "127.0.0.1", testredis.FreePort(t)).Err(); err != nil {
		t.Fatal(err)
	}
	// A script, as the report path and the flushes run: refused whole.
	set := func(v string) error {
		return rdb.Eval(ctx, "return redis.call('SET', KEYS[1], ARGV[1])", []string{"combo-test:k"}, v).Err()
	}
	if err := set("x"); err == nil || !strings.HasPrefix(err.Error(), "MASTERDOWN") {
		t.Fatalf("a script on the demoted master: %v, want MASTERDOWN", err)
	}
	target.Store(next.Addr)
	var last error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if last = set("new"); last == nil {
			break
		}
	}
	if last != nil {
		t.Fatalf("writes still fail 5 s after the name moved (redis.conn_max_lifetime 1s): %v", last)
	}
	if v := next.Client().Get(ctx, "combo-test:k").Val(); v != "new" {
		t.Fatalf("the new master holds %q, want the write", v)
	}
}

// openTestRedis is openRedis for cfg, its clients closed when the test ends.
func openTestRedis(t *testing.T, cfg conf.Config) (addr string, newClient func(minConns int) redis.UniversalClient) {
	t.Helper()
	addr, newClient, closeAll, err := openRedis(cfg, testLogger(t), prometheus.NewRegistry(), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	return addr, newClient
}

// A drain cut short on the embedded Redis says its windows end with the
// process: the worker's own words, "left pending for another replica",
// hold only for a Redis that outlives it.
func TestEmbeddedDrainCutShortSaysTheWindowsEnd(t *testing.T) {
	cfg := conf.Default()
	cfg.Server.Addr, cfg.Metrics.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Window.Size = 20 * time.Second // still open at stop
	cfg.Worker.ClaimIdle = conf.DefaultClaimIdle(cfg.Window)
	cfg.Worker.Block = 100 * time.Millisecond
	cfg.Server.ShutdownTimeout = 500 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan started, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, testLogger(t), ready) }()
	st := awaitStart(t, ready, done)
	rpc := newRPC(t, st.RPCAddr)
	if _, err := rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: gift(newActivity(), 1, "firework", 1)}); err != nil {
		t.Fatal(err)
	}
	cancel()
	err := testwait.Receive(t, "run to return", done)
	if err == nil || !strings.Contains(err.Error(), "still held") || !strings.Contains(err.Error(), "embedded Redis ends with this process") {
		t.Fatalf("run returned %v, want the held window named as ending with the embedded Redis", err)
	}
}

// The whole service runs as README's ACL user, which is granted the
// commands it runs and nothing else, on one Redis and on a Redis Cluster:
// ready, reports pushed once merged, and no command denied, neither one
// the service would log (a start that could not read the eviction policy,
// a loop's NOPERM) nor one go-redis swallows (the ACL LOG of every node).
func TestServiceRunsAsTheREADMEACLUser(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "one node", true: "cluster"}[cluster], func(t *testing.T) {
			ctx := context.Background()
			o := options{mutate: func(c *conf.Config) { c.Redis.Username, c.Redis.Password = "combo", "pw" }}
			var nodes []*redis.Client
			if cluster {
				o.cluster = testredis.StartCluster(t, 3)
				nodes = o.cluster.NodeClients(t)
			} else {
				o.redis = testredis.Start(t, testredis.Options{})
				nodes = append(nodes, o.redis.Client())
			}
			for _, n := range nodes {
				testredis.SetREADMEACLUser(t, func(args ...any) error { return n.Do(ctx, args...).Err() }, "README.md", "pw")
			}
			core, logs := observer.New(zap.WarnLevel)
			o.log = zap.New(core)
			s := startService(t, o)
			if code, body := readyz(t, s); code != http.StatusOK {
				t.Fatalf("/readyz %d %q", code, body)
			}
			a := newActivity()
			for range 3 {
				s.report(gift(a, 1, "firework", 1))
			}
			got := s.pushes.waitFor(1, wait, forActivity(a))
			if q := got[0].msg.Record.Quantity; q != 3 {
				t.Fatalf("pushed quantity %d, want the 3 reports merged", q)
			}
			for _, e := range logs.All() {
				if strings.Contains(fmt.Sprint(e.Message, e.ContextMap()), "NOPERM") || strings.Contains(e.Message, "could not read") {
					t.Errorf("logged %q %v: the README's ACL user was denied something", e.Message, e.ContextMap())
				}
			}
			for _, n := range nodes {
				testredis.NoneDenied(t, n)
			}
		})
	}
}

// The service's clients send no CLIENT SETINFO when they connect: README's
// ACL user is not granted it, and on Redis 7.2+ each connection's refused
// SETINFO (which go-redis ignores) would fill the ACL LOG that tells an
// operator what the user was really denied. (This machine's Redis 7.0 has
// no SETINFO, so the option is checked, not the traffic.)
func TestClientsSendNoClientSetinfo(t *testing.T) {
	cfg := conf.Default()
	cfg.Redis.Addr = testredis.Start(t, testredis.Options{}).Addr
	_, newClient, closeAll, err := openRedis(cfg, testLogger(t), prometheus.NewRegistry(), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	c, ok := newClient(0).(*redis.Client)
	if !ok || !c.Options().DisableIdentity {
		t.Fatalf("a service client (%T) sends CLIENT SETINFO", newClient(0))
	}
	if o := nodeOptions(cfg.Redis, nil, cfg.Redis.Addr, "", ""); !o.DisableIdentity {
		t.Fatal("a start-up check's client sends CLIENT SETINFO")
	}
}

// A pprof profile still running at SIGTERM does not hold the exit: it
// held it the whole server.shutdown_timeout, and the service then said it
// had stopped cleanly.
func TestAProfileRunningAtExitIsCutOff(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	s := startService(t, options{log: zap.New(core), mutate: func(c *conf.Config) {
		c.Metrics.Pprof = true
		c.Server.ShutdownTimeout = 15 * time.Second
	}})
	profiling := make(chan struct{})
	go func() {
		defer close(profiling)
		resp, err := http.Get("http://" + s.addrs.MetricsAddr + "/debug/pprof/profile?seconds=30")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitUntil(t, 10*time.Second, "the profile under way", func() bool {
		return strings.Contains(string(goroutines()), "pprof.Profile")
	})
	start := time.Now()
	if err := s.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the service took %v to stop with a profile running: it waited for the profile", took)
	}
	if logs.FilterMessageSnippet("metrics server closed with requests still running").Len() != 1 {
		t.Fatalf("logs %v, want the cut profile said", logs.All())
	}
	<-profiling
}

// A profile, trace or delta of a named profile longer than maxProfile is
// refused: one caller asking for hours held the tracer (one at a time) and
// its cost that long, shutting the operator's out.
func TestAProfileLongerThanTheBoundIsRefused(t *testing.T) {
	s := startService(t, options{mutate: func(c *conf.Config) { c.Metrics.Pprof = true }})
	// Bounded: a profile let through runs for its seconds.
	client := &http.Client{Timeout: 10 * time.Second}
	for _, q := range []string{"profile?seconds=301", "trace?seconds=300.5", "trace?seconds=NaN", "profile?seconds=Inf",
		"heap?seconds=301", "goroutine?seconds=100000"} { // named profiles serve a delta over seconds
		url := "http://" + s.addrs.MetricsAddr + "/debug/pprof/" + q
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "seconds: at most 300") {
			t.Errorf("GET %s: %d %q, want 400 naming the bound", url, resp.StatusCode, body)
		}
	}
	// Within the bound it is served (a trace of 10 ms).
	resp, err := client.Get("http://" + s.addrs.MetricsAddr + "/debug/pprof/trace?seconds=0.01")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a 10 ms trace: %d, want 200", resp.StatusCode)
	}
}

// The bound takes 300 s itself, and leaves a missing or unparsable
// seconds to pprof (its default length).
func TestProfileBoundIsInclusive(t *testing.T) {
	served := boundedProfile(func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusOK) })
	for q, want := range map[string]int{"": 200, "?seconds=300": 200, "?seconds=300.001": 400, "?seconds=abc": 200, "?seconds=-1": 200} {
		rec := httptest.NewRecorder()
		served(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/profile"+q, nil))
		if rec.Code != want {
			t.Errorf("profile%s: %d, want %d", q, rec.Code, want)
		}
	}
}

// goroutines is every goroutine's stack.
func goroutines() []byte {
	buf := make([]byte, 1<<20)
	return buf[:runtime.Stack(buf, true)]
}

// A report still waiting on Redis when server.shutdown_timeout runs out
// makes run return an error naming the drain, joined with the worker's
// (README: such a stop exits 1, which an orchestrator sees). A proxy
// holds the report's command, so its call stays in flight through the
// stop, past Kitex's exit wait and the drain's bound.
func TestADrainCutShortIsAnError(t *testing.T) {
	rs := testredis.Start(t, testredis.Options{})
	const item = "held-by-the-proxy" // in the report's keys, and in no other command
	held := make(chan struct{})
	var once sync.Once
	proxy := testredis.Proxy(t, rs.Addr, func(in, out net.Conn) {
		go func() { _, _ = io.Copy(in, out); in.Close() }()
		defer out.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := in.Read(buf)
			if n > 0 && strings.Contains(string(buf[:n]), item) {
				once.Do(func() { close(held) })
				_, _ = io.Copy(io.Discard, in) // nothing more reaches Redis
				return
			}
			if n > 0 {
				if _, werr := out.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	s := startService(t, options{redis: rs, mutate: func(c *conf.Config) {
		c.Redis.Addr = proxy
		c.Redis.Timeout = 10 * time.Second // the call waits past every bound of the stop
		c.Server.ShutdownTimeout = 300 * time.Millisecond
	}})
	go func() {
		_, _ = s.rpc.ReportContribution(context.Background(),
			&combo.ReportContributionRequest{Contribution: gift(newActivity(), 1, item, 1)})
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the report's command did not reach the proxy within 10 s")
	}
	if err := s.stop(); err == nil || !strings.Contains(err.Error(), "drain reports in flight") {
		t.Fatalf("run returned %v, want an error naming the drain of the report in flight", err)
	}
}

// The service's clients send nothing on connecting that the Redis refuses:
// go-redis's CLIENT MAINT_NOTIFICATIONS handshake (its maintenance
// notifications, on by default in auto mode) is off, as CLIENT SETINFO is.
// The service does not use them, README's ACL user is not granted the
// command, and Redis 7 refuses it as an unknown subcommand, each refusal an
// error in INFO errorstats and, where the command exists, a denial in the
// ACL LOG.
func TestClientsSendNoMaintNotificationsHandshake(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	cfg := conf.Default()
	cfg.Redis.Addr = srv.Addr
	_, newClient, closeAll, err := openRedis(cfg, testLogger(t), prometheus.NewRegistry(), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	refused := srv.RefusedWhile(func() {
		for _, c := range []redis.UniversalClient{newClient(0), newClient(4), redis.NewClient(nodeOptions(cfg.Redis, nil, srv.Addr, "", ""))} {
			if err := c.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if refused != "" {
		t.Fatalf("the service's clients sent commands Redis refused on connecting: %s", refused)
	}
}

package repo_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// Ready passes on a primary (and the embedded Redis) and changes
// nothing there.
func TestReadyOnAPrimary(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		r := repo.New(rdb, settings())
		if err := r.Ready(context.Background()); err != nil {
			t.Fatalf("Ready on a primary: %v", err)
		}
		if n := rdb.DBSize(context.Background()).Val(); n != 0 {
			t.Fatalf("the probe wrote %d keys", n)
		}
	})
}

// A read-only replica answers PING but refuses every report: it is not
// ready, and the error says why.
func TestReadyRefusesAReplica(t *testing.T) {
	primary := testredis.Start(t, testredis.Options{})
	replica := testredis.Start(t, testredis.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)}})
	rdb := replica.Client()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("replica PING: %v", err)
	}
	r := repo.New(rdb, settings())
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := r.Ready(ctx)
		if err != nil && strings.Contains(err.Error(), "READONLY") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ready on a replica: %v, want a READONLY error", err)
		}
		time.Sleep(50 * time.Millisecond) // the replica may still be loading from its primary
	}
}

// A Redis that answers but refuses writes for its own reasons leaves
// reports degraded, not UNAVAILABLE, on every replica alike: each stays
// ready (readiness-gated routing would otherwise drop them all at once).
func TestReadyWhileWritesAreRefused(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	r := repo.New(rdb, settings())
	if err := rdb.Del(ctx, r.Keys().Probe(0)).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOREPLICAS") {
		t.Fatalf("a write: %v, want NOREPLICAS", err)
	}
	if err := r.Ready(ctx); err != nil {
		t.Fatalf("Ready while writes are refused: %v", err)
	}
}

// A replica whose password or ACL user Redis refuses fails every report,
// degraded ones included: it is not ready (a rollout with a wrong
// password must stop there).
func TestReadyRefusesAWrongPasswordOrUser(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	admin := srv.Client()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "narrow", "on", ">pw", "~*", "+ping", "+get").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]*redis.Options{
		"no password":    {Addr: srv.Addr},
		"wrong password": {Addr: srv.Addr, Password: "nope"},
		"narrow user":    {Addr: srv.Addr, Username: "narrow", Password: "pw"},
	} {
		rdb := redis.NewClient(opts)
		err := repo.New(rdb, settings()).Ready(ctx)
		rdb.Close()
		if err == nil {
			t.Errorf("%s: ready", name)
		}
	}
}

// A user allowed EVALSHA but not EVAL runs the reports from the scripts
// LoadScripts cached; the probe is cached with them, so it is ready too.
func TestReadyWithEvalshaOnly(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "shaonly", "on", ">pw", "~*", "&*", "+@all", "-eval").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "shaonly", Password: "pw"})
	defer rdb.Close()
	r := repo.New(rdb, settings())
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(ctx); err != nil {
		t.Fatalf("Ready for a user without EVAL: %v", err)
	}
}

// A user that may write the service's keys but not PUBLISH on the push
// channels (Redis 7 gives a new ACL user no channel unless told) takes
// every report and pushes no window: it is not ready, and the error says
// why. Granted the channels, it is.
func TestReadyRefusesAUserDeniedTheChannels(t *testing.T) {
	ctx := context.Background()
	admin, rdb := userDeniedChannels(t)
	r := repo.New(rdb, settings())
	if err := r.Ready(ctx); err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "PUBLISH") {
		t.Fatalf("Ready for a user denied the channels: %v; want NOPERM naming PUBLISH", err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "&act:*").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(ctx); err != nil {
		t.Fatalf("Ready once granted &act:*: %v", err)
	}
	if n := admin.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("the probe wrote %d keys", n)
	}
}

// A user granted the push channels but not the PUBLISH command (one built
// from @read, @write, @stream and @scripting: PUBLISH is in @pubsub) is
// refused as well, and the error names both grants: told only "&act:*",
// which it has, the operator could not fix it.
func TestReadyNamesThePublishCommand(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	admin := srv.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "on", ">pw", "~combo:*", "&act:*",
		"+@read", "+@write", "+@stream", "+@scripting", "+@connection", "+time").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw"})
	t.Cleanup(func() { rdb.Close() })
	r := repo.New(rdb, settings())
	if err := r.Ready(ctx); err == nil || !strings.Contains(err.Error(), "+publish") {
		t.Fatalf("Ready for a user without PUBLISH: %v; want NOPERM naming +publish", err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "+publish").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(ctx); err != nil {
		t.Fatalf("Ready once granted +publish: %v", err)
	}
}

// A user denied any one command the service runs on its keys is not
// ready, and the error names the command: before, a user denied (say)
// XREADGROUP took every report and flushed no window, ready all along.
// Granted it again, the user is ready.
func TestReadyNamesADeniedCommand(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	admin := srv.Client()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	r := repo.New(rdb, settings())
	for _, tc := range []struct{ deny, grant, named string }{
		{"-xreadgroup", "+xreadgroup", "XREADGROUP"},
		{"-xautoclaim", "+xautoclaim", "XAUTOCLAIM"},
		{"-setrange", "+setrange", "SETRANGE"},
		{"-rename", "+rename", "RENAME"},
		{"-xgroup|create", "+xgroup|create", "XGROUP CREATE"},
		{"-xinfo|consumers", "+xinfo|consumers", "XINFO CONSUMERS"},
		{"-@stream", "+@stream", "X"},
	} {
		if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "reset", "on", ">pw", "~combo:*", "&act:*", "+@all", tc.deny).Err(); err != nil {
			t.Fatal(err)
		}
		err := r.Ready(ctx)
		if err == nil || !strings.Contains(err.Error(), "NOPERM this Redis user may not run "+tc.named) {
			t.Errorf("Ready for a user with %s: %v; want NOPERM naming %s", tc.deny, err, tc.named)
		}
		if err := admin.Do(ctx, "ACL", "SETUSER", "combo", tc.grant).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.Ready(ctx); err != nil {
			t.Errorf("Ready once granted %s again: %v", tc.grant, err)
		}
	}
}

// The probe checks every command the service runs on its keys: each
// repository method runs here (runEveryFlow: opens, joins, a rewrite, a
// parked window, a duplicate, reads, claims, flushes, retires, drops,
// stream stats, pruning, a degraded publish), and every command Redis counted meanwhile, from the scripts
// too, is one the probe asks about (or needs no check: the scripting
// commands that run the probe itself). A command added to a script or to
// the worker without the probe fails here.
func TestReadyChecksEveryCommandTheServiceRuns(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	rdb := srv.Client()
	r := repo.New(rdb, settings())
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	runEveryFlow(t, rdb, r)

	stats, err := rdb.InfoMap(ctx, "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	unchecked := map[string]bool{ // they run the probe, or are this test's own
		"evalsha": true, "eval": true, "script|load": true, "config|resetstat": true,
		"info": true, "hello": true, "client|setinfo": true, "ping": true,
	}
	var seen []string
	for name := range stats["Commandstats"] {
		cmd := strings.TrimPrefix(name, "cmdstat_")
		seen = append(seen, cmd)
		if unchecked[cmd] {
			continue
		}
		main, sub, isSub := strings.Cut(strings.ToUpper(cmd), "|")
		want := "{'" + main + "'"
		if isSub {
			want = "{'" + main + "', '" + sub + "'"
		}
		if main == "PUBLISH" {
			want = "redis.acl_check_cmd('PUBLISH'"
		}
		if !strings.Contains(repo.WriteProbeLua, want) {
			t.Errorf("the service ran %s, which the readiness probe does not check (want %q in it)", cmd, want)
		}
	}
	for _, must := range []string{"xadd", "setrange", "rename", "xreadgroup", "xautoclaim", "xgroup|delconsumer", "publish"} {
		if !slices.Contains(seen, must) {
			t.Errorf("the flows here never ran %s (ran %v): the check misses a path", must, seen)
		}
	}
}

// runEveryFlow runs each repository method the service calls on rdb, as r
// (settings()): loading the scripts, the eviction check, the probe, the
// clock, the group, reports that open, join, rewrite, park and repeat a
// window, reads, a flush, claims, a retire, a drop, stream stats, pruning,
// and a report published on its own (degraded: the stream full).
func runEveryFlow(t *testing.T, rdb redis.UniversalClient, r *repo.Repo) {
	t.Helper()
	ctx := context.Background()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("LoadScripts", r.LoadScripts(ctx))
	_, err := r.Evicting(ctx)
	must("Evicting", err)
	must("Ready", r.Ready(ctx))
	_, err = r.Time(ctx, 0)
	must("Time", err)
	must("EnsureGroups", r.EnsureGroups(ctx))
	now := time.Now().UnixMilli()
	w := settings().Window.Milliseconds()
	_, err = r.Report(ctx, []*combo.Contribution{
		contribution(10, "rose", now),       // opens
		contribution(11, "rose", now),       // joins
		contribution(9, "rose", now),        // a smaller id: rewrites
		contribution(10, "rose", now),       // a duplicate
		contribution(12, "rose", now+w+1),   // past W: parks the window, opens another
		contribution(13, "rocket", now+w+1), // another key
	})
	must("Report", err)
	ws, _, _, err := r.Read(ctx, 0, "c1", ">", 10, -1)
	must("Read", err)
	if len(ws) != 3 {
		t.Fatalf("read %d windows, want 3", len(ws))
	}
	for deadline := time.Now().Add(5 * time.Second); ; { // Early until due, W + grace after it opened
		res, err := r.Flush(ctx, ws[:1])
		must("Flush", err)
		if res[0].Status == repo.Published {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flush: %+v 5 s after the window opened", res[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	claimed, _, _, _, err := r.Claim(ctx, 0, "c2", time.Millisecond, "0-0", 10) // idle since the read
	must("Claim", err)
	if len(claimed) != 2 {
		t.Fatalf("claimed %d windows, want the 2 not flushed", len(claimed))
	}
	_, err = r.Retire(ctx, ws[1])
	must("Retire", err)
	must("Drop", r.Drop(ctx, 0, []string{ws[2].ID}))
	_, err = r.LastID(ctx, 0)
	must("LastID", err)
	_, err = r.StreamStats(ctx, 0)
	must("StreamStats", err)
	full := settings()
	full.StreamMaxLen = 1 // it holds ws[1], kept by the retire
	res, err := repo.New(rdb, full).Report(ctx, []*combo.Contribution{contribution(14, "lily", now)})
	must("degraded Report", err)
	if res[0].Outcome != repo.Degraded {
		t.Fatalf("a report with the stream full: %+v, want degraded", res[0])
	}
	pruned, err := r.PruneConsumers(ctx, 0, "c2", 0) // c1: nothing pending since c2 claimed it
	must("PruneConsumers", err)
	if !slices.Equal(pruned, []string{"c1"}) {
		t.Fatalf("pruned %v, want [c1]", pruned)
	}
}

// A report degraded because the user may not run a command of the report
// script says so and points to /readyz, which names the command: Redis's
// own words inside a script name neither.
func TestReportDeniedACommandSaysWhereItIsNamed(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "combo", "reset", "on", ">pw", "~combo:*", "&act:*", "+@all", "-@stream").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	r := repo.New(rdb, settings())
	res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", time.Now().UnixMilli())})
	if err != nil {
		t.Fatal(err)
	}
	// Redis 7.0's words name no command, and the cause points to /readyz;
	// 7.2 and later name it ("User combo has no permissions to run the
	// 'xlen' command").
	if res[0].Outcome != repo.Degraded || res[0].Cause == nil ||
		!strings.Contains(res[0].Cause.Error(), "/readyz names it") && !strings.Contains(res[0].Cause.Error(), "' command") {
		t.Fatalf("result %+v, want degraded with a cause pointing to /readyz", res[0])
	}
}

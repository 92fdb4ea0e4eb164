package repo_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
)

// A report's script fails (a full stream) and its degraded publish reaches
// its master just as the master is paused (SIGSTOP, a VM stall): the
// publish waits on the paused master's socket, its sender stops waiting
// (UNAVAILABLE) and the cluster promotes the replica. The report sent
// again degrades on the new master, which pushes it. When the old master
// resumes it runs what waited on its sockets before it hears it was
// replaced: the first degraded publish, whose id its stale dedupe sets do
// not hold. The report must still be pushed once.
func TestDegradedPublishHeldByAPausedMasterIsNotPushedAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short")
	}
	const timeout = 300 * time.Millisecond
	ctx := context.Background()
	cluster := testredis.StartCluster(t, 3)
	admin := cluster.Client(t)
	r, s, c := degradingReport(t, admin, func(s *repo.Settings) {
		s.Timeout = timeout
		s.Window = time.Minute // the window that fills the stream stays
		s.Stale = 2 * time.Minute
	})
	from := cluster.MasterAddr(t, admin, r.Keys().Stream(r.Keys().Shard(7, 1, c.ItemType)))
	replica := cluster.AddReplica(t, from)
	var old *testredis.Server
	var live string // a master that stays one: PUBLISH reaches every node
	for i, a := range cluster.Addrs {
		if a == from {
			old = cluster.Nodes[i]
		} else {
			live = a
		}
	}
	oldCl := redis.NewClient(&redis.Options{Addr: from})
	t.Cleanup(func() { oldCl.Close() })
	if n, err := oldCl.Do(ctx, "WAIT", 1, 1000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d %v: the replica must hold the full stream", n, err)
	}
	liveCl := redis.NewClient(&redis.Options{Addr: live})
	t.Cleanup(func() { liveCl.Close() })
	sub := liveCl.Subscribe(ctx, push.Channel(7))
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	pushes := sub.Channel()

	// As the service's client (redisclient.go's openRedis), with the master
	// paused just before the first degraded publish reaches it.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, PoolTimeout: timeout,
		MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	var paused atomic.Bool
	cc.AddHook(testredis.PipelineHook(func(cmds []redis.Cmder) {
		if slices.ContainsFunc(cmds, repo.IsDegradedPublish) && paused.CompareAndSwap(false, true) { // after a guard (guardResend)
			old.Pause()
		}
	}))
	rp := repo.New(cc, s)
	if err := rp.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := rp.Report(ctx, []*combo.Contribution{c}); !errors.Is(err, repo.ErrUnavailable) {
		t.Fatalf("report whose degraded publish waits on a paused master: %+v %v, want ErrUnavailable", res, err)
	}
	if !paused.Load() {
		t.Fatal("no degraded publish was held: the test did not test")
	}
	// Promoted at once, as an operator would: the cluster's own election
	// (the live masters mark the paused one failed, then vote) once took
	// over 30 s on a loaded CI machine. The resumed old master learns it
	// was replaced alike, from the new master's higher epoch.
	replica.TakeOver(t)

	// Sent again until the client follows the promotion: degraded there.
	deadline := time.Now().Add(15 * time.Second)
	for {
		cc.ReloadState(ctx)
		res, err := rp.Report(ctx, []*combo.Contribution{c})
		if err == nil {
			if res[0].Outcome != repo.Degraded {
				t.Fatalf("report sent again on the new master: %+v, want degraded", res[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("report still refused 15 s after the promotion: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantPush := func(what string) string {
		t.Helper()
		select {
		case m := <-pushes:
			return m.Payload
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s within 10 s", what)
		}
		return ""
	}
	if p, err := push.Decode([]byte(wantPush("push of report 42"))); err != nil || p.Record.ID != 42 {
		t.Fatalf("first push %+v %v, want report 42 on its own", p, err)
	}

	old.Resume()
	// Once it says it is a replica it has run what waited on its sockets;
	// a marker it publishes then comes after anything those published,
	// over the same cluster bus link.
	deadline = time.Now().Add(10 * time.Second)
	for {
		if role, _ := oldCl.Do(ctx, "ROLE").Slice(); len(role) > 0 && role[0] == "slave" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the resumed old master not a replica within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := oldCl.Publish(ctx, push.Channel(7), "marker").Err(); err != nil {
		t.Fatal(err)
	}
	if p := wantPush("marker"); p != "marker" {
		t.Fatalf("the resumed old master pushed report 42 again: %s", p)
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
)

// A report degrades (its window key holds a key of the wrong type) and its degraded publish
// reaches its master just as the master is paused (SIGSTOP, a VM stall):
// the publish waits on the paused master's socket, the service answers
// the caller with an error, the replica is promoted, and the
// report, sent again, is published by the new master. When the old master
// resumes it runs what waited on its sockets before it hears it was
// replaced, the first degraded publish among them, whose id its stale
// dedupe sets do not hold. The report must still be pushed once.
func TestReportHeldByAPausedMasterIsPushedOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short")
	}
	ctx := context.Background()
	cluster := testredis.StartCluster(t, 3)
	const shards = 6
	keys := repo.NewKeys(shards)
	from := cluster.MasterAddr(t, cluster.Client(t), keys.Stream(0))
	replica := cluster.AddReplica(t, from)
	var old *testredis.Server
	var pushes *pushLog // on a master that stays one: PUBLISH reaches every node
	for i, a := range cluster.Addrs {
		if a == from {
			old = cluster.Nodes[i]
		} else if pushes == nil {
			pushes = subscribe(t, cluster.Nodes[i].Client())
		}
	}
	oldCl := redis.NewClient(&redis.Options{Addr: from})
	t.Cleanup(func() { oldCl.Close() })
	// The old master is known to the cluster (and so to the service) by a
	// proxy's port, which pauses it just before the first degraded
	// publish reaches it.
	paused := pauseBeforeDegradedPublish(t, old, oldCl, append([]string{replica.Addr}, cluster.Addrs...))

	s := startService(t, options{cluster: cluster, mutate: func(c *conf.Config) {
		c.Redis.Shards = shards
		c.Redis.Timeout = time.Second
	}})
	a := newActivity()
	user := int64(1)
	for keys.Shard(a, user, "firework") != 0 {
		user++
	}
	c := gift(a, user, "firework", 1)
	// Its window key holds a hash: its report script fails (WRONGTYPE),
	// on the new master too, and it is published on its own.
	if err := oldCl.HSet(ctx, keys.Current(0, a, user, "firework"), "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := oldCl.Do(ctx, "WAIT", 1, 1000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d %v: the replica must hold the hash", n, err)
	}

	req := &combo.ReportContributionRequest{Contribution: c}
	if resp, err := s.rpc.ReportContribution(ctx, req); err == nil {
		t.Fatalf("report whose degraded publish waits on a paused master: %+v, want an error", resp)
	}
	if !paused.Load() {
		t.Fatal("no degraded publish was held: the test did not test")
	}
	replica.TakeOver(t)
	promoted := time.Now()
	for {
		resp, err := s.rpc.ReportContribution(ctx, req)
		if err == nil {
			if !resp.Degraded {
				t.Fatalf("report sent again on the new master: %+v, want degraded", resp)
			}
			t.Logf("the report sent again taken %s after the promotion", time.Since(promoted).Round(time.Millisecond))
			break
		}
		if time.Since(promoted) > 10*time.Second {
			t.Fatalf("report still refused 10 s after the promotion: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pushes.waitFor(1, wait, forActivity(a))

	old.Resume()
	// Once it says it is a replica it has run what waited on its sockets;
	// a push it makes then comes after anything those pushed, over the
	// same cluster bus link.
	waitRole(t, oldCl, "slave", 10*time.Second, "the resumed old master")
	marker := gift(newActivity(), 1, "marker", 1)
	payload, err := push.Single(marker)
	if err != nil {
		t.Fatal(err)
	}
	if err := oldCl.Publish(ctx, push.Channel(marker.ActivityId), payload).Err(); err != nil {
		t.Fatal(err)
	}
	pushes.waitFor(1, wait, forActivity(marker.ActivityId))
	if got := pushes.matching(forActivity(a)); len(got) != 1 {
		t.Fatalf("report pushed %d times, want once: %+v", len(got), got)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("stop after the failover: %v", err)
	}
}

// pauseBeforeDegradedPublish puts a proxy in front of the cluster node
// node (cl talks to it), announces the proxy's port as the node's (waiting
// until every node in addrs knows it), and pauses node (SIGSTOP) just
// before the proxy passes it the first degraded publish (EVALSHA of
// degrade.lua). It tells whether it has.
func pauseBeforeDegradedPublish(t *testing.T, node *testredis.Server, cl *redis.Client, addrs []string) *atomic.Bool {
	t.Helper()
	src, err := os.ReadFile("repo/degrade.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	hash := []byte(hex.EncodeToString(sum[:]))
	var paused atomic.Bool
	proxy := testredis.Proxy(t, node.Addr, func(in, out net.Conn) {
		go func() { _, _ = io.Copy(in, out); in.Close() }()
		defer out.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				if bytes.Contains(buf[:n], hash) && paused.CompareAndSwap(false, true) {
					node.Pause()
				}
				if _, werr := out.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	ctx := context.Background()
	_, port, err := net.SplitHostPort(proxy)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ConfigSet(ctx, "cluster-announce-port", port).Err(); err != nil {
		t.Fatal(err)
	}
	id, err := cl.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, a := range addrs {
		if a == node.Addr {
			continue
		}
		n := redis.NewClient(&redis.Options{Addr: a})
		for !announces(ctx, n, id, port) {
			if time.Now().After(deadline) {
				n.Close()
				t.Fatalf("%s does not know node %s by port %s after 10 s", a, id, port)
			}
			time.Sleep(20 * time.Millisecond)
		}
		n.Close()
	}
	return &paused
}

// announces tells whether the node cl talks to knows node id by port.
func announces(ctx context.Context, cl *redis.Client, id, port string) bool {
	nodes, _ := cl.ClusterNodes(ctx).Result()
	for line := range strings.SplitSeq(nodes, "\n") {
		if strings.HasPrefix(line, id+" ") {
			return strings.Contains(line, ":"+port+"@")
		}
	}
	return false
}

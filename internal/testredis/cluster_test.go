package testredis

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// FailMaster watches the live nodes over TLS on a TLS cluster: a plain
// client got no answer and waited out its 20 s before failing the test.
func TestFailMasterOnTLSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := StartTLSCluster(t, 3)
	c.FailMaster(t, c.Addrs[0])
	cl := c.Nodes[1].Client()
	info, err := cl.ClusterInfo(context.Background()).Result()
	if err != nil || !strings.Contains(info, "cluster_state:fail") {
		t.Fatalf("CLUSTER INFO of a live node: %v, %q; want cluster_state:fail", err, info)
	}
}

// Every client of a test cluster keeps its own array of addresses. go-redis's
// cluster client appends each node it discovers (a replica added, a master
// promoted) to the very slice of ClusterOptions.Addrs it was given, under its
// own lock only: Cluster.Client gave every client c.Addrs itself, built by
// append with room to spare, and tests hand c.Addrs to NewClusterClient
// too, so two clients that discovered a new node wrote it into one array
// (the race 8c5dca4 fixed in the service's own clients).
func TestClusterClientsDoNotShareTheirAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := StartCluster(t, 3)
	if cap(c.Addrs) != len(c.Addrs) {
		t.Errorf("Cluster.Addrs has room for %d more in place: a client given it appends into it", cap(c.Addrs)-len(c.Addrs))
	}
	a, b := c.Client(t), c.Client(t)
	for name, got := range map[string][]string{"first": a.Options().Addrs, "second": b.Options().Addrs} {
		if &got[0] == &c.Addrs[0] {
			t.Errorf("the %s client's addresses are Cluster.Addrs' own array", name)
		}
		if cap(got) != len(got) {
			t.Errorf("the %s client's addresses have room for %d more in place", name, cap(got)-len(got))
		}
	}
	if &a.Options().Addrs[0] == &b.Options().Addrs[0] {
		t.Error("the two clients share one array of addresses")
	}
}

// The race itself, for the race detector: two clients of the cluster, one
// from Cluster.Client and one made of Cluster.Addrs as tests do, both
// discover a replica added after they loaded the slot map.
func TestClusterClientsDiscoverANodeWithoutARace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx := context.Background()
	c := StartCluster(t, 3)
	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = direct.Close() })
	clients := []*redis.ClusterClient{c.Client(t), direct}
	for _, cc := range clients {
		if err := cc.Ping(ctx).Err(); err != nil { // the slot map, without the replica
			t.Fatal(err)
		}
	}
	c.AddReplica(t, c.Addrs[0])
	var wg sync.WaitGroup
	for _, cc := range clients {
		wg.Go(func() {
			deadline := time.Now().Add(20 * time.Second)
			for {
				cc.ReloadState(ctx)
				replicas := 0
				_ = cc.ForEachSlave(ctx, func(context.Context, *redis.Client) error { replicas++; return nil })
				if replicas > 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Error("a client did not see the replica in 20 s")
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// A replica AddReplica returns can take its master's place at once: every
// live master hears its CLUSTER FAILOVER TAKEOVER and sends the dead
// master's slots to it. Before AddReplica waited for every node to know
// the replica, the live masters ignored its claim in 2 of 30 runs with
// busy loops taking the cores: they answered CLUSTERDOWN (the dead
// master's slots served by no one they knew of) for the whole 10 s; with
// cluster-require-full-coverage no, MOVED to the dead master 25 s on.
func TestAddedReplicaTakesOverAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx := context.Background()
	c := StartCluster(t, 3)
	const key = "{takeover}k"
	master := c.MasterAddr(t, c.Client(t), key)
	replica := c.AddReplica(t, master)
	var live []*redis.Client
	for _, n := range c.Nodes {
		if n.Addr == master {
			n.Kill()
		} else {
			live = append(live, n.Client())
		}
	}
	replica.TakeOver(t)
	want := "MOVED " // then the slot, then the replica's address
	deadline := time.Now().Add(10 * time.Second)
	for _, cl := range live {
		for {
			err := cl.Get(ctx, key).Err()
			if err != nil && strings.HasPrefix(err.Error(), want) && strings.HasSuffix(err.Error(), " "+replica.Addr) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still answers %v for the dead master's key, 10 s after its replica %s took over",
					cl.Options().Addr, err, replica.Addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

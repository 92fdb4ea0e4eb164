package testredis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testwait"
)

// FailMaster watches the live nodes over TLS on a TLS cluster: a plain
// client got no answer and waited out its 20 s before failing the test.
func TestFailMasterOnTLSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := StartTLSCluster(t, 3)
	for _, n := range c.Nodes { // the cluster bus over TLS too
		if got := configOf(t, n.Client(), "tls-cluster"); got != "yes" {
			t.Errorf("%s: tls-cluster %q, want yes", n.Addr, got)
		}
	}
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

// A test cluster is what StartCluster says: every slot served, by n
// masters every node knows. ConfigSet and NodeClients reach its replicas
// too, and a Migration half-moves a slot, then gives it to the target on
// every node.
func TestClusterHelpersDoWhatTheySay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx := context.Background()
	c := StartCluster(t, 3)
	for _, n := range c.Nodes {
		info, err := n.Client().ClusterInfo(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for field, want := range map[string]string{"cluster_state": "ok", "cluster_slots_assigned": "16384", "cluster_size": "3", "cluster_known_nodes": "3"} {
			if got := infoField(info, field); got != want {
				t.Errorf("%s: CLUSTER INFO %s %q, want %q", n.Addr, field, got, want)
			}
		}
	}
	cc := c.Client(t)
	const key = "{helpers}k"
	if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	from := c.MasterAddr(t, cc, key)
	replica := c.AddReplica(t, from)
	if info := replica.Client().Info(ctx, "replication").Val(); !strings.Contains(info, "master_link_status:up") {
		t.Errorf("replica %s not in sync when AddReplica returns:\n%s", replica.Addr, info)
	}
	fromID, replicaID := c.node(t, from).ClusterMyID(ctx).Val(), replica.Client().ClusterMyID(ctx).Val()
	for _, n := range c.Nodes { // as soon as AddReplica returns
		if !knowsReplica(ctx, n.Client(), replicaID, fromID) {
			t.Errorf("%s does not know %s as %s's replica when AddReplica returns", n.Addr, replica.Addr, from)
		}
	}
	// CLUSTER SLOTS lists a replica once the others have heard it has
	// data (a replication offset past 0).
	var masters []*redis.Client
	for _, n := range c.Nodes {
		masters = append(masters, n.Client())
	}
	testwait.For(t, "every master to list the new replica in CLUSTER SLOTS", func() bool {
		for _, m := range masters {
			if !strings.Contains(fmt.Sprint(m.ClusterSlots(ctx).Val()), replica.Addr) {
				return false
			}
		}
		return true
	})
	cc = c.Client(t) // one that loads the slot map with the replica
	c.ConfigSet(t, cc, "maxmemory-policy", "allkeys-lru")
	nodes := c.NodeClients(t)
	if len(nodes) != 4 {
		t.Errorf("NodeClients: %d clients, want the 3 masters and the replica", len(nodes))
	}
	for _, s := range append([]*Server{replica}, c.Nodes...) {
		if got := configOf(t, s.Client(), "maxmemory-policy"); got != "allkeys-lru" {
			t.Errorf("%s: maxmemory-policy %q after ConfigSet, want allkeys-lru", s.Addr, got)
		}
	}
	to := c.Addrs[0]
	if to == from {
		to = c.Addrs[1]
	}
	m := c.BeginMigration(t, key, from, to)
	slot := strconv.FormatInt(m.slot, 10)
	for addr, mark := range map[string]string{from: "[" + slot + "->-" + m.toID + "]", to: "[" + slot + "-<-"} {
		if nodes := c.node(t, addr).ClusterNodes(ctx).Val(); !strings.Contains(nodes, mark) {
			t.Errorf("%s: CLUSTER NODES lacks %s after BeginMigration:\n%s", addr, mark, nodes)
		}
	}
	m.Finish()
	for _, a := range c.Addrs {
		got, err := c.node(t, a).Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", m.slot).Int()
		if a == to && (err != nil || got != 1) || a != to && got != 0 {
			t.Errorf("%s: %d keys in slot %s after Finish (%v)", a, got, slot, err)
		}
		if err := c.node(t, a).Get(ctx, key).Err(); a != to && (err == nil || !strings.HasPrefix(err.Error(), "MOVED "+slot+" "+to)) {
			t.Errorf("%s: GET %s after Finish: %v, want MOVED to %s", a, key, err, to)
		}
	}
	c.KillMaster(t, cc, from)
	for _, a := range c.Addrs {
		if a != from {
			if got := configOf(t, c.node(t, a), "cluster-require-full-coverage"); got != "no" {
				t.Errorf("%s: cluster-require-full-coverage %q after KillMaster, want no", a, got)
			}
		}
	}
}

// waitOK fails, at its timeout, on a cluster whose node is not ok (here
// a node in no cluster, which serves no slot).
func TestClusterWaitOKFailsOnAClusterNotOK(t *testing.T) {
	c := &Cluster{Nodes: []*Server{StartClusterNode(t)}}
	if err := c.waitOK(300 * time.Millisecond); err == nil {
		t.Fatal("waitOK of a node in no cluster returned no error")
	}
}

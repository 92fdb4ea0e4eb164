package testredis

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a local Redis Cluster of masters only, for tests.
type Cluster struct {
	Nodes []*Server
	Addrs []string
	// TLS is the PKI of a cluster from StartTLSCluster (nil: plain TCP).
	TLS *TLSFiles
}

// StartCluster starts n cluster-enabled redis-servers on free ports, joins
// them with `redis-cli --cluster create` (slots spread over all masters)
// and waits until the cluster reports ok.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	return startCluster(tb, n, nil)
}

// StartTLSCluster is StartCluster with every node serving only TLS, the
// cluster bus too, with certificates of one new CA for 127.0.0.1.
func StartTLSCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	pki := NewTLSFiles(tb, tb.TempDir())
	return startCluster(tb, n, &pki)
}

func startCluster(tb testing.TB, n int, pki *TLSFiles) *Cluster {
	tb.Helper()
	require(tb, "redis-server")
	require(tb, "redis-cli")
	c := &Cluster{TLS: pki}
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}
	if pki != nil {
		args = append(args, "--tls-cluster", "yes")
	}
	for range n {
		s := &Server{Dir: tb.TempDir(), tb: tb, TLS: pki, opts: Options{Args: args}}
		// The cluster bus listens on port+10000: pick a port that leaves room.
		s.launch(clusterPort)
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	// No room to spare: go-redis's cluster client appends the nodes it
	// discovers to the slice of ClusterOptions.Addrs it was given (under
	// its own lock), and tests give it c.Addrs; with room in place, two
	// clients wrote a new node into one array.
	c.Addrs = slices.Clip(c.Addrs)
	var cli []string
	if pki != nil {
		cli = []string{"--tls", "--cacert", pki.CA, "--cert", pki.ClientCert, "--key", pki.ClientKey}
	}
	cli = append(cli, "--cluster", "create")
	cli = append(cli, c.Addrs...)
	cli = append(cli, "--cluster-replicas", "0", "--cluster-yes")
	// It waits for the nodes to join with no bound of its own: a cluster
	// that cannot join (its bus refused) would hang the test binary.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", cli...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitOK(20 * time.Second); err != nil {
		tb.Fatal(err)
	}
	return c
}

// Client returns a cluster client, closed when the test ends. It has its
// own copy of Addrs, which it appends the nodes it discovers to.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	o := &redis.ClusterOptions{Addrs: slices.Clip(slices.Clone(c.Addrs))}
	if c.TLS != nil {
		o.TLSConfig = c.TLS.ClientConfig(tb)
	}
	cc := redis.NewClusterClient(o)
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// NodeClients are clients of every node the cluster's slot map lists (masters
// and replicas), gathered so that a test checks each on its own goroutine:
// ForEachShard calls on goroutines of its own, where t.Fatal does not stop
// the test.
func (c *Cluster) NodeClients(tb testing.TB) []*redis.Client {
	tb.Helper()
	var mu sync.Mutex
	var nodes []*redis.Client
	if err := c.Client(tb).ForEachShard(context.Background(), func(_ context.Context, n *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, n)
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return nodes
}

// AddReplica starts a cluster node and joins it as a replica of the master
// at master (redis-cli --cluster add-node --cluster-slave). When it
// returns, the replica is in sync with its master and every node of the
// cluster knows it as that master's replica. It is not added to Nodes or
// Addrs. A plain TCP cluster only.
//
// Why every node must know it: add-node introduces the new node to its
// master alone (CLUSTER MEET), and the others learn of it only from the
// master's gossip. A node that has not ignores the replica's messages, so
// a master killed before it told them leaves a replica that no election
// can promote (no one votes for it) and whose CLUSTER FAILOVER TAKEOVER no
// one else hears: it said it served the dead master's slots, while the
// live masters answered CLUSTERDOWN for them or, with
// cluster-require-full-coverage no, sent them to the dead one (MOVED), 25 s
// on: with a kill and TAKEOVER right after AddReplica, while busy loops
// took the cores, in 2 of 30 runs, and in 2 of 23.
func (c *Cluster) AddReplica(tb testing.TB, master string) *Server {
	tb.Helper()
	if c.TLS != nil {
		tb.Fatal("testredis: AddReplica on a TLS cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // redis-cli waits with no bound of its own
	defer cancel()
	m := c.node(tb, master)
	id, err := m.ClusterMyID(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{Dir: tb.TempDir(), tb: tb, opts: Options{Args: []string{"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}}}
	s.launch(clusterPort)
	out, err := exec.CommandContext(ctx, "redis-cli", "--cluster", "add-node", s.Addr, master,
		"--cluster-slave", "--cluster-master-id", id).CombinedOutput()
	if err != nil {
		tb.Fatalf("redis-cli --cluster add-node: %v\n%s", err, out)
	}
	cl := s.Client()
	for {
		info, _ := cl.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if ctx.Err() != nil {
			tb.Fatalf("testredis: replica %s of %s not in sync after a minute", s.Addr, master)
		}
		time.Sleep(50 * time.Millisecond)
	}
	replicaID, err := cl.ClusterMyID(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, n := range c.Nodes {
		ncl := n.Client()
		for !knowsReplica(ctx, ncl, replicaID, id) {
			if ctx.Err() != nil {
				tb.Fatalf("testredis: %s does not know %s as a replica of %s after a minute", n.Addr, s.Addr, master)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return s
}

// knowsReplica says the node cl talks to lists the node replicaID, past
// its handshake, as a replica of masterID (CLUSTER NODES: id, address,
// flags, master id, ...).
func knowsReplica(ctx context.Context, cl *redis.Client, replicaID, masterID string) bool {
	nodes, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == replicaID && f[3] == masterID &&
			slices.Contains(strings.Split(f[2], ","), "slave") {
			return true
		}
	}
	return false
}

// ConfigSet sets a parameter on every node (CONFIG SET on a cluster
// client reaches one node only).
func (c *Cluster) ConfigSet(tb testing.TB, cc *redis.ClusterClient, param, value string) {
	tb.Helper()
	if err := cc.ForEachShard(context.Background(), func(ctx context.Context, n *redis.Client) error {
		return n.ConfigSet(ctx, param, value).Err()
	}); err != nil {
		tb.Fatal(err)
	}
}

// MasterAddr is the address of the master that serves key.
func (c *Cluster) MasterAddr(tb testing.TB, cc *redis.ClusterClient, key string) string {
	tb.Helper()
	m, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		tb.Fatal(err)
	}
	return m.Options().Addr
}

// KillMaster kills the master at addr. The other masters first stop
// requiring every slot to be served, so they keep serving theirs (without
// it the cluster refuses everything once the node is marked failed).
func (c *Cluster) KillMaster(tb testing.TB, cc *redis.ClusterClient, addr string) {
	tb.Helper()
	if err := cc.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		return m.ConfigSet(ctx, "cluster-require-full-coverage", "no").Err()
	}); err != nil {
		tb.Fatal(err)
	}
	for i, a := range c.Addrs {
		if a == addr {
			c.Nodes[i].Kill()
			return
		}
	}
	tb.Fatalf("testredis: no node at %s", addr)
}

// FailMaster kills the master at addr with the cluster's settings as they
// are (cluster-require-full-coverage yes, Redis's default) and waits until
// every live node declares the cluster failed: they then refuse every key.
func (c *Cluster) FailMaster(tb testing.TB, addr string) {
	tb.Helper()
	var live []*Server
	for i, a := range c.Addrs {
		if a == addr {
			c.Nodes[i].Kill()
		} else {
			live = append(live, c.Nodes[i])
		}
	}
	if len(live) == len(c.Addrs) {
		tb.Fatalf("testredis: no node at %s", addr)
	}
	deadline := time.Now().Add(20 * time.Second) // a few cluster-node-timeouts
	for _, n := range live {
		a := n.Addr
		cl := redis.NewClient(n.options()) // over TLS on a TLS cluster
		for {
			info, _ := cl.ClusterInfo(context.Background()).Result()
			if strings.Contains(info, "cluster_state:fail") {
				break
			}
			if time.Now().After(deadline) {
				cl.Close()
				tb.Fatalf("testredis: %s still sees the cluster up 20 s after %s was killed", a, addr)
			}
			time.Sleep(100 * time.Millisecond)
		}
		cl.Close()
	}
}

func (c *Cluster) waitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		for _, n := range c.Nodes {
			cl := redis.NewClient(n.options())
			info, err := cl.ClusterInfo(context.Background()).Result()
			_ = cl.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testredis: cluster not ok after %s", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func clusterPort(tb testing.TB) int {
	for range 100 {
		p := FreePort(tb)
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p
	}
	tb.Fatal("testredis: no free port pair for a cluster node")
	return 0
}

// Migration moves one slot from one master to another by hand, the steps
// `redis-cli --cluster reshard` takes: CLUSTER SETSLOT IMPORTING on the
// target and MIGRATING on the source, MIGRATE of the slot's keys, then
// SETSLOT NODE on every node. Between Begin and Finish the slot is
// half-moved, and a test can act in any state it wants.
type Migration struct {
	tb         testing.TB
	c          *Cluster
	slot       int64
	from, to   *redis.Client
	toID, host string
	port       string
}

// BeginMigration marks the slot of key as moving from the master at from
// to the one at to.
func (c *Cluster) BeginMigration(tb testing.TB, key, from, to string) *Migration {
	tb.Helper()
	m := &Migration{tb: tb, c: c, from: c.node(tb, from), to: c.node(tb, to)}
	ctx := context.Background()
	var err error
	if m.slot, err = m.from.ClusterKeySlot(ctx, key).Result(); err != nil {
		tb.Fatal(err)
	}
	fromID, err := m.from.ClusterMyID(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	if m.toID, err = m.to.ClusterMyID(ctx).Result(); err != nil {
		tb.Fatal(err)
	}
	m.host, m.port, _ = strings.Cut(to, ":")
	if err := m.to.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", fromID).Err(); err != nil {
		tb.Fatal(err)
	}
	if err := m.from.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.toID).Err(); err != nil {
		tb.Fatal(err)
	}
	return m
}

// Keys lists the keys of the slot still on the source, newest first (the
// order in which redis-cli moves them).
func (m *Migration) Keys() []string {
	m.tb.Helper()
	ks, err := m.from.ClusterGetKeysInSlot(context.Background(), int(m.slot), 1<<20).Result()
	if err != nil {
		m.tb.Fatal(err)
	}
	return ks
}

// Move migrates keys to the target.
func (m *Migration) Move(keys ...string) {
	m.tb.Helper()
	if len(keys) == 0 {
		return
	}
	args := []any{"MIGRATE", m.host, m.port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	if err := m.from.Do(context.Background(), args...).Err(); err != nil {
		m.tb.Fatalf("MIGRATE %v: %v", keys, err)
	}
}

// Finish moves the keys left and gives the slot to the target on every node.
func (m *Migration) Finish() {
	m.tb.Helper()
	m.Move(m.Keys()...)
	ctx := context.Background()
	// The target first, then the source, then the others, as redis-cli.
	nodes := []*redis.Client{m.to, m.from}
	for _, a := range m.c.Addrs {
		if a != m.to.Options().Addr && a != m.from.Options().Addr {
			nodes = append(nodes, m.c.node(m.tb, a))
		}
	}
	for _, n := range nodes {
		if err := n.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID).Err(); err != nil {
			m.tb.Fatal(err)
		}
	}
}

// node is a client of the cluster's node at addr alone.
func (c *Cluster) node(tb testing.TB, addr string) *redis.Client {
	tb.Helper()
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n.Client()
		}
	}
	tb.Fatalf("testredis: no node at %s", addr)
	return nil
}

// TakeOver promotes s, a Cluster replica, at once (CLUSTER FAILOVER
// TAKEOVER), as an operator would, and waits until it says it is a
// master. Tests use it to test what follows a promotion, not the
// cluster's own election, which once took over 30 s on a loaded CI
// machine. The election may also have won first on such a machine (a
// master silent for cluster-node-timeout, 2 s, while the test waited on
// it): then Redis refuses the TAKEOVER ("send it to a replica"), and the
// promotion the test wanted has come by another road.
func (s *Server) TakeOver(tb testing.TB) {
	tb.Helper()
	cl := redis.NewClient(s.options())
	defer cl.Close()
	if err := cl.Do(context.Background(), "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		if !isMaster(cl) {
			tb.Fatalf("testredis: CLUSTER FAILOVER TAKEOVER on %s: %v", s.Addr, err)
		}
		tb.Logf("testredis: %s was already promoted by the cluster's election (%v)", s.Addr, err)
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for !isMaster(cl) {
		if time.Now().After(deadline) {
			tb.Fatalf("testredis: %s not a master 10 s after CLUSTER FAILOVER TAKEOVER", s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isMaster tells whether the node cl talks to answers ROLE as a master.
func isMaster(cl *redis.Client) bool {
	r, _ := cl.Do(context.Background(), "ROLE").Slice()
	return len(r) > 0 && r[0] == "master"
}

// FailedReplica adds a replica of the master at master (AddReplica),
// kills it, and waits until every node of Nodes flags it fail in CLUSTER
// NODES, so that no slot map read from them lists it. It returns the
// replica's address and node id.
func (c *Cluster) FailedReplica(tb testing.TB, master string) (addr, id string) {
	tb.Helper()
	ctx := context.Background()
	replica := c.AddReplica(tb, master)
	rc := replica.Client()
	id, err := rc.ClusterMyID(ctx).Result()
	rc.Close()
	if err != nil {
		tb.Fatal(err)
	}
	replica.Kill()
	deadline := time.Now().Add(30 * time.Second) // a few cluster-node-timeouts (2 s)
	for _, n := range c.Nodes {
		cl := n.Client()
		for !flaggedFailed(cl.ClusterNodes(ctx).Val(), id) {
			if time.Now().After(deadline) {
				cl.Close()
				tb.Fatalf("testredis: %s does not flag replica %s failed 30 s after its kill", n.Addr, replica.Addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
	return replica.Addr, id
}

// flaggedFailed says whether CLUSTER NODES's nodes flags the node id fail.
func flaggedFailed(nodes, id string) bool {
	for line := range strings.SplitSeq(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == id && slices.Contains(strings.Split(f[2], ","), "fail") {
			return true
		}
	}
	return false
}

// StartClusterNode starts a cluster-enabled redis-server in no cluster,
// as `redis-cli --cluster del-node` leaves a removed node that is still
// running (its CLUSTER RESET SOFT): it answers CLUSTER SLOTS with no slot.
func StartClusterNode(tb testing.TB) *Server {
	tb.Helper()
	require(tb, "redis-server")
	s := &Server{Dir: tb.TempDir(), tb: tb, opts: Options{Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}}}
	s.launch(clusterPort)
	return s
}

package repo_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/repo"
)

// Evicting names a node whose maxmemory-policy could evict the service's
// keys, and none on Redis's default, noeviction.
func TestEvictingNamesANodeThatMayEvict(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	r := repo.New(rdb, settings())
	got, err := r.Evicting(ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("on noeviction: %v %v, want none", got, err)
	}
	// Every policy but noeviction may evict: a volatile-* one takes the
	// windows and dedupe sets, which have a TTL.
	for _, policy := range []string{"allkeys-lru", "volatile-lfu", "allkeys-random", "volatile-ttl"} {
		if err := rdb.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		got, err = r.Evicting(ctx)
		if err != nil || len(got) != 1 || got[srv.Addr] != policy {
			t.Fatalf("on %s: %v %v, want %s: %s", policy, got, err, srv.Addr, policy)
		}
	}
}

// On a Redis Cluster every master is asked.
func TestEvictingAsksEveryMaster(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	ctx := context.Background()
	cc := c.Client(t)
	r := repo.New(cc, settings())
	if got, err := r.Evicting(ctx); err != nil || len(got) != 0 {
		t.Fatalf("on noeviction: %v %v, want none", got, err)
	}
	c.ConfigSet(t, cc, "maxmemory-policy", "volatile-lru")
	got, err := r.Evicting(ctx)
	if err != nil || len(got) != 3 {
		t.Fatalf("on volatile-lru: %v %v, want the 3 masters", got, err)
	}
}

// A Cluster replica on an evicting policy is named too: a failover makes
// it the master, with its own policy, as the Sentinel path warns.
func TestEvictingNamesAClusterReplica(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	ctx := context.Background()
	cc := c.Client(t)
	replica := c.AddReplica(t, c.Addrs[0])
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	t.Cleanup(func() { _ = rc.Close() })
	if err := rc.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	// CLUSTER SLOTS, which the client reads from any node, lists a replica
	// once that node has heard the replica's replication offset (a gossip
	// round after sync): each node in its own time.
	deadline := time.Now().Add(20 * time.Second)
	for _, addr := range append(slices.Clone(c.Addrs), replica.Addr) {
		node := redis.NewClient(&redis.Options{Addr: addr})
		for !slotsListReplica(ctx, node, replica.Addr) {
			if time.Now().After(deadline) {
				t.Fatalf("CLUSTER SLOTS of %s does not list the replica %s after 20 s", addr, replica.Addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = node.Close()
	}
	r := repo.New(cc, settings())
	got, err := r.Evicting(ctx)
	if err != nil || len(got) != 1 || got[replica.Addr] != "allkeys-lru" {
		t.Fatalf("Evicting = %v %v, want the replica %s on allkeys-lru", got, err, replica.Addr)
	}
}

// A master down at start leaves its own policy unread, not the others':
// each live master on an evicting policy is still named, with the error
// naming the one that did not answer.
func TestEvictingNamesTheLiveMastersWhenOneIsDown(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	ctx := context.Background()
	cc := c.Client(t)
	c.ConfigSet(t, cc, "maxmemory-policy", "allkeys-lru")
	down := c.Addrs[0]
	c.KillMaster(t, cc, down)
	r := repo.New(cc, settings())
	got, err := r.Evicting(ctx)
	if err == nil || !strings.Contains(err.Error(), down) {
		t.Errorf("with %s down: error %v, want one naming it", down, err)
	}
	if len(got) != 2 || got[c.Addrs[1]] != "allkeys-lru" || got[c.Addrs[2]] != "allkeys-lru" {
		t.Fatalf("with %s down: %v, want the two live masters %v on allkeys-lru", down, got, c.Addrs[1:])
	}
}

// MaxmemoryPolicy's errors name the operation, as every repo error does:
// main logs those of the Sentinels' replicas with only the replica's
// address before them.
func TestMaxmemoryPolicyErrorNamesTheOperation(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", testredis.FreePort(t)), MaxRetries: -1})
	defer c.Close()
	_, err := repo.MaxmemoryPolicy(context.Background(), c)
	if err == nil || !strings.HasPrefix(err.Error(), "repo.MaxmemoryPolicy: ") {
		t.Fatalf("error %v, want one that begins with repo.MaxmemoryPolicy", err)
	}
}

// A node whose INFO reply go-redis's parser panics on (a line before any
// "# Section" header, as a proxy may send) is an error naming the
// operation, not a panic: the nodes are read on goroutines no loop's
// recover reaches.
func TestMaxmemoryPolicyOfAnUnparsableReplyIsAnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go answerInfo(conn, "maxmemory_policy:noeviction\r\n")
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	policy, err := repo.MaxmemoryPolicy(context.Background(), c)
	if err == nil || !strings.HasPrefix(err.Error(), "repo.MaxmemoryPolicy: ") || policy != "" {
		t.Fatalf("MaxmemoryPolicy = %q, %v; want an error naming repo.MaxmemoryPolicy", policy, err)
	}
}

// answerInfo reads RESP arrays of bulk strings from conn and answers INFO
// with the bulk string info, and any other command (go-redis's HELLO, say)
// with an error, until conn closes.
func answerInfo(conn net.Conn, info string) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		var n int
		if _, err := fmt.Sscanf(line, "*%d", &n); err != nil {
			return
		}
		var args []string
		for range n { // each argument: its $length line, then itself
			if _, err := r.ReadString('\n'); err != nil {
				return
			}
			arg, err := r.ReadString('\n')
			if err != nil {
				return
			}
			args = append(args, strings.TrimSuffix(arg, "\r\n"))
		}
		reply := "-ERR unknown command\r\n"
		if len(args) > 0 && strings.EqualFold(args[0], "info") {
			reply = fmt.Sprintf("$%d\r\n%s\r\n", len(info), info)
		}
		if _, err := conn.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// slotsListReplica says node's CLUSTER SLOTS lists addr as a node of some
// slot range.
func slotsListReplica(ctx context.Context, node *redis.Client, addr string) bool {
	slots, _ := node.ClusterSlots(ctx).Result()
	for _, r := range slots {
		for _, n := range r.Nodes {
			if n.Addr == addr {
				return true
			}
		}
	}
	return false
}

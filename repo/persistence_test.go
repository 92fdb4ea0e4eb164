package repo_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/repo"
)

// NotAppendOnly names a Redis that keeps no append-only file, and none
// once AOF is on: restarted from an RDB snapshot, the first pushes a window
// again and loses one acknowledged since, with nothing counting either.
func TestNotAppendOnlyNamesARedisWithoutAOF(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{}) // appendonly no
	ctx := context.Background()
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	r := repo.New(rdb, settings())
	got, err := r.NotAppendOnly(ctx)
	if err != nil || !slices.Equal(got, []string{srv.Addr}) {
		t.Fatalf("with appendonly no: %v %v, want [%s]", got, err, srv.Addr)
	}
	aof := testredis.Start(t, testredis.Options{AppendOnly: true})
	ac := aof.Client()
	t.Cleanup(func() { ac.Close() })
	if got, err := repo.New(ac, settings()).NotAppendOnly(ctx); err != nil || len(got) != 0 {
		t.Fatalf("with appendonly yes: %v %v, want none", got, err)
	}
}

// On a Redis Cluster each node is read on its own: one master turned to
// AOF is not named, the two others still are.
func TestNotAppendOnlyReadsEveryClusterNode(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	ctx := context.Background()
	cc := c.Client(t)
	one := redis.NewClient(&redis.Options{Addr: c.Addrs[0]})
	t.Cleanup(func() { _ = one.Close() })
	if err := one.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := repo.New(cc, settings()).NotAppendOnly(ctx)
	want := slices.Sorted(slices.Values(c.Addrs[1:]))
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("NotAppendOnly = %v %v, want %v (the masters without AOF)", got, err, want)
	}
}

// A Cluster node marked failed is in no slot map, so nothing asks it: it
// is named as not read, not left out as if removed (main's node watches
// forget a node left out, and cleared the gauge of a crashed node without
// AOF). Once the Cluster forgets it, it is left out.
func TestAClusterNodeMarkedFailedIsNamedUnread(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	ctx := context.Background()
	replica, id := c.FailedReplica(t, c.Addrs[0])
	var masters []*redis.Client
	for _, a := range c.Addrs {
		m := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = m.Close() })
		masters = append(masters, m)
	}
	r := repo.New(c.Client(t), settings())
	read, err := r.AppendOnly(ctx)
	failed, ok := errors.AsType[repo.FailedNode](err)
	if !ok || failed.Addr != replica || failed.ID != id ||
		!strings.Contains(err.Error(), replica+": not asked, marked failed by the Cluster") ||
		!strings.Contains(err.Error(), "CLUSTER FORGET "+id) {
		t.Fatalf("AppendOnly error %v, want %s (node %s) named as failed, with the CLUSTER FORGET to run", err, replica, id)
	}
	if len(read) != 3 {
		t.Errorf("read %v, want the three masters", read)
	}
	for _, m := range masters {
		if err := m.ClusterForget(ctx, id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if read, err := r.AppendOnly(ctx); err != nil || len(read) != 3 {
		t.Fatalf("once forgotten by the Cluster: %v %v, want the three masters and no error", read, err)
	}
}

// A user denied CLUSTER NODES reads every node all the same, and the
// error says what the reading could not tell and the grant it needs.
func TestAClusterUserDeniedClusterNodesIsTold(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	ctx := context.Background()
	for _, a := range c.Addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		err := n.Do(ctx, "ACL", "SETUSER", "nonodes", "on", ">pw", "~*", "&*", "+@all", "-cluster|nodes").Err()
		n.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Username: "nonodes", Password: "pw"})
	t.Cleanup(func() { _ = cc.Close() })
	read, err := repo.New(cc, settings()).AppendOnly(ctx)
	if len(read) != 3 || err == nil || !strings.Contains(err.Error(), "CLUSTER NODES, which tells a failed node from one removed") ||
		!strings.Contains(err.Error(), "+cluster|nodes") || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("AppendOnly = %v, %v; want the three masters read and the denied CLUSTER NODES named with its grant", read, err)
	}
}

// A CLUSTER NODES line flagged fail names its node as go-redis names the
// nodes it asks: IPv6 bracketed, and by its announced hostname too.
func TestFailedNodeOfReadsEachAddressForm(t *testing.T) {
	for _, c := range []struct {
		line           string
		failed         bool
		addr, hostAddr string
	}{
		{"e7d1 127.0.0.1:30004@40004 slave,fail 5c2a 0 1 4 connected", true, "127.0.0.1:30004", ""},
		{"e7d1 ::1:30004@40004,redis-4 slave,fail 5c2a 0 1 4 connected", true, "[::1]:30004", "redis-4:30004"},
		{"e7d1 10.0.0.4:30004@40004,redis-4.svc,shard-id=ab master,fail - 0 1 4 connected", true, "10.0.0.4:30004", "redis-4.svc:30004"},
		{"e7d1 127.0.0.1:30004@40004 slave,fail? 5c2a 0 1 4 connected", false, "", ""},
		{"e7d1 127.0.0.1:30004@40004 myself,master - 0 1 4 connected 0-5460", false, "", ""},
		{"", false, "", ""},
	} {
		got, failed := repo.FailedNodeOf(c.line)
		if failed != c.failed || (failed && (got.Addr != c.addr || got.HostAddr != c.hostAddr || got.ID != "e7d1")) {
			t.Errorf("%q: %+v %v; want failed %v at %q, by hostname %q", c.line, got, failed, c.failed, c.addr, c.hostAddr)
		}
		// Its message names it as every other line does (go-redis, the
		// start checks and the watches call it by its hostname), and by
		// the address CLUSTER NODES gives.
		if msg := got.Error(); failed && c.hostAddr != "" && !strings.HasPrefix(msg, c.hostAddr+" ("+c.addr+"): not asked") {
			t.Errorf("%q: the message %q, want it to name %s first, then %s", c.line, msg, c.hostAddr, c.addr)
		}
	}
}

// A node that does not answer is named in NotAppendOnly's error, not
// passed over as one that keeps an append-only file: the start check
// would otherwise say nothing of a node it never read.
func TestNotAppendOnlyNamesANodeThatDidNotAnswer(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testredis.FreePort(t))
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	got, err := repo.New(c, settings()).NotAppendOnly(context.Background())
	if err == nil || !strings.Contains(err.Error(), addr) || len(got) != 0 {
		t.Fatalf("a node that refuses connections: %v %v, want an error naming %s", got, err, addr)
	}
}

package repo_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

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
	replica := c.AddReplica(t, c.Addrs[0])
	rc := replica.Client()
	id, err := rc.ClusterMyID(ctx).Result()
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	replica.Kill()
	var masters []*redis.Client
	for _, a := range c.Addrs {
		m := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = m.Close() })
		masters = append(masters, m)
	}
	deadline := time.Now().Add(30 * time.Second) // a few cluster-node-timeouts (2 s)
	for {
		nodes := masters[1].ClusterNodes(ctx).Val()
		if strings.Contains(nodes, replica.Addr) && strings.Contains(nodes, ",fail ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not marked failed within 30 s:\n%s", replica.Addr, nodes)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := repo.New(c.Client(t), settings())
	read, err := r.AppendOnly(ctx)
	if want := "not asked, marked failed by the Cluster"; err == nil || !strings.Contains(err.Error(), replica.Addr+": "+want) {
		t.Fatalf("AppendOnly error %v, want %s named: %s", err, replica.Addr, want)
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

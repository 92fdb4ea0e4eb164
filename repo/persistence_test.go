package repo_test

import (
	"context"
	"slices"
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

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// CONTRACT §4: every key under combo:, only streams without a TTL, after
// every write flow (open, join, smaller-id rewrite, park, duplicate,
// degraded, batch) and before and after the flushes.
func TestEveryKeyIsPrefixedAndOnlyStreamsLackATTL(t *testing.T) {
	s := startService(t, options{mutate: func(c *conf.Config) {
		c.Window.Size = time.Second
		c.Worker.ClaimIdle = conf.DefaultClaimIdle(c.Window)
	}})
	ctx := context.Background()
	a := newActivity()
	c1 := gift(a, 1, "a:{b} c", 1)
	c0 := gift(a, 1, "a:{b} c", 1)
	c0.Id = c1.Id - 1000 // smaller id: a rewrite
	park := gift(a, 1, "a:{b} c", 1)
	park.CreatedAt = c1.CreatedAt + 1000 // past W: parks the first window
	for _, c := range []*combo.Contribution{c1, c0, c1, park} {
		s.report(c)
	}
	bad := gift(a, 2, "rose", 1) // degraded: its window key has the wrong type
	s.rdb.HSet(ctx, repo.NewKeys(1).Current(0, a, 2, "rose"), "x", "y")
	if r := s.report(bad); !r.Degraded {
		t.Fatalf("want degraded, got %+v", r)
	}
	s.rdb.Del(ctx, repo.NewKeys(1).Current(0, a, 2, "rose"))
	batch := []*combo.Contribution{gift(a, 3, "x", 1), gift(a, 4, "y", 2)}
	if _, err := s.rpc.ReportContributions(ctx, &combo.ReportContributionsRequest{Contributions: batch}); err != nil {
		t.Fatal(err)
	}
	sweep := func(when string) {
		for _, k := range s.rdb.Keys(ctx, "*").Val() {
			if !strings.HasPrefix(k, "combo:") {
				t.Errorf("%s: key %q outside the combo: prefix", when, k)
			}
			typ := s.rdb.Type(ctx, k).Val()
			ttl := s.rdb.PTTL(ctx, k).Val()
			if typ != "stream" && ttl == -1 {
				t.Errorf("%s: %s key %q has no TTL", when, typ, k)
			}
		}
	}
	sweep("open")
	s.pushes.waitFor(4, 10*time.Second, forActivity(a))
	sweep("flushed")
}

// CONTRACT §4 redis.db: the service's keys go to that database.
func TestRedisDBHoldsTheKeys(t *testing.T) {
	rs := testredis.Start(t, testredis.Options{})
	s := startService(t, options{redis: rs, mutate: func(c *conf.Config) {
		c.Redis.DB = 3
		c.Window.Size = 2 * time.Second
		c.Worker.ClaimIdle = conf.DefaultClaimIdle(c.Window)
	}})
	a := newActivity()
	s.report(gift(a, 1, "rose", 1))
	ctx := context.Background()
	db3 := redis.NewClient(&redis.Options{Addr: rs.Addr, DB: 3})
	defer db3.Close()
	key := repo.NewKeys(1).Current(0, a, 1, "rose")
	if db3.Exists(ctx, key).Val() != 1 || s.rdb.Exists(ctx, key).Val() != 0 {
		t.Fatalf("window key in db3=%d db0=%d, want only db 3", db3.Exists(ctx, key).Val(), s.rdb.Exists(ctx, key).Val())
	}
	s.pushes.waitFor(1, 10*time.Second, forActivity(a))
}

// CONTRACT §1 code 3: a failure that is neither the caller's nor Redis
// being unreachable. Here the degraded publish is refused by ACL (NOPERM).
func TestAFailureNeitherTheCallersNorRedisDownIsInternal(t *testing.T) {
	rs := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	if err := rs.Client().Do(ctx, "ACL", "SETUSER", "combo", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	s := startService(t, options{redis: rs, mutate: func(c *conf.Config) { c.Redis.Username, c.Redis.Password = "combo", "pw" }})
	a := newActivity()
	s.rdb.HSet(ctx, repo.NewKeys(1).Current(0, a, 1, "rose"), "x", "y")
	_, err := s.rpc.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: gift(a, 1, "rose", 1)})
	ce := comboErr(t, err)
	if ce.Code != 3 {
		t.Errorf("code %d (%s), want 3 (INTERNAL)", ce.Code, ce.Message)
	}
}
